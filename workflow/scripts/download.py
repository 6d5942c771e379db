from celldag import joblog
from celldag.download import fetch_registry_file

joblog.start(snakemake.log[0])
fetch_registry_file(snakemake.params.file, snakemake.output[0], pin_file=snakemake.params.pins)
