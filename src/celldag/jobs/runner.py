"""Run one method on one prepared dataset: read, call the method's ``run``, write a checked output.

AnnData lives here, at the edge; methods see arrays (their track's ``method_input``). A dataset that
lacks an input the method ``needs`` records status ``not_applicable`` with the reason, without calling
the method; a method that raises records ``failed`` (or ``not_applicable``) with the reason instead of
stopping the benchmark; the traceback goes to the rule's log.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
import traceback
from pathlib import Path

import numpy as np

from celldag import artifacts, contracts, extensions, records
from celldag.embeddings import read_table
from celldag.errors import InputError
from celldag.jobs.prepare import SOURCE_FILES
from celldag.methods import MethodResult, NotApplicable
from celldag.plan import DEVICE_PARAMS, method_files, method_needs, method_params, names_gpu
from celldag.provenance import RunClock, config_hash
from celldag.tracks import Track

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "checkpoint"  # inside the run directory; methods that train write their checkpoints here


class NoGPUError(RuntimeError):
    """A job that asked for a GPU sees none: abort before any training (unless CPU fallback is allowed)."""


def cuda_available(cpu_fallback: bool) -> bool:
    """True when CUDA is usable; otherwise NoGPUError, or with ``cpu_fallback`` a warning and False."""
    import os

    import torch

    if torch.cuda.is_available():
        return True
    message = (
        f"this job requested a GPU but torch {torch.__version__} sees no CUDA device "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
    )
    if not cpu_fallback:
        raise NoGPUError(message + "; install a CUDA build of torch on GPU nodes, or set compute.cpu_fallback: true")
    log.warning("%s; training on the CPU (compute.cpu_fallback is true)", message)
    return False


def unmet_need(inputs, needs: list[str]) -> str | None:
    """The reason the dataset cannot give the method what it ``needs`` (the first unmet need), or None."""
    return next((reason for need in needs if (reason := inputs.unmet(need))), None)


def withheld(inputs, needs: list[str]):
    """``inputs`` as the method gets them: each privileged field of its class (``PRIVILEGED``: field → the optional
    inputs that reveal it; the lineage track's true tree, the representation track's labels) set to None unless
    ``needs`` lists one of them."""
    privileged = getattr(type(inputs), "PRIVILEGED", {})
    hidden = {field: None for field, reveal in privileged.items() if not set(reveal) & set(needs)}
    return dataclasses.replace(inputs, **hidden) if hidden else inputs


def unmet_upstream(uns, method_entry: dict) -> str | None:
    """A chained run's input names the run it chains on (``celldag.jobs.chained``): not ok, nothing to run on; a method
    whose entry lists its ``upstreams`` runs on those upstream methods' runs alone (the null classifiers)."""
    status = uns.get("upstream_status", "ok")
    if status != "ok":
        return f"chains on run {uns['upstream']}, which is {status}: {uns.get('upstream_reason', '')}".rstrip(": ")
    upstreams = method_entry.get("upstreams")
    if upstreams and "upstream" in uns and str(uns["upstream"]).partition("/")[0] not in upstreams:
        return f"runs on the upstreams {', '.join(upstreams)} alone (its registry entry's upstreams)"
    return None


def call_method(entry_point: str, inputs, params: dict, seed: int, threads: int = 1) -> tuple[MethodResult, str, str]:
    """(result, status, reason) — exceptions become a status so one failure never stops the DAG."""
    from threadpoolctl import threadpool_limits

    try:
        run = extensions.load(entry_point)
        torch = sys.modules.get("torch")
        if torch is not None:  # torch takes every core by default; jobs running side by side then crawl
            torch.set_num_threads(threads)
        # BLAS/OpenMP too: the same job's numbers then do not depend on the machine's core count (a PCA
        # embedding differed in its last bits between 1 and 2 BLAS threads, and kBET on it by 0.03)
        with threadpool_limits(limits=threads):
            result = run(inputs, params, seed)
        return result, "ok", ""
    except NotApplicable as err:
        return MethodResult(), "not_applicable", str(err) or "not applicable to this dataset"
    except InputError:  # a file the run reads breaks its contract (celldag.methods.imported): the lab's to fix,
        raise  # so the job stops with its one line before anything is scored, as on a bad prepared dataset
    except Exception as err:  # noqa: BLE001 - sorted below
        if out_of_memory(err):  # the job fails: Snakemake retries with twice the memory, resuming the checkpoint
            raise
        # deterministic: recorded as a failed run (a rerun would fail the same way), traceback logged
        log.error("method %s failed:\n%s", entry_point, traceback.format_exc())
        return MethodResult(), "failed", f"{type(err).__name__}: {err}"


def out_of_memory(error: BaseException) -> bool:
    """Host or GPU memory ran out: not the method's fault, worth a retry with more (torch's error is a RuntimeError)."""
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"


def output_anndata(prepared, result: MethodResult, ids: dict, status: str, reason: str, path: str):
    """The method output as AnnData; a result whose rows do not match the dataset breaks the contract."""
    import anndata
    import pandas as pd

    genes = result.gene_ids if status == "ok" and result.gene_embedding is not None else ()
    adata = anndata.AnnData(obs=pd.DataFrame(index=prepared.obs_names.copy()), var=pd.DataFrame(index=list(genes)))
    adata.uns.update(ids)
    adata.uns["status"] = status
    if status != "ok":
        adata.uns["status_reason"] = reason
        return adata
    if genes:  # the contextual gene embedding, one row per modelled gene
        adata.varm["X_gene_emb"] = _rows(result.gene_embedding, len(genes), path, "varm['X_gene_emb']", "gene id")
    if result.embedding is not None:
        adata.obsm["X_emb"] = _rows(result.embedding, prepared.n_obs, path, "obsm['X_emb']", "cell of the dataset")
    for key, values in result.obsm.items():
        adata.obsm[key] = _rows(values, prepared.n_obs, path, f"obsm['{key}']", "cell of the dataset")
    if result.tree_newick is not None:
        adata.uns["tree_newick"] = result.tree_newick
    adata.uns.update(without_none(result.uns))
    return adata


def _rows(values, expected: int, path: str, field: str, per: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != expected:
        raise contracts.ContractError(
            path, field, f"the method returned shape {array.shape}; expected {expected} rows, one per {per}"
        )
    return array


def existing_files(files: dict[str, str], method_id: str) -> dict[str, str]:
    """``files`` (param → path of a method's file params), each there: Snakemake checks its job's inputs,
    an audit's re-run nothing else."""
    for name, path in files.items():
        if not Path(path).is_file():
            raise contracts.ContractError(
                path, "file", f"missing (the file {method_id}'s params.{name} names, relative to the working directory)"
            )
    return files


def keep_only_matching_checkpoints(directory: Path, run: dict) -> None:
    """Checkpoints resume only the run that wrote them: same params, seed and input files.

    A run killed and rerun after its params or inputs changed would otherwise go on from weights
    trained under the old ones; its checkpoints are removed instead (with a warning) and it starts afresh.
    """
    stamp = directory / "run-fingerprint.txt"
    fingerprint = config_hash(run)
    if directory.exists() and (not stamp.exists() or stamp.read_text() != fingerprint):
        log.warning(
            "%s holds checkpoints of a run with other params or inputs: removed, training starts afresh", directory
        )
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fingerprint)


def scalar_facts(uns) -> dict:
    """The prepared dataset's one-value facts (e.g. ``standardized``, ``seed``) for the run record; trees
    (long strings), tables and mappings stay in the file, whose sha256 the record holds."""
    scalars = {
        key: value.item() if isinstance(value, np.generic) else value
        for key, value in uns.items()
        if isinstance(value, bool | int | float | str | np.generic)
    }
    return {key: value for key, value in scalars.items() if not (isinstance(value, str) and len(value) > 200)}


def without_none(facts: dict) -> dict:
    """h5ad cannot store None: drop such entries (run.json keeps the complete facts)."""
    return {
        key: without_none(value) if isinstance(value, dict) else value
        for key, value in facts.items()
        if value is not None
    }


def audit_facts(prepared, prepared_path: str, gene_table_path: str | None, output_path: str, threads: int) -> dict:
    """What ``celldag audit`` needs to check a finished run and re-run it from its record alone.

    The output's digest is taken from the file as written (the record is written after it); the
    prepared dataset's source digests are those ``prepare`` stored in it; ``threads`` because BLAS
    results differ in their last bits between thread counts.
    """
    inputs = {"prepared": prepared_path} | ({"gene_table": gene_table_path} if gene_table_path else {})
    sources = {file["path"]: file["sha256"] for file in dict(prepared.uns.get(SOURCE_FILES, {})).values()}
    return {
        "inputs": inputs,
        "output_sha256": artifacts.sha256_file(output_path),
        "source_sha256": sources,
        "threads": threads,
    }


def run_method(
    *,
    prepared_path: str,
    gene_table_path: str | None = None,
    output_path: str,
    record_path: str,
    dataset_id: str,
    dataset_entry: dict,
    method_id: str,
    method_entry: dict,
    variant: str,
    seed: int,
    track: Track,
    threads: int = 1,
    gpu_requested: bool = False,
    cpu_fallback: bool = False,
) -> str:
    """Run one (dataset, method, variant, seed); returns the run status."""
    if not logging.getLogger().handlers:  # called outside a Snakemake job (celldag.jobs.joblog): progress to stderr
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    clock = RunClock()
    params = method_params(method_entry, variant)
    # params that name a GPU make the job a GPU job whatever its caller says (its resource gpu=1: plan.requests_gpu)
    if (gpu_requested or names_gpu(params)) and not cuda_available(cpu_fallback):
        params |= {key: "cpu" for key in DEVICE_PARAMS if key in params}
    prepared = artifacts.read_h5ad(
        prepared_path, contracts.check_prepared_dataset, track_id=method_entry["track"], track=track
    )
    log.info("running %s/%s on %s (seed %d) with params %s", method_id, variant, dataset_id, seed, params)
    work_dir = Path(output_path).parent
    gene_table = None
    if gene_table_path is not None:
        gene_table = read_table(gene_table_path)
    # a lab's files the method reads (its file params, e.g. an embedding computed elsewhere), by a chained run
    # also by the run it chains on: digested like the prepared dataset, so `celldag audit` checks them
    files = existing_files(
        method_files(method_entry, params, dataset_id, seed, prepared.uns.get("upstream")), method_id
    )
    input_checksums = {
        path: artifacts.sha256_file(path) for path in (prepared_path, gene_table_path, *files.values()) if path
    }
    keep_only_matching_checkpoints(
        work_dir / CHECKPOINT_DIR, {"params": params, "seed": seed, "inputs": input_checksums}
    )
    inputs = track.call("method_input", prepared, str(work_dir), gene_table)
    needs = method_needs(method_entry, variant)
    unmet = unmet_upstream(prepared.uns, method_entry) or unmet_need(inputs, needs)
    inputs = withheld(inputs, needs)
    if unmet is None:
        try:
            result, status, reason = call_method(method_entry["run"], inputs, params | files, seed, threads)
        except InputError:  # a bad file: the job stops (call_method), leaving nothing behind, nothing worth resuming
            shutil.rmtree(work_dir / CHECKPOINT_DIR, ignore_errors=True)
            raise
    else:
        result, status, reason = MethodResult(), "not_applicable", f"{method_id}/{variant} {unmet}"
    ids = {"dataset_id": dataset_id, "method_id": method_id, "variant": variant}
    # which static gene table the run read: evaluation compares its marker clustering with the output's
    embedding = {"embedding": params["embedding"]} if params.get("embedding") else {}
    output = output_anndata(prepared, result, {**ids, "seed": seed, **embedding}, status, reason, output_path)
    contracts.check_method_output(output, output_path, track)
    artifacts.write_h5ad(output, output_path)
    config = {"dataset": dataset_entry, "method": method_entry, "variant": variant, "params": params, "seed": seed}
    record = clock.record(
        seed=seed,
        config=config,
        input_checksums=input_checksums,
        **ids,
        track=method_entry["track"],
        status=status,
        status_reason=reason,
        method_facts=result.uns,
        dataset_facts=scalar_facts(prepared.uns),
        **audit_facts(prepared, prepared_path, gene_table_path, output_path, threads),
    )
    records.write_record(record, record_path)
    # a finished run needs no checkpoint; paper-sized models would leave hundreds of MB per run
    shutil.rmtree(work_dir / CHECKPOINT_DIR, ignore_errors=True)
    log.info(
        "status %s%s; wall %.2f s, peak RSS %.0f MB",
        status,
        f" ({reason})" if reason else "",
        record["wall_time_s"],
        record["peak_rss_mb"],
    )
    return status
