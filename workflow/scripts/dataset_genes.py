import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.prepare import write_dataset_genes  # noqa: E402

joblog.start(snakemake.log[0])
write_dataset_genes(snakemake.input[0], snakemake.output[0])
