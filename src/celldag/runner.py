"""Run one method on one prepared dataset: read, call the method's ``run``, write a checked output.

AnnData lives here, at the edge; methods see arrays. A method that raises records status ``failed``
(or ``not_applicable``) with the reason instead of stopping the benchmark; the traceback goes to the
rule's log.
"""

from __future__ import annotations

import importlib
import logging
import traceback

import numpy as np

from celldag import contracts, io
from celldag.methods import MethodInput, MethodResult, NotApplicable
from celldag.plan import method_params
from celldag.provenance import RunClock

log = logging.getLogger(__name__)


def method_input(prepared) -> MethodInput:
    """Score on the test replicate when the dataset has replicates (the train one is for training)."""
    has_replicates = "test" in prepared.layers
    return MethodInput(
        names=tuple(prepared.obs_names),
        features=np.asarray(prepared.layers["test"] if has_replicates else prepared.X, dtype=np.float64),
        train_features=np.asarray(prepared.layers["train"], dtype=np.float64) if has_replicates else None,
    )


def call_method(module_name: str, inputs: MethodInput, params: dict, seed: int) -> tuple[MethodResult, str, str]:
    """(result, status, reason) — exceptions become a status so one failure never stops the DAG."""
    try:
        result = importlib.import_module(module_name).run(inputs, params, seed)
        return result, "ok", ""
    except NotApplicable as err:
        return MethodResult(), "not_applicable", str(err) or "not applicable to this dataset"
    except Exception as err:  # noqa: BLE001 - recorded as a failed run, traceback logged
        log.error("method %s failed:\n%s", module_name, traceback.format_exc())
        return MethodResult(), "failed", f"{type(err).__name__}: {err}"


def output_anndata(prepared, result: MethodResult, ids: dict, status: str, reason: str):
    import anndata
    import pandas as pd

    adata = anndata.AnnData(obs=pd.DataFrame(index=prepared.obs_names.copy()))
    adata.uns.update(ids)
    adata.uns["status"] = status
    if status != "ok":
        adata.uns["status_reason"] = reason
        return adata
    if result.embedding is not None:
        adata.obsm["X_emb"] = np.asarray(result.embedding, dtype=np.float64)
    if result.tree_newick is not None:
        adata.uns["tree_newick"] = result.tree_newick
    return adata


def run_method(
    *, prepared_path: str, output_path: str, record_path: str,
    dataset_id: str, dataset_entry: dict, method_id: str, method_entry: dict, variant: str, seed: int,
) -> str:  # fmt: skip
    """Run one (dataset, method, variant, seed); returns the run status."""
    clock = RunClock()
    prepared = io.read_h5ad(prepared_path, contracts.check_prepared_dataset)
    params = method_params(method_entry, variant)
    log.info("running %s/%s on %s (seed %d) with params %s", method_id, variant, dataset_id, seed, params)
    result, status, reason = call_method(method_entry["module"], method_input(prepared), params, seed)
    ids = {"dataset_id": dataset_id, "method_id": method_id, "variant": variant}
    output = output_anndata(prepared, result, {**ids, "seed": seed}, status, reason)
    contracts.check_method_output(output, output_path, track=method_entry["track"])
    io.write_h5ad(output, output_path)
    config = {"dataset": dataset_entry, "method": method_entry, "variant": variant, "params": params, "seed": seed}
    record = clock.record(
        seed=seed, config=config, input_checksums={prepared_path: io.sha256_file(prepared_path)},
        **ids, track=method_entry["track"], status=status, status_reason=reason,
    )  # fmt: skip
    io.write_json(record, record_path)
    log.info("status %s%s; wall %.2f s, peak RSS %.0f MB", status, f" ({reason})" if reason else "",
             record["wall_time_s"], record["peak_rss_mb"])  # fmt: skip
    return status
