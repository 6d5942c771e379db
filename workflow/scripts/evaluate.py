from celldag.jobs import joblog
from celldag.jobs.evaluate import score_dataset
from celldag.tracks import load_track

joblog.start(snakemake.log[0])
score_dataset(
    prepared_paths=list(snakemake.input.prepared),
    output_paths=list(snakemake.input.outputs),
    table_paths=list(snakemake.input.tables),
    scores_path=snakemake.output.scores,
    track_id=snakemake.params.track_id,
    track=load_track(snakemake.params.track["definition"]),
    dataset=snakemake.params.dataset,
    evaluation=snakemake.params.evaluation,
    chained_input_paths=list(getattr(snakemake.input, "inputs", [])),  # a chained track's (rule_inputs)
)
