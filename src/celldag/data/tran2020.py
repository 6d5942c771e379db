"""Dataset ``tran2020_pancreas``: Tran et al. 2020's five human pancreas studies ("dataset4"), as sciLaMA used them.

Two tab-separated gzip files of the benchmark's repository (JinmiaoChenLab/Batch-effect-removal-benchmarking,
``Data/dataset4``), in the layout its R scripts read with ``read.table(sep="\\t", header=T, row.names=1)``:
a genes × cells expression table (first column gene names; the header names the cells, with or without a
name for the gene column) and a sample table, one row per cell (cell id first, then ``batchlb``,
``celltype`` and others). The expression table is parsed a block of genes at a time straight into a
sparse matrix (the file is 140 MB of gzip, dense text). The paper's filtering (cells with >= 300 detected
genes, then genes detected in >= 10 cells) is the representation preprocessing's QC with ``min_genes``
300 / ``min_cells`` 10, so HVGs, normalisation, scaling and the split are those of every other
representation dataset. ``uns["tran2020"]`` records the cells per batch in the file and after filtering.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.contracts import ContractError
from celldag.data.h5ad import SourceReport, duplicate_names
from celldag.errors import InputError
from celldag.representation.preprocess import DEFAULTS as PREPROCESS_DEFAULTS
from celldag.representation.preprocess import TARGET_SUM, preprocess, split_params

MATRIX = "myData_pancreatic_5batches.txt.gz"  # genes × cells, tab-separated
SAMPLES = "mySample_pancreatic_5batches.txt.gz"  # one row per cell: id, batch, batchlb, celltype, …
TRAN2020_DEFAULTS = {
    "label_key": "celltype",  # sample-table column of cell types
    "batch_key": "batchlb",  # sample-table column of batches (Baron_b1, Mutaro_b2, …: the file's spelling)
    "expected_cells": None,  # cells the filtering should keep (the paper: 14,767); a different count is warned
}
BLOCK_GENES = 500  # genes parsed at once: 500 × 14,767 cells is a 30 MB float32 block

log = logging.getLogger(__name__)


def prepare_tran2020(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Prepared representation dataset from the two text files, cells in the sample table's order.

    Integer values go to the preprocessing as counts (kept for scVI). If the table holds other values
    (some of the studies publish only RPKM or CPM), every cell is log-normalised here as Seurat's LogNormalize
    (Tran et al.) and scanpy's normalize_total + log1p (sciLaMA) treat any values, and handed over as
    log-normalised: scVI is then not applicable.
    """
    import anndata

    own, preprocess_params = _own_params(params)
    matrix_path, samples_path = source_paths(files)
    samples = read_samples(samples_path, own["label_key"], own["batch_key"])
    cells, genes, matrix = read_expression(matrix_path)
    matrix = matrix[cell_order(samples.index, cells, samples_path, matrix_path)]
    data = anndata.AnnData(X=matrix, obs=samples, var=pd.DataFrame(index=genes))
    fractional = data.X.data != np.rint(data.X.data)
    n_fractional = int(fractional.sum())
    values = "lognorm" if n_fractional else "counts"
    if n_fractional:
        log.warning(
            "%s: %s holds %d non-integer values (e.g. %g): log-normalised by the loader, no counts for scVI",
            dataset_id,
            MATRIX,
            n_fractional,
            data.X.data[fractional][0],
        )
        # totals over every gene of the file: the QC below drops genes only afterwards (a fraction of a percent
        # of each total), where counts are normalised over the QC-passed genes
        import scanpy as sc

        sc.pp.normalize_total(data, target_sum=TARGET_SUM)
        sc.pp.log1p(data)
    prepared = preprocess(
        data, label_key=own["label_key"], batch_key=own["batch_key"], seed=seed, params=preprocess_params, values=values
    )
    prepared.uns["tran2020"] = filter_record(samples[own["batch_key"]], prepared.obs["batch"], values, n_fractional)
    _check_cell_count(dataset_id, prepared.n_obs, own["expected_cells"], prepared.uns["preprocess"])
    return prepared


def _own_params(params: Mapping) -> tuple[dict, dict]:
    own, preprocess_params = split_params(params, TRAN2020_DEFAULTS, "tran2020")
    expected = own["expected_cells"]
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int) or expected < 1):
        raise InputError(f"tran2020 params: expected_cells must be null or an integer >= 1, got {expected!r}")
    return own, preprocess_params


def source_paths(files: Mapping[str, str]) -> tuple[str, str]:
    missing = [name for name in (MATRIX, SAMPLES) if name not in files]
    if missing:
        raise InputError(f"tran2020 needs the files {missing} (got {sorted(files)})")
    return os.fspath(files[MATRIX]), os.fspath(files[SAMPLES])


def read_samples(path: str, label_key: str, batch_key: str) -> pd.DataFrame:
    """The sample table's label and batch columns (strings), indexed by cell id; ContractError naming the column."""
    try:  # R's read.table(header = T, row.names = 1): the header may or may not name the id column
        table = pd.read_csv(path, sep="\t", index_col=0, dtype=str, compression="gzip", keep_default_na=False)
    except (OSError, EOFError, ValueError) as err:  # BadGzipFile is an OSError; pandas' ParserError a ValueError
        raise ContractError(path, "file", f"not a gzip tab-separated table ({type(err).__name__}: {err})") from None
    table.index = pd.Index(table.index.astype(str), name="cell")
    for key in (label_key, batch_key):
        if key not in table.columns:
            raise ContractError(path, f"column {key!r}", f"not found (columns: {list(table.columns)})")
        empty = table[key].str.strip().isin(["", "NA"]).to_numpy()
        if empty.any():
            raise ContractError(
                path,
                f"column {key!r}",
                f"empty or NA for {int(empty.sum())} of {empty.size} cells (first: {table.index[empty][0]!r})",
            )
    duplicated = duplicate_names(table.index, path, "cell ids (first column)", "cell ids")
    if duplicated:
        raise duplicated[0]
    return table[[label_key, batch_key]]


def read_expression(path: str, block_genes: int = BLOCK_GENES) -> tuple[pd.Index, pd.Index, sparse.csr_matrix]:
    """(cell ids, gene names, cells × genes float32 CSR) of the genes × cells table; ContractError naming the line.

    Only one block of ``block_genes`` rows is ever dense: the peak is a small multiple of the sparse matrix
    (0.65 GB for 22.7 M non-zero values of 15,558 genes × 14,767 cells, 55 s on one core).
    """
    genes: list[str] = []
    blocks: list[sparse.csr_matrix] = []
    block: list[tuple[int, str, str]] = []  # (line number, gene, the text of its values)
    with _lines(path) as handle:
        header, first = handle.readline(), handle.readline()
        cells = header_cells(header, first, path)
        for number, line in enumerate(itertools.chain([first], handle), start=2):
            if not line.strip():  # as read.table's blank.lines.skip
                continue
            gene, _, values = line.partition("\t")
            block.append((number, _unquoted(gene), values))
            if len(block) == block_genes:
                blocks.append(_parse_block(block, cells, path))
                genes += [gene for _, gene, _ in block]
                block = []
    if block:
        blocks.append(_parse_block(block, cells, path))
        genes += [gene for _, gene, _ in block]
    if not genes:
        raise ContractError(path, "rows", "no gene rows after the header")
    by_gene = sparse.vstack(blocks, format="csr")
    del blocks
    return cells, pd.Index(genes, name="gene"), by_gene.T.tocsr()


def header_cells(header: str, first: str, path: str) -> pd.Index:
    """The cell ids the header names: every field when it has one fewer than a row (R's write.table), else all
    but the first (the gene column's name, possibly empty)."""
    if not header.strip():
        raise ContractError(path, "header", "empty file")
    names = [_unquoted(name) for name in header.rstrip("\r\n").split("\t")]
    row_fields = first.count("\t") + 1 if first.strip() else len(names) + 1
    if row_fields not in (len(names), len(names) + 1):
        raise ContractError(
            path,
            "header",
            f"{len(names)} fields, but line 2 has {row_fields}: the header must name "
            "every cell, with or without a name for the gene column first",
        )
    cells = pd.Index(names if row_fields == len(names) + 1 else names[1:], name="cell")
    duplicated = duplicate_names(cells, path, "header", "cell ids")
    if duplicated:
        raise duplicated[0]
    return cells


def cell_order(sample_cells: pd.Index, matrix_cells: pd.Index, samples_path: str, matrix_path: str) -> np.ndarray:
    """Rows of the matrix in the sample table's order (Tran et al.'s ``expr_mat[, rownames(metadata)]``);
    the two files must name the same cells."""
    only_samples, only_matrix = sample_cells.difference(matrix_cells), matrix_cells.difference(sample_cells)
    if len(only_samples) or len(only_matrix):
        raise ContractError(
            samples_path,
            "cell ids (first column)",
            (
                f"differ from the header of {os.path.basename(matrix_path)}: {len(only_samples)} only here (first: "
                f"{only_samples[:3].tolist()}), {len(only_matrix)} only there (first: {only_matrix[:3].tolist()})"
            ),
        )
    return matrix_cells.get_indexer(sample_cells)


def filter_record(batch_in_file: pd.Series, batch_kept: pd.Series, values: str, fractional: int) -> dict:
    """Cells per batch in the file and after filtering, and what the values were: ``uns["tran2020"]``."""

    def per_batch(batch) -> dict[str, int]:
        return {str(name): int(n) for name, n in pd.Series(batch).value_counts().sort_index().items()}

    return {
        "cells_in_file": int(batch_in_file.size),
        "cells_in_file_per_batch": per_batch(batch_in_file),
        "cells": int(batch_kept.size),
        "cells_per_batch": per_batch(batch_kept),
        "values": values,
        "non_integer_values": fractional,
    }


def _check_cell_count(dataset_id: str, cells: int, expected: int | None, record: Mapping) -> None:
    if expected is not None and cells != expected:  # a different release or reading of the files: worth a look
        log.warning(
            "%s: %d cells after filtering (min_genes %d, min_cells %d), but the paper reports %d; "
            "uns['tran2020'] has the cells per batch",
            dataset_id,
            cells,
            record["min_genes"],
            record["min_cells"],
            expected,
        )


def _parse_block(block: list[tuple[int, str, str]], cells: pd.Index, path: str) -> sparse.csr_matrix:
    try:
        values = np.loadtxt([text for _, _, text in block], delimiter="\t", dtype=np.float32, comments=None, ndmin=2)
    except ValueError as err:
        raise _row_problem(block, cells, path) or ContractError(path, "values", str(err)) from None
    if values.shape[1] != cells.size:
        raise _row_problem(block, cells, path)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        number, gene, _ = block[row]
        raise ContractError(
            path,
            f"line {number} (gene {gene!r})",
            f"{values[row, column]:g} for cell {cells[column]!r}: values must be finite and >= 0",
        )
    return sparse.csr_matrix(values)


def _row_problem(block: list[tuple[int, str, str]], cells: pd.Index, path: str) -> ContractError | None:
    """The first row of a block that loadtxt refused: a wrong number of values, or one that is not a number."""
    for number, gene, text in block:
        fields = text.rstrip("\r\n").split("\t")
        if len(fields) != cells.size:
            return ContractError(
                path, f"line {number} (gene {gene!r})", f"{len(fields)} values, but the header names {cells.size} cells"
            )
        for cell, field in zip(cells, fields):
            try:
                float(field)
            except ValueError:
                return ContractError(
                    path, f"line {number} (gene {gene!r})", f"{field!r} for cell {cell!r} is not a number"
                )
    return None


def _unquoted(name: str) -> str:
    name = name.strip()
    return name[1:-1] if len(name) > 1 and name[0] == name[-1] == '"' else name  # write.table quotes names


@contextmanager
def _lines(path: str) -> Iterator:
    """The text lines of a gzip file; ContractError naming it when it is no gzip, or is cut off."""
    with open(path, "rb") as raw:
        if raw.read(2) != b"\x1f\x8b":
            raise ContractError(path, "file", "not gzip-compressed")
    try:
        with gzip.open(path, "rt") as handle:
            yield handle
    except (OSError, EOFError) as err:  # a truncated download ends in EOFError mid-file
        raise ContractError(path, "file", f"unreadable gzip ({type(err).__name__}: {err})") from None


# ---------------------------------------------------------------- celldag validate


def check_source(params: Mapping, files: Mapping[str, str]) -> SourceReport:
    """The sample table's columns and its cell ids against the expression table's header, before any parsing."""
    own, _ = _own_params(params)
    matrix_path, samples_path = source_paths(files)
    try:
        samples = read_samples(samples_path, own["label_key"], own["batch_key"])
        with _lines(matrix_path) as handle:
            cells = header_cells(handle.readline(), handle.readline(), matrix_path)
        cell_order(samples.index, cells, samples_path, matrix_path)
    except ContractError as err:
        return SourceReport([str(err)], [], [])
    batches = samples[own["batch_key"]].value_counts().sort_index()
    return SourceReport(
        [],
        [],
        [
            ("cells in file", str(len(samples))),
            ("batches in file", ", ".join(f"{name} {n}" for name, n in batches.items())),
        ],
    )


prepare_tran2020.check_source = check_source
# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_tran2020.accepted_params = (*TRAN2020_DEFAULTS, *PREPROCESS_DEFAULTS)
