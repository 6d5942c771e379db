"""`make install`'s two steps (Makefile, target $(BIN)/.installed), run by the venv's own Python:

    python requirements/install.py torch --cpu-index URL [--cuda] [--index-url URL]
    python requirements/install.py lock

`torch` installs the lock's torch first, from its own source: the lock pins the CPU build (`torch==2.13.0+cpu`),
which PyPI does not serve; pip there would take `torch==2.13.0`, the CUDA build with several GB of CUDA wheels. It
is looked for in this machine's pip sources (its pip config: a wheel folder as find-links, mirrors of the indexes),
then with the PyTorch CPU index (--cpu-index) as one more source, for torch alone (--no-deps: its dependencies come
with the rest of the lock). Where neither has it, PyPI's build of the same release is installed with its CUDA
wheels pinned by requirements/lock-gpu.txt, and that is said, since `celldag check` then reports the torch build
as a difference from the reference. --cuda installs that CUDA build on purpose; --index-url installs the lock's
release from another index (a CUDA build of PyTorch's).

`lock` installs the rest of the lock with torch left as installed. The standard library only: nothing else is
installed yet.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import tempfile
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent
LOCK = REQUIREMENTS / "lock.txt"
GPU_LOCK = REQUIREMENTS / "lock-gpu.txt"
NOT_FOUND = "No matching distribution found for torch"  # pip's words when no source has the pinned torch


def is_torch_pin(line: str) -> bool:
    return line.startswith("torch==")


def lock_torch() -> str:
    """The lock's torch version, local label included (2.13.0+cpu)."""
    pins = [line for line in LOCK.read_text().splitlines() if is_torch_pin(line)]
    if len(pins) != 1:
        sys.exit(f"{LOCK}: {len(pins)} torch== lines; the lock pins torch once")
    return pins[0].removeprefix("torch==")


def lock_without_torch(folder: Path) -> Path:
    """The lock less its torch line, written into ``folder``: what is installed with torch already in place."""
    path = folder / "lock-without-torch.txt"
    path.write_text("".join(f"{line}\n" for line in LOCK.read_text().splitlines() if not is_torch_pin(line)))
    return path


def pip_install(*args: str, quiet_failure: bool = False) -> subprocess.CompletedProcess:
    """pip install into this Python's environment; with ``quiet_failure`` its output is kept for the caller, who
    decides whether a failure is one to show."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", *args]
    if quiet_failure:
        return subprocess.run(command, capture_output=True, text=True)
    return subprocess.run(command, text=True)


def installed_torch() -> str:
    return importlib.metadata.version("torch")


def install_cpu_torch(version: str, cpu_index: str) -> str | None:
    """The CPU build from this machine's sources, else with the PyTorch CPU index added; the source it came from,
    or None where no source has it. Any other failure of pip stops the install with pip's output."""
    sources = {"this machine's pip sources (pip config)": (), cpu_index: ("--extra-index-url", cpu_index)}
    for source, extra in sources.items():
        result = pip_install("--no-deps", f"torch=={version}", *extra, quiet_failure=True)
        if result.returncode == 0:
            return source
        if NOT_FOUND not in result.stderr:
            sys.stderr.write(result.stdout + result.stderr)
            sys.exit(result.returncode)
    return None


def install_pypi_torch(release: str) -> None:
    """PyPI's build of the release (CUDA on Linux x86-64), its CUDA wheels pinned by the GPU lock and its other
    dependencies by the lock; never the CPU build, which a wheel folder of this machine may hold."""
    with tempfile.TemporaryDirectory() as folder:
        constraints = ("-c", str(GPU_LOCK), "-c", str(lock_without_torch(Path(folder))))
        result = pip_install(f"torch=={release},!={release}+cpu", *constraints)
    if result.returncode != 0:
        sys.exit(result.returncode)


def install_torch(cpu_index: str, cuda: bool, index_url: str | None) -> None:
    version = lock_torch()
    release = version.split("+")[0]
    if index_url:
        result = pip_install(f"torch=={release}", "--index-url", index_url)
        if result.returncode != 0:
            sys.exit(result.returncode)
        print(f"torch {installed_torch()} from {index_url} (the lock pins {version})")
        return
    if cuda:
        install_pypi_torch(release)
        print(f"torch {installed_torch()}: PyPI's CUDA build, its CUDA wheels pinned by {GPU_LOCK.name} (CUDA=1)")
        return
    source = install_cpu_torch(version, cpu_index)
    if source is not None:
        print(f"torch {installed_torch()}: the CPU build the lock pins, from {source}")
        return
    install_pypi_torch(release)
    print(
        f"warning: torch {version}, the CPU build the lock pins, is neither in this machine's pip sources nor on "
        f"{cpu_index}: installed PyPI's torch {installed_torch()} instead, on Linux x86-64 the CUDA build (its CUDA "
        f"wheels, several GB, pinned by requirements/{GPU_LOCK.name}). Numbers may differ from the release's: "
        f"`make check` reports it (environment: torch: {version} → {installed_torch()}). For the CPU build: a "
        "folder holding its wheel (PIP_FIND_LINKS=/path/to/wheels make install) or a mirror of the PyTorch CPU "
        "index (make install TORCH_CPU_INDEX_URL=https://…/whl/cpu).",
        file=sys.stderr,
    )


def install_lock() -> None:
    """Every pin of the lock but torch's, with torch as the previous step installed it."""
    with tempfile.TemporaryDirectory() as folder:
        result = pip_install("-r", str(lock_without_torch(Path(folder))))
    if result.returncode != 0:
        sys.exit(result.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    torch = steps.add_parser("torch", help="the lock's torch, from its own source")
    torch.add_argument("--cpu-index", required=True, help="the PyTorch CPU index (or a mirror of it)")
    torch.add_argument("--cuda", action="store_true", help="PyPI's CUDA build, its CUDA wheels pinned")
    torch.add_argument("--index-url", help="the lock's torch release from this index alone (a CUDA build)")
    steps.add_parser("lock", help="the rest of the lock, torch as installed")
    args = parser.parse_args()
    if args.step == "torch":
        install_torch(args.cpu_index, args.cuda, args.index_url)
    else:
        install_lock()


if __name__ == "__main__":
    main()
