import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.prepare import write_prepared_dataset  # noqa: E402
from celldag.tracks import load_track  # noqa: E402

joblog.start(snakemake.log[0])
write_prepared_dataset(
    snakemake.wildcards.dataset,
    snakemake.params.entry,
    load_track(snakemake.params.track["definition"]),
    int(snakemake.wildcards.seed),
    snakemake.output[0],
    files=dict(snakemake.input.items()),
)
