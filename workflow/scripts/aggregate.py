import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.report.leaderboard import aggregate  # noqa: E402
from celldag.tracks import tracks_of  # noqa: E402

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
)
