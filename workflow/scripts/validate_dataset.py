from celldag.commands.validate import write_validation
from celldag.jobs import joblog

joblog.start(snakemake.log[0])
write_validation(
    snakemake.wildcards.dataset, snakemake.params.entry, dict(snakemake.input.items()), snakemake.output[0]
)
