from celldag.commands.annotate import annotate, request_of
from celldag.jobs import joblog

joblog.start(snakemake.log[0])
request = request_of(snakemake.params.settings, snakemake.input.reference, snakemake.output[0])
annotate(request, snakemake.params.methods)
