import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.embeddings.job import write_gene_table  # noqa: E402

joblog.start(snakemake.log[0])
write_gene_table(
    embedding_id=snakemake.wildcards.embedding,
    entry=snakemake.params.entry,
    inputs=dict(snakemake.input.items()),
    table_path=snakemake.output.table,
    facts_path=snakemake.output.facts,
    threads=snakemake.threads,
)
