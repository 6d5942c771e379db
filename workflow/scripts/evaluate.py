import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.evaluate import score_dataset  # noqa: E402

joblog.start(snakemake.log[0])
score_dataset(
    prepared_paths=list(snakemake.input.prepared),
    output_paths=list(snakemake.input.outputs),
    table_paths=list(snakemake.input.tables),
    scores_path=snakemake.output[0],
    track=snakemake.params.track,
    n_quartets=snakemake.params.n_quartets,
    markers=snakemake.params.markers,
)
