import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.download import fetch_registry_file  # noqa: E402

joblog.start(snakemake.log[0])
fetch_registry_file(snakemake.params.file, snakemake.output[0], pin_file=snakemake.params.pins)
