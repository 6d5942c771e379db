from celldag.jobs import joblog
from celldag.jobs.prepare import write_dataset_genes

joblog.start(snakemake.log[0])
write_dataset_genes(snakemake.input[0], snakemake.output[0])
