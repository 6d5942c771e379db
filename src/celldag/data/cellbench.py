"""Datasets ``cellbench_protocols`` and ``cellbench_plates``: CellBench's lung-adenocarcinoma cell lines.

Tian et al. 2019 (LuyiTian/sc_mixology, ``data/csv``) publish each experiment as two gzip CSV files written
by R: ``<experiment>.count.csv.gz``, genes × cells raw UMI counts (scPipe) with Ensembl gene ids and a quoted
header naming the cells only, and ``<experiment>.metadata.csv.gz``, one row per cell. Every experiment among
an entry's files is one batch, named by its file stem: the protocols (CEL-seq2, Drop-seq; 3 cell lines) or
the three CEL-seq2 plates of 5 cell lines.

Cells kept: genotype singlets (``demuxlet_cls`` SNG) that the study did not flag as ``outliers``. The label is
``cell_line_demuxlet``, the line demuxlet calls from each cell's genotype: it is in every file (the plates
have no ``cell_line`` column), and where ``cell_line`` exists it agrees on every singlet — the two differ on
doublets only. ``uns["cellbench"]`` records the cells of each experiment in its file and after the filter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.contracts import ContractError
from celldag.errors import InputError
from celldag.representation.preprocess import DEFAULTS as PREPROCESS_DEFAULTS
from celldag.representation.preprocess import preprocess

COUNT, METADATA = ".count.csv.gz", ".metadata.csv.gz"
LABEL_KEY = "cell_line_demuxlet"
BATCH_KEY = "experiment"  # obs column of the batch: the file stem
SINGLET = "SNG"  # demuxlet_cls: SNG, DBL (two genotypes) or AMB
SPIKE_IN = "ERCC-"  # ERCC spike-in rows of the plate protocols: no gene, absent from Drop-seq


def prepare_cellbench(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Prepared representation dataset: the singlets of every experiment among ``files``, counts kept for scVI."""
    del dataset_id  # the experiments come from the files
    data, record = singlets(files)
    prepared = preprocess(data, label_key=LABEL_KEY, batch_key=BATCH_KEY, seed=seed, params=params)
    prepared.uns["cellbench"] = record
    return prepared


def singlets(files: Mapping[str, str]):
    """(AnnData of raw counts: the singlets of every experiment among ``files``, cell line in obs[LABEL_KEY] and
    experiment in obs[BATCH_KEY]; {experiment: cells in its file, singlets kept}) — also a plain labelled h5ad
    for ``celldag annotate`` (benchmarks/annotate_defaults.py).

    The experiments' count tables list different genes (scPipe writes a gene only where the experiment detected
    it), so they are joined on the union of their genes, a gene a table lacks counting 0 there. Cell ids repeat
    across plates (each plate names its wells p1_A1, …): a cell is named ``<experiment>:<cell id>``.
    """
    import anndata

    parts, record = [], {}
    for experiment in experiments(files):
        counts, labels, in_file = read_experiment(
            os.fspath(files[experiment + COUNT]), os.fspath(files[experiment + METADATA])
        )
        record[experiment] = {"cells_in_file": in_file, "singlets_kept": counts.shape[1]}
        parts.append(
            anndata.AnnData(
                X=sparse.csr_matrix(counts.to_numpy().T),
                obs=pd.DataFrame({LABEL_KEY: labels, BATCH_KEY: experiment}, index=experiment + ":" + counts.columns),
                var=pd.DataFrame(index=counts.index),
            )
        )
    return anndata.concat(parts, join="outer", fill_value=0), record


def experiments(files: Mapping[str, str]) -> list[str]:
    """The experiments among the entry's files, each with its count table and its metadata."""
    stems = {name.removesuffix(suffix) for name in files for suffix in (COUNT, METADATA) if name.endswith(suffix)}
    unpaired = sorted(name for stem in stems for name in (stem + COUNT, stem + METADATA) if name not in files)
    if unpaired or not stems:
        raise InputError(
            f"cellbench needs <experiment>{COUNT} and <experiment>{METADATA} for each experiment; "
            f"missing {unpaired or ['any']} (got {sorted(files)})"
        )
    return sorted(stems)


def read_experiment(count_path: str, metadata_path: str) -> tuple[pd.DataFrame, np.ndarray, int]:
    """(genes × cells counts of the kept cells without spike-in rows, their labels, the cells in the file).

    ContractError naming the file and the field when the two files disagree or a column is missing.
    """
    metadata = pd.read_csv(metadata_path, index_col=0, dtype=str, keep_default_na=False)
    for column in (LABEL_KEY, "demuxlet_cls", "outliers"):
        if column not in metadata.columns:
            raise ContractError(metadata_path, f"column {column!r}", f"missing (columns: {list(metadata.columns)})")
    counts = pd.read_csv(count_path, index_col=0)  # R's write.csv header names the cells only: pandas reads it so
    if not counts.columns.sort_values().equals(metadata.index.sort_values()):
        raise ContractError(
            count_path,
            "header",
            f"its {counts.shape[1]} cell ids are not the {len(metadata)} rows of {os.path.basename(metadata_path)}",
        )
    values = counts.to_numpy()  # one dtype: int64 only when every column parsed as integers
    if not np.issubdtype(values.dtype, np.integer) or values.min() < 0:
        raise ContractError(count_path, "values", "raw UMI counts must be non-negative integers")
    metadata = metadata.loc[counts.columns]
    outlier = metadata["outliers"].str.upper().map({"TRUE": True, "FALSE": False})
    if outlier.isna().any():
        raise ContractError(metadata_path, "column 'outliers'", "must be TRUE or FALSE for every cell")
    kept = ((metadata["demuxlet_cls"] == SINGLET) & ~outlier.astype(bool)).to_numpy()
    genes = ~counts.index.str.startswith(SPIKE_IN)
    return counts.loc[genes, kept], metadata[LABEL_KEY].to_numpy()[kept], len(metadata)


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_cellbench.accepted_params = tuple(PREPROCESS_DEFAULTS)
