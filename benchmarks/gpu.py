"""The GPU check a lab runs on its node (issue 41): timings against targets, determinism, kill-and-resume, and
(where the whole stack is installed) the default run on the GPU held against the CPU release.

  PYTHONPATH=src python benchmarks/gpu.py [--device cuda] [--quick] [--only SECTION ...] [--out DIR]
                                          [--baseline OLD_SRC] [--pipeline]

Needs torch, numpy and PyYAML, plus what celldag's imports along this path need: snakemake's registry
helpers (snakemake, jsonschema, yte, dpath: `../shared/gpu/wheels-for-py312.sh` fetches them at the lock's
versions, 1.8 MB) and scipy (UPGMA in the resume check, so that scikit-bio is not needed on a bare GPU
node). Sections, in order (``--only`` picks some):

- ``celltreeqm``: the paper's model (config/presets/paper.yaml) on 295 leaves × 15,000 features, supervised,
  through ``celldag.training.train`` as a pipeline job runs it: the preset's 900 steps, validation every 50
  steps on a validation replicate, checkpoints by wall time. Target: ≤ 5 ms a step. Then a profile of 20
  steps: host (CPU) time and GPU kernel time a step.
- ``scilama_rates``: sciLaMA stepwise at the paper's sizes (15,000 cells × 13,000 genes, batch 128, hidden
  900/400, bf16 autocast), a fixed number of epochs per phase with early stopping off. Target: ≥ 1,500
  steps a second in every phase.
- ``scilama_fit``: the whole stepwise fit with the paper's schedule and early stopping, checkpoints by wall
  time. Target: ≤ 60 s. Its steps, epochs and best validation loss per phase; with ``--baseline OLD_SRC``
  (the ``src`` folder of an older celldag, e.g. ``git archive 18b6cf2 src | tar -x -C .baseline``) the same
  fit by that code, in a child process, beside it.
- ``determinism``: two CellTreeQM trainings of one seed, bit for bit; the cost a step of deterministic
  kernels (``celldag.training.seed_everything``) against torch's defaults.
- ``resume``: CellTreeQM at paper sizes on bm_default, once straight through and once killed (SIGKILL) right
  after a checkpoint and resumed: the two embeddings must be equal bit for bit.
- ``pipeline`` (only with ``--pipeline``; needs the whole stack: snakemake, scanpy, scib-metrics, …): the
  default config with its trained methods on this GPU into a workdir of its own, then ``celldag check``
  against reference/default (docs/check.md says what to expect).

Writes DIR/gpu.json (default results/bench; `benchmarks/run_all.py --report-only` puts it into
docs/performance.md) after every section, and prints each table as it goes, so a time limit still leaves
the numbers of the sections done. ``--quick``: tiny sizes, to check on a CPU that the script runs (its
numbers mean nothing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

import numpy as np
from common import ROOT, Section, Table, run_params, run_sections, target
from run_all import git_revision
from tree_metrics import random_newick

CELLTREEQM_TARGET_MS = 5.0
SCILAMA_RATE_TARGET = 1500  # steps a second, every phase
SCILAMA_FIT_TARGET_S = 60  # the whole stepwise fit (the paper: 759 s on an A100)
PROFILED_STEPS = 20


def device_of(name: str):
    import torch

    return torch.device(name)


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gpu_mb(device) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")


# ------------------------------------------------------------------------------------------ CellTreeQM


def celltreeqm_setup(device, quick: bool, seed: int = 0):
    """(features, validation replicate, supervision, params) at paper sizes: a random tree of 295 leaves."""
    from celldag.lineage.track import LineageInput
    from celldag.methods.celltreeqm.train import reveal

    n_leaves, n_features = (16, 200) if quick else (295, 15000)
    params = run_params("celltreeqm", "supervised", "paper.yaml") | {"device": device.type}
    if quick:
        params |= {"proj_dim": 16, "hidden_dim": 16, "n_layers": 1, "output_dim": 8, "steps": 20, "validate_every": 5}
    rng = np.random.default_rng(seed)
    newick = random_newick(n_leaves, rng)
    names = tuple(f"L{i}" for i in range(n_leaves))
    x = rng.normal(size=(n_leaves, n_features)).astype(np.float32)
    x_val = x + rng.normal(scale=0.5, size=x.shape).astype(np.float32)
    supervision = reveal(LineageInput(names, x, x, newick), params, seed)
    return x, x_val, supervision, params


def train_celltreeqm(device, quick: bool, steps: int | None = None, checkpoint_dir=None, seed: int = 0):
    """One training as ``fit_and_embed`` runs it with a validation replicate; (model, result, seconds)."""
    from celldag.methods.celltreeqm.train import replicate_validation, train_encoder

    x, x_val, supervision, params = celltreeqm_setup(device, quick, seed)
    validation = replicate_validation(supervision, x_val, np.ones(len(x), dtype=bool), params["validation_quartets"])
    synchronize(device)
    start = time.perf_counter()
    model, result = train_encoder(
        x, supervision, params, seed, device, steps or params["steps"], checkpoint_dir, validation
    )
    synchronize(device)
    return model, result, time.perf_counter() - start


def celltreeqm_profile(device, quick: bool) -> tuple[float, float]:
    """(host ms, GPU kernel ms) a training step, over ``PROFILED_STEPS`` steps after warm-up."""
    from torch.profiler import ProfilerActivity, profile

    from celldag.methods.celltreeqm.train import train_encoder

    x, _, supervision, params = celltreeqm_setup(device, quick)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    train_encoder(x, supervision, params, 0, device, 3, None)  # warm-up
    synchronize(device)
    with profile(activities=activities) as profiled:
        start = time.perf_counter()
        train_encoder(x, supervision, params, 0, device, PROFILED_STEPS, None)
        synchronize(device)
        wall = time.perf_counter() - start
    events = profiled.key_averages()
    kernel_us = sum(getattr(event, "self_device_time_total", 0.0) for event in events)
    return 1000 * wall / PROFILED_STEPS, kernel_us / 1000 / PROFILED_STEPS


def celltreeqm(args, out: Section) -> dict:
    device = device_of(args.device)
    train_celltreeqm(device, True, steps=3)  # CUDA context, cuBLAS handles and kernels loaded before timing
    reset_peak(device)
    with tempfile.TemporaryDirectory() as checkpoints:
        _, result, seconds = train_celltreeqm(device, args.quick, checkpoint_dir=checkpoints)
    peak = peak_gpu_mb(device)
    ms = 1000 * seconds / result.steps_run
    host_ms, kernel_ms = celltreeqm_profile(device, args.quick)
    table = Table(
        "CellTreeQM, paper model, supervised, through celldag.training.train",
        [
            "size",
            "steps",
            "seconds",
            "ms a step",
            "profile: host ms / GPU kernel ms a step",
            "best val QDist",
            "peak GPU MB",
        ],
    )
    size = "16 × 200 (quick)" if args.quick else "295 leaves × 15,000 features"
    table.add(size, result.steps_run, seconds, ms, f"{host_ms:.2f} / {kernel_ms:.2f}", result.best_value, peak)
    out.tables.append(table.show())
    out.targets.append(
        target(
            f"GPU: CellTreeQM at paper size <= {CELLTREEQM_TARGET_MS} ms a step ({device})",
            f"{ms:.2f} ms",
            None if args.quick else ms <= CELLTREEQM_TARGET_MS,
        )
    )
    return {"ms_per_step": ms, "steps": result.steps_run, "host_ms": host_ms, "kernel_ms": kernel_ms, "peak_mb": peak}


# ------------------------------------------------------------------------------------------ sciLaMA


def synthetic_expression(n_cells: int, n_genes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scaled expression with a rank-20 signal and a per-batch shift, and the batch codes (3 batches)."""
    batch = rng.integers(0, 3, n_cells)
    signal = rng.normal(size=(n_cells, 20)).astype(np.float32) @ rng.normal(size=(20, n_genes)).astype(np.float32)
    shift = rng.normal(scale=0.5, size=(3, n_genes)).astype(np.float32)[batch]
    x = signal + shift + rng.normal(size=(n_cells, n_genes)).astype(np.float32)
    return (x - x.mean(axis=0)) / x.std(axis=0), batch


@cache
def scilama_data(quick: bool):
    """(expression, train mask, batch, gene table) of seed 0: the same data for every sciLaMA section."""
    n_cells, n_genes = (300, 200) if quick else (15000, 13000)
    rng = np.random.default_rng(0)
    x, batch = synthetic_expression(n_cells, n_genes, rng)
    train_mask = rng.random(n_cells) < 0.8
    genes = rng.normal(size=(n_genes, 384)).astype(np.float32)
    return x, train_mask, batch, genes


def scilama_params(device, overrides: dict) -> dict:
    return run_params("scilama", "text", "paper.yaml") | {"device": device.type} | overrides


def fit_scilama_timed(device, quick: bool, params: dict, work_dir: str | None) -> tuple[object, float]:
    from celldag.methods.scilama.train import fit_scilama

    synchronize(device)
    start = time.perf_counter()
    result = fit_scilama(*scilama_data(quick), params, seed=0, work_dir=work_dir)
    synchronize(device)
    return result, time.perf_counter() - start


def steps_per_epoch(quick: bool, params: dict) -> int:
    _, train_mask, _, _ = scilama_data(quick)
    return -(-int(train_mask.sum()) // params["batch_size"])


def scilama_rates(args, out: Section) -> dict:
    device = device_of(args.device)
    fixed = {"kl_warmup_epochs": 2, "kl_ramp_epochs": 2, "max_epochs": 6 if args.quick else 24, "patience": 10**6}
    fit_scilama_timed(device, True, scilama_params(device, fixed | {"max_epochs": 5}), None)  # warm-up, tiny sizes
    reset_peak(device)
    result, seconds = fit_scilama_timed(device, args.quick, scilama_params(device, fixed), None)
    peak = peak_gpu_mb(device)
    per_epoch = steps_per_epoch(args.quick, scilama_params(device, fixed))
    table = Table(
        "sciLaMA stepwise, paper sizes, fixed epochs (early stopping off), bf16 autocast on CUDA",
        ["phase", "epochs", "steps", "seconds", "steps/s", "peak GPU MB"],
    )
    rates = {}
    for phase, facts in result.phase_facts.items():
        steps = facts["epochs"] * per_epoch
        rates[phase] = steps / facts["seconds"]
        table.add(phase, facts["epochs"], steps, facts["seconds"], rates[phase], peak)
    out.tables.append(table.show())
    slowest = min(rates, key=rates.get)
    out.targets.append(
        target(
            f"GPU: sciLaMA >= {SCILAMA_RATE_TARGET:,} steps/s in every phase ({device})",
            f"{rates[slowest]:,.0f} steps/s ({slowest})",
            None if args.quick else rates[slowest] >= SCILAMA_RATE_TARGET,
        )
    )
    return {"steps_per_s": rates, "seconds": seconds, "peak_mb": peak}


def fit_params(args) -> dict:
    """The paper preset's sciLaMA params (tiny schedule with --quick)."""
    overrides = {"max_epochs": 6, "kl_warmup_epochs": 1, "kl_ramp_epochs": 1} if args.quick else {}
    return scilama_params(device_of(args.device), overrides)


def scilama_fit_facts(args, params: dict) -> dict:
    """The whole fit with early stopping: seconds, peak and per phase its epochs, steps and best validation."""
    device = device_of(args.device)
    reset_peak(device)
    with tempfile.TemporaryDirectory() as work_dir:
        result, seconds = fit_scilama_timed(device, args.quick, params, work_dir)
    per_epoch = steps_per_epoch(args.quick, params)
    phases = {
        phase: {
            "epochs": facts["epochs"],
            "steps": facts["epochs"] * per_epoch,
            "best_epoch": facts["best_epoch"],
            "best_val": facts["best_val"],
            "stopped_early": facts["stopped_early"],
        }
        for phase, facts in result.phase_facts.items()
    }
    return {"seconds": seconds, "peak_mb": peak_gpu_mb(device), "phases": phases}


def scilama_fit(args, out: Section) -> dict:
    facts = scilama_fit_facts(args, fit_params(args))
    runs = {"this code": facts}
    if args.baseline:
        runs[f"baseline {args.baseline}"] = baseline_facts(args)
    table = Table(
        "sciLaMA stepwise, paper sizes and schedule, early stopping on, checkpoints by wall time",
        [
            "code",
            "phase",
            "epochs",
            "steps",
            "best epoch",
            "best val loss",
            "stopped early",
            "fit seconds",
            "peak GPU MB",
        ],
    )
    for code, run in runs.items():
        if "error" in run:
            table.add(code, "–", "–", "–", "–", "–", "–", "–", run["error"])
            continue
        for phase, item in run["phases"].items():
            table.add(
                code,
                phase,
                item["epochs"],
                item["steps"],
                item["best_epoch"],
                item["best_val"],
                item["stopped_early"],
                run["seconds"],
                run["peak_mb"],
            )
    out.tables.append(table.show())
    out.targets.append(
        target(
            f"GPU: sciLaMA whole stepwise fit <= {SCILAMA_FIT_TARGET_S} s ({args.device})",
            f"{facts['seconds']:.0f} s",
            None if args.quick else facts["seconds"] <= SCILAMA_FIT_TARGET_S,
        )
    )
    return runs


def baseline_facts(args) -> dict:
    """The same fit by the celldag in ``args.baseline`` (its src folder), in a child process, with this
    registry's params (an older fit reads the keys it knows; it checkpoints by epochs: once at the end here)."""
    params = fit_params(args) | {"checkpoint_every": 10**6}
    command = [
        sys.executable,
        __file__,
        "--device",
        args.device,
        "--worker",
        "scilama_fit",
        "--params",
        json.dumps(params),
    ]
    command += ["--quick"] if args.quick else []
    environment = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(args.baseline).resolve()), str(ROOT / "src")])}
    try:
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=args.baseline_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"not finished within {args.baseline_timeout} s"}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------ determinism, resume


def determinism(args, out: Section) -> dict:
    """Two trainings of one seed bit for bit, and the cost a step of deterministic kernels."""
    import torch

    device, steps = device_of(args.device), 20 if args.quick else 300
    train_celltreeqm(device, args.quick, steps=3)  # warm-up
    first, _, deterministic_s = train_celltreeqm(device, args.quick, steps=steps)
    second, _, _ = train_celltreeqm(device, args.quick, steps=steps)
    same = all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    # seed_everything turns deterministic kernels on: time a run with torch's defaults instead
    import celldag.training as training

    seed_everything = training.seed_everything

    def seed_without_determinism(seed: int) -> None:
        seed_everything(seed)
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = True

    training.seed_everything = seed_without_determinism
    try:
        _, _, default_s = train_celltreeqm(device, args.quick, steps=steps)
    finally:
        training.seed_everything = seed_everything
    table = Table(
        "Determinism (CellTreeQM, paper model)",
        ["steps", "two runs of one seed bit for bit", "ms a step, deterministic", "ms a step, torch defaults"],
    )
    table.add(steps, same, 1000 * deterministic_s / steps, 1000 * default_s / steps)
    out.tables.append(table.show())
    out.targets.append(target(f"GPU: two runs of one seed agree bit for bit ({device})", str(same), same))
    return {
        "bit_identical": same,
        "deterministic_ms": 1000 * deterministic_s / steps,
        "default_ms": 1000 * default_s / steps,
    }


def resume_inputs(device: str, steps: int, quick: bool):
    """CellTreeQM's pipeline inputs on bm_default (seed 0) at the paper preset's sizes (the default's with
    ``quick``), checkpoints every 25 steps."""
    import yaml

    from celldag.data.bm import simulate_bm
    from celldag.lineage.track import LineageInput

    params = run_params("celltreeqm", "supervised", None if quick else "paper.yaml")
    params |= {
        "device": device,
        "steps": steps,
        "checkpoint_every": 25,
        "checkpoint_seconds": None,
        "reconstruction": "upgma",
    }
    entry = yaml.safe_load((ROOT / "config/datasets.yaml").read_text())["bm_default"]["params"]
    simulated = simulate_bm(seed=0, **{name: value for name, value in entry.items() if not name.startswith("count_")})
    return LineageInput(simulated.leaf_names, simulated.test, simulated.train, simulated.tree_newick), params


def resume_run(work_dir: str, device: str, steps: int, quick: bool) -> np.ndarray:
    from dataclasses import replace

    from celldag.methods.celltreeqm import run

    inputs, params = resume_inputs(device, steps, quick)
    return run(replace(inputs, work_dir=work_dir), params, seed=0).embedding


def resume(args, out: Section) -> dict:
    """Straight through, and killed by SIGKILL right after a checkpoint then resumed: equal bit for bit."""
    steps = 300
    with tempfile.TemporaryDirectory() as straight, tempfile.TemporaryDirectory() as killed:
        start = time.perf_counter()
        reference = resume_run(straight, args.device, steps, args.quick)
        seconds = time.perf_counter() - start
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--device",
                args.device,
                "--worker",
                "resume_child",
                "--work-dir",
                killed,
                "--steps",
                str(steps),
            ]
            + ["--quick"] * args.quick,
            start_new_session=True,
        )
        # selection on held-out leaves, then a refit: checkpoint/selection/ first
        while not any(Path(killed).rglob("checkpoint.pt")) and child.poll() is None:
            time.sleep(0.005)
        killed_mid_run = child.poll() is None
        if killed_mid_run:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        resumed = resume_run(killed, args.device, steps, args.quick)
    same = bool(np.array_equal(resumed, reference))
    table = Table(
        "Kill and resume (CellTreeQM, paper model, bm_default)",
        ["steps", "seconds straight through", "killed mid-run", "resumed embedding bit for bit", "max |diff|"],
    )
    table.add(steps, seconds, killed_mid_run, same, float(np.abs(resumed - reference).max()))
    out.tables.append(table.show())
    out.targets.append(
        target(
            f"GPU: a run killed after a checkpoint resumes bit for bit ({args.device})",
            f"{same} (killed mid-run: {killed_mid_run})",
            same and killed_mid_run,
        )
    )
    return {"bit_identical": same, "killed_mid_run": killed_mid_run}


# ------------------------------------------------------------------------------------------ pipeline


def pipeline(args, out: Section) -> dict:
    """The default config's trained methods on this GPU, into a workdir of its own, checked against the release."""
    workdir = Path(args.out).resolve() / "gpu-default-run"
    missing = [name for name in ("snakemake", "scanpy", "scib_metrics", "skbio") if not importable(name)]
    if missing:
        note = f"pipeline: skipped, the whole stack is not installed here (missing {', '.join(missing)})"
        out.notes.append(note)
        print(note, flush=True)
        return {"skipped": note}
    workdir.mkdir(parents=True, exist_ok=True)
    binaries = Path(sys.executable).parent
    snakemake = [
        str(binaries / "snakemake"),
        "--snakefile",
        str(ROOT / "workflow/Snakefile"),
        "--configfile",
        str(ROOT / "config/config.yaml"),
        "--directory",
        str(workdir),
        "--cores",
        str(os.cpu_count()),
        "--config",
        "compute={gpus: true}",
    ]
    start = time.perf_counter()
    ran = subprocess.run(snakemake, cwd=ROOT)
    seconds = time.perf_counter() - start
    check = subprocess.run(
        [
            str(binaries / "celldag"),
            "check",
            "--results",
            str(workdir / "results/default"),
            "--reference",
            str(ROOT / "reference/default"),
            "--out",
            str(workdir / "check"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    print(check.stdout[-6000:], flush=True)
    out.notes.append(
        f"pipeline: the default run on the GPU took {seconds:.0f} s (snakemake exit {ran.returncode}); "
        f"celldag check exit {check.returncode}: {check.stdout.strip().splitlines()[0] if check.stdout.strip() else ''}"
    )
    return {"seconds": seconds, "snakemake_exit": ran.returncode, "check_exit": check.returncode}


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ------------------------------------------------------------------------------------------ main

SECTIONS = {
    "celltreeqm": celltreeqm,
    "scilama_rates": scilama_rates,
    "scilama_fit": scilama_fit,
    "determinism": determinism,
    "resume": resume,
    "pipeline": pipeline,
}
TIMING = ("celltreeqm", "scilama_rates", "scilama_fit", "determinism", "resume")


def environment(device) -> str:
    import torch

    from celldag.provenance import gpu_description

    gpu = gpu_description() if device.type == "cuda" else None
    what = (
        "cpu"
        if gpu is None
        else f"{gpu['name']}, CUDA {gpu['cuda']} (driver supports {gpu['driver_cuda']}), cuDNN {gpu['cudnn']}"
    )
    return (
        f"{what}, torch {torch.__version__}, {datetime.datetime.now(datetime.UTC):%Y-%m-%d}, revision {git_revision()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs")
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="these sections only")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench"), help="folder of gpu.json")
    parser.add_argument("--baseline", help="the src folder of an older celldag: its sciLaMA fit beside this one's")
    parser.add_argument("--baseline-timeout", type=int, default=240, help="seconds the baseline's fit may take")
    parser.add_argument("--pipeline", action="store_true", help="also the default run on this GPU, then celldag check")
    parser.add_argument("--worker", choices=["scilama_fit", "resume_child"], help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from celldag.training import select_device

    args.device = str(select_device(args.device))
    if args.worker == "scilama_fit":
        print(json.dumps(scilama_fit_facts(args, json.loads(args.params))))
        return
    if args.worker == "resume_child":
        resume_run(args.work_dir, args.device, args.steps, args.quick)
        return
    only = args.only or [*TIMING, *(["pipeline"] if args.pipeline else [])]
    title = f"On {environment(device_of(args.device))}"
    print(title, flush=True)

    def section(name: str):
        def run(quick: bool, out: Section) -> None:
            out.notes.append(f"{name}: {title}; {json.dumps(SECTIONS[name](args, out), default=str)}")

        return run

    run_sections("gpu", {name: section(name) for name in SECTIONS}, only, args.quick, results=Path(args.out))


if __name__ == "__main__":
    main()
