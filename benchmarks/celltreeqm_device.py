"""CellTreeQM on one device: time per step, peak memory, and bit-identical resume after SIGKILL.

Runs the paper-sized model (config/presets/paper.yaml sizes) on bm_default (seed 0) on the given
device, once straight through and once killed mid-training then resumed, and compares the two
embeddings bit for bit. Needs numpy, torch and PyYAML only (UPGMA via scipy replaces NJ so that
scikit-bio is not needed on a bare GPU node):

  PYTHONPATH=src python benchmarks/celltreeqm_device.py [cuda|cpu] [steps]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]


def inputs_and_params(device: str, steps: int):
    from celldag.data.bm import simulate_bm
    from celldag.lineage.track import LineageInput

    registry = yaml.safe_load((ROOT / "config/methods.yaml").read_text())
    preset = yaml.safe_load((ROOT / "config/presets/paper.yaml").read_text())
    params = registry["celltreeqm"]["params"] | preset["method_params"]["celltreeqm"]
    params |= {"setting": "supervised", "device": device, "steps": steps, "checkpoint_every": 25,
               "reconstruction": "upgma"}  # fmt: skip
    data = yaml.safe_load((ROOT / "config/datasets.yaml").read_text())["bm_default"]["params"]
    sim = simulate_bm(seed=0, **data)
    return LineageInput(sim.leaf_names, sim.test, sim.train, sim.tree_newick), params


def run_once(work_dir: str, device: str, steps: int) -> np.ndarray:
    from dataclasses import replace

    from celldag.methods.celltreeqm import run

    inputs, params = inputs_and_params(device, steps)
    return run(replace(inputs, work_dir=work_dir), params, seed=0).embedding


def main(device: str, steps: int) -> None:
    import torch

    with tempfile.TemporaryDirectory() as straight, tempfile.TemporaryDirectory() as killed:
        start = time.perf_counter()
        reference = run_once(straight, device, steps)
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else float("nan")
        print(f"device {device} ({torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}), "
              f"torch {torch.__version__}: {steps} steps in {seconds:.1f} s "
              f"({1000 * seconds / steps:.1f} ms/step incl. setup), peak GPU memory {peak:.0f} MiB")  # fmt: skip
        child = subprocess.Popen(
            [sys.executable, __file__, device, str(steps), "--child", killed], start_new_session=True
        )
        checkpoint = Path(killed) / "checkpoint" / "checkpoint.pt"
        while not checkpoint.exists() and child.poll() is None:
            time.sleep(0.05)
        time.sleep(1.0)
        still_running = child.poll() is None
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        resumed = run_once(killed, device, steps)
        print(f"killed mid-training: {still_running}; resumed embedding bit-identical: {np.array_equal(resumed, reference)}"
              f" (max |diff| {np.abs(resumed - reference).max():.3g})")  # fmt: skip


if __name__ == "__main__":
    if "--child" in sys.argv:
        run_once(sys.argv[-1], sys.argv[1], int(sys.argv[2]))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "cuda", int(sys.argv[2]) if len(sys.argv) > 2 else 300)
