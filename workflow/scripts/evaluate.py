import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.scoring import score_dataset  # noqa: E402
from celldag.tracks import load_track  # noqa: E402

joblog.start(snakemake.log[0])
score_dataset(
    prepared_paths=list(snakemake.input.prepared),
    output_paths=list(snakemake.input.outputs),
    table_paths=list(snakemake.input.tables),
    scores_path=snakemake.output.scores,
    track_id=snakemake.params.dataset["track"],
    track=load_track(snakemake.params.track["definition"]),
    dataset=snakemake.params.dataset,
    evaluation=snakemake.params.evaluation,
)
