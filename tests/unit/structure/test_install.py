"""`make install` takes the lock's CPU build of torch, and where only PyPI's build can be had installs it saying so
(requirements/install.py, the Makefile's torch step): against stub indexes on disk holding a stub `torch` of the
lock's release, as PyPI (2.13.0) and PyTorch's CPU index (2.13.0+cpu) serve it, with pip's configuration of this
machine left out. `make lock` keeps the +cpu."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

LOCKED_TORCH = next(
    line for line in (REPO / "requirements/lock.txt").read_text().splitlines() if line.startswith("torch==")
)
RELEASE = LOCKED_TORCH.removeprefix("torch==").split("+")[0]


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def stub_wheel(folder: Path, version: str) -> Path:
    """A pure-Python wheel named torch of ``version``: a zip of the package and its dist-info."""
    dist_info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: celldag-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


def stub_index(root: Path, version: str) -> str:
    """A simple index at ``root`` whose only project is torch with one wheel of ``version``; its file:// URL."""
    wheel = stub_wheel(root / "torch", version)
    (root / "torch/index.html").write_text(f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>\n')
    return root.as_uri()


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    return folder


@pytest.fixture(scope="module")
def pypi(tmp_path_factory) -> str:
    return stub_index(tmp_path_factory.mktemp("pypi"), RELEASE)


@pytest.fixture(scope="module")
def pytorch_cpu(tmp_path_factory) -> str:
    return stub_index(tmp_path_factory.mktemp("pytorch-cpu"), f"{RELEASE}+cpu")


def install_torch(venv: Path, pypi: str, cpu_index: str, *args: str, find_links: Path | None = None):
    """The Makefile's torch step in ``venv``, pip reading the stub indexes only; the torch it left installed."""
    subprocess.run(
        [venv / "bin/python", "-m", "pip", "uninstall", "--quiet", "--yes", "torch"], check=True, capture_output=True
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("PIP_")}
    env |= {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": pypi,
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if find_links is not None:
        env["PIP_FIND_LINKS"] = str(find_links)
    command = [venv / "bin/python", REPO / "requirements/install.py", "torch", "--cpu-index", cpu_index, *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    installed = [path.name for path in venv.glob("lib/python*/site-packages/torch-*.dist-info")]
    return installed, result


@pytest.mark.slow
def test_the_lock_pins_the_cpu_build_and_the_install_takes_it_from_the_pytorch_index_over_pypis(
    venv, pypi, pytorch_cpu
):
    assert LOCKED_TORCH == f"torch=={RELEASE}+cpu"
    installed, result = install_torch(venv, pypi, pytorch_cpu)
    assert installed == [f"torch-{RELEASE}+cpu.dist-info"]
    assert f"torch {RELEASE}+cpu: the CPU build the lock pins, from {pytorch_cpu}" in result.stdout
    assert "warning" not in result.stderr


@pytest.mark.slow
def test_a_wheel_folder_of_this_machine_serves_the_cpu_build_where_the_pytorch_index_is_out_of_reach(
    venv, pypi, tmp_path
):
    wheels = tmp_path / "wheels"
    stub_wheel(wheels, f"{RELEASE}+cpu")
    unreachable = (tmp_path / "no-such-index").as_uri()
    installed, result = install_torch(venv, pypi, unreachable, find_links=wheels)
    assert installed == [f"torch-{RELEASE}+cpu.dist-info"]
    assert "from this machine's pip sources (pip config)" in result.stdout


@pytest.mark.slow
def test_where_only_pypi_has_the_release_its_cuda_build_is_installed_and_said_so(venv, pypi, tmp_path):
    installed, result = install_torch(venv, pypi, (tmp_path / "no-such-index").as_uri())
    assert installed == [f"torch-{RELEASE}.dist-info"]
    assert f"installed PyPI's torch {RELEASE} instead, on Linux x86-64 the CUDA build" in result.stderr
    assert f"`make check` reports it (environment: torch: {RELEASE}+cpu → {RELEASE})" in result.stderr


@pytest.mark.slow
def test_cuda_takes_pypis_build_even_where_a_wheel_folder_holds_the_cpu_build(venv, pypi, pytorch_cpu, tmp_path):
    wheels = tmp_path / "wheels"
    stub_wheel(wheels, f"{RELEASE}+cpu")  # a higher version to pip than the plain release: excluded by name
    installed, result = install_torch(venv, pypi, pytorch_cpu, "--cuda", find_links=wheels)
    assert installed == [f"torch-{RELEASE}.dist-info"]
    assert "PyPI's CUDA build" in result.stdout


# make as a user types it, not as a sub-make of `make test-all` (CI): a sub-make inherits MAKEFLAGS and prints
# "make[1]: Entering directory …" around what it runs
OUTSIDE_MAKE = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}


def test_make_install_installs_torch_before_the_rest_of_the_lock_and_runs_nothing(tmp_path):
    commands = subprocess.run(
        ["make", "-n", "-B", "install", f"VENV={tmp_path / 'venv'}"],
        cwd=REPO,
        env=OUTSIDE_MAKE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    steps = [
        line.split("requirements/install.py ", 1)[1].strip() for line in commands if "requirements/install.py" in line
    ]
    assert steps == ["torch --cpu-index https://download.pytorch.org/whl/cpu", "lock"]
    assert not any("bin/snakemake" in line or "-m pytest" in line for line in commands)
    assert commands[-1] == f"touch {tmp_path / 'venv/bin/.installed'}"


def test_the_lock_step_installs_every_pin_but_torch(tmp_path):
    spec = importlib.util.spec_from_file_location("requirements_install", REPO / "requirements/install.py")
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    lock = (REPO / "requirements/lock.txt").read_text().splitlines()
    assert install.lock_without_torch(tmp_path).read_text().splitlines() == [
        line for line in lock if line != LOCKED_TORCH
    ]


def make_lock(folder: Path, frozen: str) -> subprocess.CompletedProcess:
    """`make lock` in a copy of the Makefile and requirements/, its venv's pip freeze printing ``frozen``."""
    shutil.copy(REPO / "Makefile", folder / "Makefile")
    shutil.copytree(REPO / "requirements", folder / "requirements")
    shutil.copy(REPO / "pyproject.toml", folder / "pyproject.toml")
    python = folder / ".venv/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nprintf '%s\\n' '{frozen}'\n")
    python.chmod(0o755)
    (folder / ".venv/bin/.installed").touch()  # newer than the lock: nothing reinstalled
    return subprocess.run(["make", "lock"], cwd=folder, env=OUTSIDE_MAKE, capture_output=True, text=True)


def test_make_lock_keeps_the_cpu_build_of_torch(tmp_path):
    result = make_lock(tmp_path, f"numpy==2.4.6\ntorch=={RELEASE}+cpu")
    assert result.returncode == 0, result.stderr
    header = (REPO / "requirements/lock.txt").read_text().splitlines()[0]
    assert (tmp_path / "requirements/lock.txt").read_text().splitlines() == [header, "numpy==2.4.6", LOCKED_TORCH]


def test_make_lock_refuses_a_venv_with_another_torch_build(tmp_path):
    result = make_lock(tmp_path, f"numpy==2.4.6\nnvidia-cublas==13.1.1.3\ntorch=={RELEASE}")
    assert result.returncode != 0
    assert "make lock: .venv's torch is not the CPU build (+cpu) the lock pins" in result.stderr
    assert (tmp_path / "requirements/lock.txt").read_text() == (REPO / "requirements/lock.txt").read_text()
