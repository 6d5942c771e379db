"""Run records: what ran, on what, from which inputs, how long it took and how much memory it used."""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import resource
import os
import socket
import sys
import time
from importlib import metadata
from pathlib import Path

# Versions worth recording for every run; missing packages are recorded as null.
RECORDED_PACKAGES = (
    "celldag", "numpy", "scipy", "pandas", "anndata", "scikit-bio", "scikit-learn",
    "torch", "scanpy", "snakemake",
)  # fmt: skip


def config_hash(config: dict) -> str:
    """sha256 of the canonical JSON of the settings that determine a run's result."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_description() -> str:
    """The compute device of this process: the CUDA device when torch uses one, else the CPU."""
    torch = sys.modules.get("torch")  # only ask torch when the run imported it: importing costs seconds
    if torch is not None and torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()} ({torch.cuda.get_device_name()})"
    return f"cpu ({platform.machine()})"


def status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (``VmRSS``, ``VmHWM``) in MB; None where there is none (not Linux)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return None


def peak_rss_mb() -> float:
    """Peak resident set of this process since it started or since ``reset_peak_rss``.

    Linux: VmHWM of /proc/self/status. Not ru_maxrss, which also holds the parent's resident set at fork
    (kept across exec: a job started by a 1 GB process would report at least 1 GB) and which a reset
    does not clear. Elsewhere ru_maxrss (KiB on Linux, bytes on macOS).
    """
    peak = status_mb("VmHWM")
    if peak is not None:
        return peak
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def reset_peak_rss() -> bool:
    """Start the peak resident set over from the current one (Linux ≥ 4.0; elsewhere a no-op), so that the
    second run of a job reports its own peak, not the first one's. True when it was reset."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS (man 5 proc)
    except OSError:
        return False
    return True


class RunClock:
    """Started when a run starts; ``record`` turns it into the run.json dictionary."""

    def __init__(self) -> None:
        reset_peak_rss()
        self.started = time.time()
        self._perf = time.perf_counter()

    def record(self, *, seed: int, config: dict, input_checksums: dict[str, str], **extra) -> dict:
        return {
            "seed": seed,
            "config": config,
            "config_hash": config_hash(config),
            "input_sha256": input_checksums,
            "packages": package_versions(),
            "device": device_description(),
            "host": socket.gethostname(),
            # which accelerator and which scheduler job: absent keys are None (a local CPU run)
            "environment": {name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "wall_time_s": round(time.perf_counter() - self._perf, 3),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            **extra,
        }
