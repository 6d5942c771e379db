"""Artifact contracts: what a prepared dataset, a method output and a score table must hold.

Each contract is checked where the artifact is produced (before it is written) and where it is
consumed (right after it is read), so a bad file stops the DAG at the first job that touches it,
with one message naming the file and the field, before any training time is spent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from celldag.errors import InputError

if TYPE_CHECKING:  # anndata and pandas are only needed by the callers that hold such objects
    import anndata
    import pandas as pd

    from celldag.tracks import Track

MIN_LEAVES = 4  # every lineage metric compares quartets of leaves
RUN_STATUSES = ("ok", "not_applicable", "failed")
SCORE_COLUMNS = {
    "dataset": "string",
    "track": "string",
    "method": "string",
    "variant": "string",
    "seed": "integer",
    "metric": "string",
    "value": "float",
    "higher_is_better": "bool",
    "status": "string",
}
# optional columns: facts of how a run was scored, which a scorer returns beside its metrics (one value per
# run) — the cells of a scoring subsample (representation: evaluation.score_cells) and its seed. A table
# gathered from datasets scored without them holds NaN there (float).
SCORE_FACTS = {
    "scored_cells": "integer",
    "subsample_seed": "integer",
}
# optional text column: what the scoring of a run found that its numbers alone do not say (annotation: the
# groups too small to calibrate); the leaderboard lists each distinct note under its section
SCORE_NOTE = "note"
# what a scorer returns, beside its metrics, for those it could not compute: {metric: reason}. They become rows of
# status 'failed' with value NaN and the reason in the optional text column SCORE_REASON (annotation: a conformal
# procedure that failed on one run; the run's other metrics are ok)
SCORE_FAILED = "failed"
SCORE_REASON = "status_reason"


class ContractError(InputError):
    """An artifact breaks its contract; the message names the file and the field."""

    def __init__(self, path: str, field: str, problem: str):
        self.path, self.field, self.problem = str(path), field, problem
        super().__init__(f"{path}: {field}: {problem}")


def _require_ids(uns, path: str, keys: Iterable[str]) -> None:
    for key in keys:
        if key not in uns:
            raise ContractError(path, f"uns['{key}']", "missing")
        if not isinstance(uns[key], str) or not uns[key]:
            raise ContractError(path, f"uns['{key}']", f"must be a non-empty string, got {uns[key]!r}")


def require_finite_matrix(matrix, path: str, field: str, n_rows: int) -> None:
    values = np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix)
    if values.ndim != 2 or values.shape[0] != n_rows:
        raise ContractError(path, field, f"must be a 2-D array with {n_rows} rows, got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.number):
        raise ContractError(path, field, f"must be numeric, got dtype {values.dtype}")
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ContractError(path, field, f"{int(bad.sum())} non-finite values (first at row {row}, column {col})")


def check_prepared_dataset(adata: anndata.AnnData, path: str, track_id: str, track: Track) -> None:
    """Contract of ``results/data/{dataset}/{data_key}/seed{seed}.h5ad``: the generic part, then the track's own."""
    _require_ids(adata.uns, path, ("dataset_id", "track"))
    if adata.uns["track"] != track_id:
        raise ContractError(
            path,
            "uns['track']",
            f"{adata.uns['track']!r}, but the registry puts this dataset on the {track_id!r} track",
        )
    if adata.n_obs == 0 or adata.n_vars == 0:
        raise ContractError(path, "X", f"empty matrix of shape {adata.shape}")
    if not adata.obs_names.is_unique:
        duplicated = adata.obs_names[adata.obs_names.duplicated()][:3].tolist()
        raise ContractError(path, "obs_names", f"must be unique; duplicated: {duplicated}")
    require_finite_matrix(adata.X, path, "X", adata.n_obs)
    track.call("check_prepared", adata, path)


def check_method_output(adata: anndata.AnnData, path: str, track: Track) -> None:
    """Contract of ``results/runs/…/output.h5ad``: ids, a status, and for ``ok`` runs the track's result."""
    _require_ids(adata.uns, path, ("dataset_id", "method_id", "variant", "status"))
    if "seed" not in adata.uns:
        raise ContractError(path, "uns['seed']", "missing")
    status = adata.uns["status"]
    if status not in RUN_STATUSES:
        raise ContractError(path, "uns['status']", f"must be one of {RUN_STATUSES}, got {status!r}")
    if status != "ok":
        _require_ids(adata.uns, path, ("status_reason",))
        return
    if "X_emb" in adata.obsm:
        require_finite_matrix(adata.obsm["X_emb"], path, "obsm['X_emb']", adata.n_obs)
    if "X_gene_emb" in adata.varm:
        require_finite_matrix(adata.varm["X_gene_emb"], path, "varm['X_gene_emb']", adata.n_vars)
    track.call("check_output", adata, path)


def check_scores(table: pd.DataFrame, path: str) -> None:
    """Contract of the tidy score tables: the columns, their types, and one row per metric."""
    import pandas as pd

    for column, kind in SCORE_COLUMNS.items():
        if column not in table.columns:
            raise ContractError(path, f"column '{column}'", "missing")
        series = table[column]
        type_ok = {
            "string": pd.api.types.is_string_dtype(series) or pd.api.types.is_object_dtype(series),
            "integer": pd.api.types.is_integer_dtype(series),
            "float": pd.api.types.is_float_dtype(series),
            "bool": pd.api.types.is_bool_dtype(series),
        }[kind]
        if not type_ok:
            raise ContractError(path, f"column '{column}'", f"must be {kind}, got {series.dtype}")
    for column in (column for column in SCORE_FACTS if column in table.columns):  # optional
        values = table[column]
        numbers = values.dropna().to_numpy()
        if (
            not pd.api.types.is_numeric_dtype(values)
            or pd.api.types.is_bool_dtype(values)
            or (numbers < 0).any()
            or (numbers != np.round(numbers)).any()
        ):
            raise ContractError(
                path,
                f"column '{column}'",
                f"must hold whole numbers >= 0 (or NaN in rows it does not describe), got dtype {values.dtype}",
            )
    for column in (SCORE_NOTE, SCORE_REASON):
        if column in table.columns and not all(isinstance(value, str) for value in table[column].dropna()):
            raise ContractError(path, f"column '{column}'", "must hold text (or null in rows without one)")
    bad_status = set(table["status"]) - set(RUN_STATUSES)
    if bad_status:
        raise ContractError(path, "column 'status'", f"unknown values {sorted(bad_status)}")
    ok = table["status"] == "ok"
    if not np.isfinite(table.loc[ok, "value"].to_numpy()).all():
        raise ContractError(path, "column 'value'", "non-finite value in a row with status 'ok'")
    keys = ["dataset", "track", "method", "variant", "seed", "metric"]
    duplicated = table.duplicated(keys)
    if duplicated.any():
        first = table.loc[duplicated, keys].iloc[0].to_dict()
        raise ContractError(path, "rows", f"duplicate score row {first}")
