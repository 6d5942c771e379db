"""Gene-embedding tables: Parquet with ``gene_id`` (string) and ``embedding`` (list<float32>), one row per gene.

The contract (columns present, unique non-empty gene ids, vectors of one length, finite values) is
checked before a table is written and right after it is read, like every other artifact. Gene ids are
the dataset's own (its var_names), whatever ids the source used (``gene_ids``). The frame's ``attrs``
travel in the file (pandas keeps them in the Parquet metadata): ``gene_id_mapping``, how the dataset's
Ensembl ids were mapped to the source's symbols, and ``not_applicable``, why a table has no rows (a
dataset of another species): the only table allowed to be empty.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from celldag.artifacts import write_parquet
from celldag.contracts import ContractError
from celldag.embeddings.gene_ids import note as mapping_note

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("gene_id", "embedding")
MAPPING, NOT_APPLICABLE = "gene_id_mapping", "not_applicable"  # keys of the table's attrs


@dataclass(frozen=True)
class GeneTable:
    """Static gene embeddings of one provider: one row of ``vectors`` per gene id."""

    gene_ids: tuple[str, ...]
    vectors: np.ndarray  # (genes, d) float32
    provider: str = ""
    mapping: Mapping = field(default_factory=dict)  # gene_ids.GeneIdMap.facts when the dataset's ids were mapped
    not_applicable: str = ""  # why the table has no vector for this dataset's genes; "" when it applies

    def mapping_facts(self) -> dict:
        """What a run that read the table records of the id mapping: the counts, and the leaderboard's note."""
        return {MAPPING: dict(self.mapping), "note": mapping_note(self.mapping)} if self.mapping else {}


def gene_frame(gene_ids: Sequence[str], vectors: Sequence[np.ndarray] | np.ndarray) -> pd.DataFrame:
    """The table of ``vectors`` (one per gene id), each row's embedding a float32 array."""
    import pandas as pd

    return pd.DataFrame({"gene_id": list(gene_ids), "embedding": [np.asarray(v, dtype=np.float32) for v in vectors]})


def check_frame(frame: pd.DataFrame, path: str | os.PathLike) -> np.ndarray:
    """Hold a table to the contract; return its vectors as one (genes, d) float32 matrix."""
    path = str(path)
    for column in COLUMNS:
        if column not in frame.columns:
            raise ContractError(path, f"column '{column}'", "missing")
    if len(frame) == 0:
        if frame.attrs.get(NOT_APPLICABLE):
            return np.zeros((0, 0), dtype=np.float32)
        raise ContractError(path, "rows", "empty table (no gene has a vector)")
    ids = frame["gene_id"].tolist()
    for row, gene in enumerate(ids):
        if not isinstance(gene, str) or not gene:
            raise ContractError(
                path, "column 'gene_id'", f"row {row}: gene id must be a non-empty string, got {gene!r}"
            )
    duplicated = frame["gene_id"][frame["gene_id"].duplicated()].unique()[:3].tolist()
    if duplicated:
        raise ContractError(path, "column 'gene_id'", f"gene ids must be unique; duplicated: {duplicated}")
    return _vector_matrix(frame["embedding"].tolist(), ids, path)


def _vector_matrix(vectors: list, ids: list[str], path: str) -> np.ndarray:
    field = "column 'embedding'"
    for row, vector in enumerate(vectors):
        if vector is None:
            raise ContractError(path, field, f"gene {ids[row]!r} (row {row}) has no vector")
    try:
        lengths = np.array([len(v) for v in vectors])
    except TypeError as err:
        raise ContractError(path, field, f"each vector must be a list of numbers ({err})") from err
    if lengths[0] == 0:
        raise ContractError(path, field, f"gene {ids[0]!r} (row 0) has an empty vector")
    if (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise ContractError(
            path,
            field,
            f"vectors differ in length: gene {ids[0]!r} has {lengths[0]}, "
            f"gene {ids[row]!r} (row {row}) has {lengths[row]}",
        )
    try:
        matrix = np.array([np.asarray(v, dtype=np.float32) for v in vectors]).reshape(len(vectors), lengths[0])
    except (TypeError, ValueError) as err:
        raise ContractError(path, field, f"vectors must hold numbers ({err})") from err
    bad = ~np.isfinite(matrix).all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ContractError(
            path, field, f"{int(bad.sum())} vectors hold non-finite values (first: gene {ids[row]!r}, row {row})"
        )
    return matrix


def write_table(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """Check the contract, then write atomically with float32 vectors (and the table's attrs)."""
    vectors = check_frame(table, path)
    frame = gene_frame(table["gene_id"].tolist(), vectors)
    frame.attrs = dict(table.attrs)
    write_parquet(frame, path)


def read_table(path: str | os.PathLike, provider: str = "") -> GeneTable:
    """Read a table and hold it to the contract."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ContractError(str(path), "file", f"not a readable Parquet file ({err})") from err
    vectors = check_frame(frame, path)
    return GeneTable(
        gene_ids=tuple(frame["gene_id"]),
        vectors=vectors,
        provider=provider,
        mapping=frame.attrs.get(MAPPING, {}),
        not_applicable=frame.attrs.get(NOT_APPLICABLE, ""),
    )


def match_genes(gene_names: Sequence[str], table: GeneTable) -> tuple[np.ndarray, np.ndarray, int]:
    """Exact-string match of dataset genes against a table.

    Returns the indices into ``gene_names`` of the genes the table has (in dataset order), their
    vectors in that order, and how many dataset genes the table lacks.
    """
    row_of = {gene: row for row, gene in enumerate(table.gene_ids)}
    columns = np.array([i for i, gene in enumerate(gene_names) if gene in row_of], dtype=np.int64)
    rows = np.array([row_of[gene_names[i]] for i in columns], dtype=np.int64)
    return columns, table.vectors[rows], len(gene_names) - len(columns)
