"""Rule embed_genes: a registry entry + a dataset's gene list → results/embeddings/<id>/<dataset>-<data_key>.parquet."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_gene_table(
    *,
    embedding_id: str,
    entry: dict,
    inputs: dict[str, str],
    table_path: str,
    facts_path: str,
    threads: int = 1,
    dataset_entry: Mapping | None = None,
) -> None:
    """Embed the genes listed in ``inputs["genes"]``; the facts (how many genes got a vector) go beside.

    ``dataset_entry``: the dataset's registry entry, whose ``gene_ids`` and ``species`` say how its genes
    meet the source's (``celldag.embeddings.gene_ids``); without one, human gene symbols.
    """
    from celldag import artifacts
    from celldag.embeddings import embed_genes, read_table, write_table
    from celldag.plan import declared_genes

    genes = Path(inputs["genes"]).read_text().split()
    params = dict(entry["params"])
    seed = params.pop("seed", 0)  # controls: the draw is part of the registry entry, not of a run
    base = read_table(inputs["base"], provider=entry["of"]) if "base" in inputs else None
    files = {role: path for role, path in inputs.items() if role not in ("genes", "base")}
    gene_ids, species = declared_genes(dataset_entry or {})
    table, facts = embed_genes(
        entry["provider"],
        params,
        genes,
        files,
        seed,
        base_table=base,
        threads=threads,
        gene_ids=gene_ids,
        species=species,
    )
    write_table(table, table_path)
    artifacts.write_json({"embedding": embedding_id, **facts}, facts_path)
