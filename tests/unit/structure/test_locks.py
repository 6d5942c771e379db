"""The GPU lock pins the CUDA build of the same torch the CPU lock pins, and nothing the CPU lock pins otherwise."""

from __future__ import annotations

from conftest import REPO


def pins(path) -> dict[str, str]:
    lines = [line.strip() for line in (REPO / path).read_text().splitlines()]
    return dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))


def test_the_gpu_lock_pins_the_cpu_locks_torch_and_only_cuda_packages_besides():
    cpu, gpu = pins("requirements/lock.txt"), pins("requirements/lock-gpu.txt")
    assert gpu["torch"] == cpu["torch"]
    others = set(gpu) - {"torch"}
    assert others and all(name.startswith(("nvidia-", "cuda-", "triton")) for name in others), sorted(others)
    assert not others & set(cpu), "a package pinned by both locks could disagree: pin it in one"


def test_the_makefile_installs_the_gpu_lock_on_request():
    makefile = (REPO / "Makefile").read_text()
    assert "-r requirements/lock.txt $(if $(CUDA),-c requirements/lock-gpu.txt)" in makefile
