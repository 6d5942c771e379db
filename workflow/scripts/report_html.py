from celldag.jobs import joblog
from celldag.report.html import write_index
from celldag.tracks import tracks_of

joblog.start(snakemake.log[0])
write_index(
    scores_path=snakemake.input.scores,
    runs_path=snakemake.input.runs,
    figure_paths=list(snakemake.input.figures),
    figure_captions=snakemake.params.captions,
    figure_tracks=snakemake.params.figure_tracks,
    index_path=snakemake.output.index,
    leaderboard_path=snakemake.output.leaderboard,
    tracks=tracks_of(snakemake.params.tracks),
    kinds=snakemake.params.kinds,
    baseline=snakemake.params.baseline,
    paired=snakemake.params.paired,
    notes=snakemake.params.notes,
    published=snakemake.params.published,
    published_context=snakemake.params.published_context,
    alpha=snakemake.params.alpha,
    floor_cards_path=snakemake.input.floor_cards,
    qc_path=snakemake.input.qc,
    links=[
        snakemake.input.leaderboard,
        snakemake.input.scores,
        snakemake.input.floor_cards,
        snakemake.input.qc,
        snakemake.input.runs,
    ],
)
