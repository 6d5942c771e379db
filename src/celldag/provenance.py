"""The facts a run record holds, collected: what ran, on what, from which inputs, how long and in how much memory.

This module collects them; ``celldag.records`` owns the record itself (``run.json``: its fields, its one writer and
its one reader).

"On what" is the device and the ``machine`` section: CPU model and the instruction-set extensions that
select numerical kernels, the BLAS/OpenMP libraries of the process, its thread settings and, for a CUDA
run, the GPU — what ``celldag compare`` names when two runs of the same seed give other numbers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import resource
import socket
import sys
import time
from importlib import metadata
from pathlib import Path

from celldag.release import release_facts

# Versions worth recording for every run; missing packages are recorded as null.
RECORDED_PACKAGES = (
    "celldag",
    "numpy",
    "scipy",
    "pandas",
    "anndata",
    "scikit-bio",
    "scikit-learn",
    "torch",
    "scanpy",
    "snakemake",
)
# CPU flags that pick other BLAS/numba/torch kernels (other summation orders, fused multiply-adds): x86
# /proc/cpuinfo "flags", ARM "Features"; the other flags do not change numbers and are not recorded
NUMERIC_ISA = frozenset({"avx", "avx2", "fma", "fma4", "sse4_2", "neon", "asimd", "asimdhp", "sve", "sve2"})
NUMERIC_ISA_PREFIXES = ("avx512", "avx_vnni", "amx")
# thread counts of the BLAS/OpenMP/numba pools (Snakemake sets the first three to a job's threads)
RECORDED_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
# variables that pick other numerical kernels on the same CPU: OpenBLAS' core type, MKL's code path, ATen's vector
# width, XLA's instruction set (config/reference.yaml perturbs a rerun with them; a check names them when they differ)
KERNEL_VARIABLES = ("OPENBLAS_CORETYPE", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "XLA_FLAGS")
LIBRARY_FIELDS = (
    "internal_api",
    "version",
    "num_threads",
    "architecture",
)  # of threadpoolctl's report, with the file name


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


def cpu_model_and_isa(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, list[str]]:
    """The CPU model and its ``NUMERIC_ISA`` flags (sorted), from the first processor of ``cpuinfo``;
    elsewhere (or on ARM, which names no model) the platform's processor name."""
    model, flags = "", []
    with contextlib.suppress(OSError), open(cpuinfo) as handle:
        for line in handle:  # the first processor's lines only: on a large machine the file is long
            if not line.strip():
                break
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "model name":
                model = value
            elif key in ("flags", "Features"):
                flags = value.split()
    isa = sorted({flag for flag in flags if flag in NUMERIC_ISA or flag.startswith(NUMERIC_ISA_PREFIXES)})
    return model or platform.processor() or platform.machine(), isa


def loaded_libraries() -> list[dict]:
    """The BLAS and OpenMP libraries of this process as threadpoolctl finds them, with their default
    thread counts (a method's run caps them to its job's threads meanwhile: ``runner.call_method``).

    threadpoolctl lists what is loaded: before numpy is imported there is nothing to list, and importing
    numpy only to say so would cost a run that never used it.
    """
    if "numpy" not in sys.modules:
        return []
    from threadpoolctl import threadpool_info

    return [
        {key: library.get(key) for key in LIBRARY_FIELDS} | {"file": os.path.basename(library["filepath"])}
        for library in threadpool_info()
    ]


def thread_settings() -> dict[str, str | int | None]:
    settings: dict[str, str | int | None] = {name: os.environ.get(name) for name in RECORDED_THREAD_VARIABLES}
    torch = sys.modules.get("torch")  # never imported here: importing torch costs seconds
    if torch is not None:
        settings["torch"] = torch.get_num_threads()
    return settings


def gpu_description() -> dict | None:
    """The CUDA device of a run that used one (as ``device_description`` decides): name, CUDA and cuDNN
    versions, and the CUDA version of the driver where torch exposes it; None for a CPU run."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    driver = getattr(torch._C, "_cuda_getDriverVersion", None)  # e.g. 12040: the CUDA version the driver supports
    version = driver() if driver else None
    return {
        "name": torch.cuda.get_device_name(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "driver_cuda": f"{version // 1000}.{version % 1000 // 10}" if version else None,
    }


def machine_description() -> dict:
    """What a run's numbers may depend on besides its inputs, seed and packages (a few ms)."""
    model, isa = cpu_model_and_isa()
    return {
        "cpu_model": model,
        "isa": isa,
        "cpus": os.cpu_count(),
        "os": platform.platform(),
        "libraries": loaded_libraries(),
        "threads": thread_settings(),
        "gpu": gpu_description(),
        "kernels": {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ},
    }


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


def peak_gpu_mb() -> float | None:
    """Peak GPU memory torch allocated in this process since it started or since ``reset_peak_gpu``; None where
    no CUDA device was used (torch not imported, or no GPU): what a GPU request must leave room for."""
    torch = sys.modules.get("torch")  # never imported here: importing torch costs seconds
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def reset_peak_gpu() -> None:
    """Start the peak GPU memory over, so that the second run of a job reports its own peak."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def reset_peak_rss() -> bool:
    """Start the peak resident set over from the current one (Linux ≥ 4.0; elsewhere a no-op), so that the
    second run of a job reports its own peak, not the first one's. True when it was reset."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS (man 5 proc)
    except OSError:
        return False
    return True


class RunClock:
    """Started when a run starts; ``record`` turns it into the run.json dictionary. ``stage(name)`` times a stage of
    the run (a context manager; a stage entered twice adds up); ``stages`` holds the seconds of each."""

    def __init__(self) -> None:
        reset_peak_rss()
        reset_peak_gpu()
        self.started = time.time()
        self._perf = time.perf_counter()
        self.stages: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - started

    def record(self, *, seed: int, config: dict, input_checksums: dict[str, str], **extra) -> dict:
        return {
            "seed": seed,
            "config": config,
            "config_hash": config_hash(config),
            "input_sha256": input_checksums,
            "packages": package_versions(),
            "celldag_release": release_facts(),  # version, commit, source digest: which celldag made the run
            "device": device_description(),
            "machine": machine_description(),
            "host": socket.gethostname(),
            # which accelerator and which scheduler job: absent keys are None (a local CPU run)
            "environment": {name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "wall_time_s": round(time.perf_counter() - self._perf, 3),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "peak_gpu_mb": peak_gpu_mb(),  # None for a run that used no GPU
            **extra,
        }
