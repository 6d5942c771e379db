from celldag.jobs import joblog
from celldag.jobs.download import configured_mirror, fetch_registry_file

joblog.start(snakemake.log[0])
# the mirror from the config, not params: a mirror set or changed is no rerun trigger of downloads already made
mirror = configured_mirror(snakemake.config["downloads"])
fetch_registry_file(snakemake.params.file, snakemake.output[0], pin_file=snakemake.params.pins, mirror=mirror)
