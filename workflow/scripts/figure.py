from celldag.jobs import joblog
from celldag.report.figures import draw_figure, figure_data
from celldag.tracks import load_track

joblog.start(snakemake.log[0])
track = load_track(snakemake.params.track["definition"])
figure = track.figure(snakemake.params.figure)
data = figure_data(
    dataset=snakemake.wildcards.dataset,
    dataset_entry=snakemake.params.dataset,
    track_id=snakemake.params.track_id,
    track=track,
    seed=snakemake.params.seed,
    evaluation=snakemake.params.evaluation,
    kinds=snakemake.params.kinds,
    scores_path=snakemake.input.get("scores"),
    record_paths=list(snakemake.input.get("records", [])),
    prepared_path=snakemake.input.get("prepared"),
    output_paths=list(snakemake.input.get("outputs", [])),
    table_paths=list(snakemake.input.get("tables", [])),
)
draw_figure(figure=figure, data=data, path=snakemake.output[0])
