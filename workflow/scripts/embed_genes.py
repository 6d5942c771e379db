from celldag.embeddings.job import write_gene_table
from celldag.jobs import joblog

joblog.start(snakemake.log[0])
write_gene_table(
    embedding_id=snakemake.wildcards.embedding,
    entry=snakemake.params.entry,
    inputs=dict(snakemake.input.items()),
    table_path=snakemake.output.table,
    facts_path=snakemake.output.facts,
    threads=snakemake.threads,
    dataset_entry=snakemake.params.dataset_entry,
)
