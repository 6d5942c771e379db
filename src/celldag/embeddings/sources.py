"""Provider inputs: gene description texts, and precomputed gene-vector tables in their publishers' formats."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from celldag.artifacts import atomic_path, sha256_file
from celldag.embeddings import gene_ontology
from celldag.embeddings.table import read_table

TEXT_SOURCES = ("go", "genept_json", "tsv")


def required_file(files: Mapping[str, str], key: str, what: str) -> str:
    if key not in files:
        raise ValueError(f"{what} needs the input file {key!r}; got {sorted(files)}")
    return files[key]


# ---------------------------------------------------------------- description texts


def read_texts(
    source: str, files: Mapping[str, str], genes: Sequence[str], max_terms: Mapping[str, int]
) -> tuple[dict[str, str], dict]:
    """Description text per gene that has one, plus facts about how genes were matched.

    go: org.Hs.eg.db + GO.db (symbol or unique alias; see ``annotation``); genept_json: GenePT's
    {symbol: NCBI summary} JSON; tsv: a user file with columns gene and text. The last two match
    symbols exactly; genes with an empty text count as missing.
    """
    what = f"text source {source!r}"
    if source == "go":
        org, go = required_file(files, "org_hs_eg_sqlite", what), required_file(files, "go_sqlite", what)
        with closing(gene_ontology.open_annotation(org, go)) as db:
            symbols = gene_ontology.map_symbols(db, genes)
            texts = gene_ontology.describe_genes(db, symbols, max_terms)
        return texts, {"n_matched_symbol": symbols.n_symbol, "n_matched_alias": symbols.n_alias}
    if source == "genept_json":
        with open(required_file(files, "summaries", what)) as handle:
            by_gene = json.load(handle)
    elif source == "tsv":
        by_gene = _read_text_tsv(required_file(files, "texts", what))
    else:
        raise ValueError(f"unknown text_source {source!r}; known: {list(TEXT_SOURCES)}")
    return {gene: by_gene[gene] for gene in genes if isinstance(by_gene.get(gene), str) and by_gene[gene].strip()}, {}


def _read_text_tsv(path: str) -> dict[str, str]:
    import pandas as pd

    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)  # "NA" is a gene symbol, not a gap
    missing = {"gene", "text"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: needs columns 'gene' and 'text'; missing {sorted(missing)}")
    duplicated = frame["gene"][frame["gene"].duplicated()].unique()[:3].tolist()
    if duplicated:
        raise ValueError(f"{path}: genes must be unique; duplicated: {duplicated}")
    return dict(zip(frame["gene"], frame["text"]))


# ---------------------------------------------------------------- precomputed vector tables


def read_vectors(fmt: str, path: str, genes: Sequence[str]) -> tuple[list[str], list[np.ndarray], int]:
    """The table's vectors for the requested genes (exact symbol match, dataset order) and the table's gene count.

    genept_pickle: a pickled {symbol: vector} dict (GenePT); torch: a {symbol: tensor} dict saved with
    torch.save (SATURN/UCE ESM2 tables); csv: gene in the first column, one number per further
    column, header optional (scGPT exports); parquet: this project's table format.
    """
    readers: dict[str, Callable[[str], Mapping]] = {
        "genept_pickle": _read_verified_pickle,
        "torch": _read_torch,
        "csv": _read_csv,
        "parquet": _read_parquet,
    }
    if fmt not in readers:
        raise ValueError(f"unknown table format {fmt!r}; known: {list(readers)}")
    by_gene = readers[fmt](path)
    if not isinstance(by_gene, Mapping):
        raise ValueError(f"{path}: expected a mapping gene symbol → vector, got {type(by_gene).__name__}")
    ids = [gene for gene in genes if gene in by_gene]
    return ids, [np.asarray(by_gene[gene], dtype=np.float32) for gene in ids], len(by_gene)


def sidecar(path: str | os.PathLike) -> Path:
    return Path(f"{path}.sha256")


def mark_verified(path: str | os.PathLike) -> None:
    """Record ``path``'s sha256 beside it: call only where its origin was checksum-verified (a pinned download)."""
    with atomic_path(sidecar(path)) as tmp:
        tmp.write_text(f"{sha256_file(path)}  {Path(path).name}\n")  # sha256sum's format


def _read_verified_pickle(path: str) -> Mapping:
    """Unpickle only a file whose bytes still match the digest the verifying step recorded.

    Unpickling runs code, so a pickle is loaded only if ``<file>.sha256`` exists and matches: the
    step that checked the download against its pinned digest writes it (``mark_verified``), and this
    re-check ties that verification to the very bytes unpickled here.
    """
    import pickle

    record = sidecar(path)
    if not record.is_file():
        raise ValueError(f"{path}: refusing to unpickle a file that was not verified: no {record.name} beside it")
    fields = record.read_text().split()
    recorded = fields[0].lower() if fields else ""
    actual = sha256_file(path)
    if actual != recorded:
        raise ValueError(f"{path}: refusing to unpickle: sha256 {actual} differs from {recorded!r} in {record.name}")
    with open(path, "rb") as handle:
        return pickle.load(handle)


def _read_torch(path: str) -> Mapping:
    import torch

    loaded = torch.load(path, map_location="cpu", weights_only=True)  # tensors and containers only, no code
    if isinstance(loaded, Mapping):
        return {gene: vector.float().numpy() if torch.is_tensor(vector) else vector for gene, vector in loaded.items()}
    return loaded


def _read_csv(path: str) -> Mapping:
    import pandas as pd

    with open(path, newline="") as handle:
        first = next(csv.reader(handle), [])
    frame = pd.read_csv(path, header=0 if _is_header(first) else None, index_col=0, keep_default_na=False)
    frame.index = frame.index.astype(str)
    frame = frame[~frame.index.duplicated()]
    try:
        values = frame.to_numpy(dtype=np.float32)
    except ValueError as err:
        raise ValueError(f"{path}: every column after the gene must hold numbers ({err})") from err
    return dict(zip(frame.index, values))


def _is_header(fields: list[str]) -> bool:
    """A data row starts with a gene and continues with numbers; pandas' ``to_csv`` writes the header
    ",0,1,…,d-1" (empty index name, integer column names)."""
    if not fields or not fields[0]:
        return True
    try:
        [float(field) for field in fields[1:]]
    except ValueError:
        return True
    return fields[1:] == [str(i) for i in range(len(fields) - 1)]


def _read_parquet(path: str) -> Mapping:
    table = read_table(path)
    return dict(zip(table.gene_ids, table.vectors))
