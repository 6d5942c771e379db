from celldag.jobs import joblog
from celldag.report.leaderboard import aggregate
from celldag.tracks import tracks_of

joblog.start(snakemake.log[0])
aggregate(
    score_paths=snakemake.input.scores,
    record_paths=snakemake.input.records,
    scores_path=snakemake.output.scores,
    runs_path=snakemake.output.runs,
    leaderboard_path=snakemake.output.leaderboard,
    baseline=snakemake.params.baseline,
    paired=snakemake.params.paired,
    notes=snakemake.params.notes,
    tracks=tracks_of(snakemake.params.tracks),
    kinds=snakemake.params.kinds,
    alpha=snakemake.params.alpha,
    floor_cards_path=snakemake.output.floor_cards,
    noise_path=snakemake.params.noise,
    qc_path=snakemake.output.qc,
    cost_path=snakemake.params.cost,
    missing=snakemake.params.missing,
)
