"""The lock pins torch's CPU build, the GPU lock the CUDA build of the same release and nothing the lock pins
otherwise."""

from __future__ import annotations

import re

from conftest import REPO


def pins(path) -> dict[str, str]:
    lines = [line.strip() for line in (REPO / path).read_text().splitlines()]
    return dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))


def test_the_gpu_lock_pins_the_cpu_locks_torch_release_and_only_cuda_packages_besides():
    cpu, gpu = pins("requirements/lock.txt"), pins("requirements/lock-gpu.txt")
    assert cpu["torch"] == gpu["torch"] + "+cpu"  # the same release: its CPU build, PyPI's CUDA build
    others = set(gpu) - {"torch"}
    assert others and all(name.startswith(("nvidia-", "cuda-", "triton")) for name in others), sorted(others)
    assert not others & set(cpu), "a package pinned by both locks could disagree: pin it in one"


def test_the_locks_header_names_the_index_make_install_reads_for_its_torch():
    index = re.search(r"^TORCH_CPU_INDEX_URL \?= (\S+)$", (REPO / "Makefile").read_text(), flags=re.M).group(1)
    assert index == "https://download.pytorch.org/whl/cpu"
    assert (
        f"torch is its CPU build (+cpu), from {index} for torch alone" in (REPO / "requirements/lock.txt").read_text()
    )


def test_the_makefile_installs_the_gpu_build_on_request():
    makefile = (REPO / "Makefile").read_text()
    assert "requirements/install.py torch --cpu-index $(TORCH_CPU_INDEX_URL) $(if $(CUDA),--cuda)" in makefile
