import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.report.html import write_index  # noqa: E402
from celldag.tracks import tracks_of  # noqa: E402

joblog.start(snakemake.log[0])
write_index(
    scores_path=snakemake.input.scores,
    runs_path=snakemake.input.runs,
    figure_paths=list(snakemake.input.figures),
    figure_captions=snakemake.params.captions,
    index_path=snakemake.output.index,
    leaderboard_path=snakemake.output.leaderboard,
    tracks=tracks_of(snakemake.params.tracks),
    kinds=snakemake.params.kinds,
    baseline=snakemake.params.baseline,
    paired=snakemake.params.paired,
    notes=snakemake.params.notes,
    links=[snakemake.input.leaderboard, snakemake.input.scores, snakemake.input.runs],
)
