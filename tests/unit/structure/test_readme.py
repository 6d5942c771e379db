"""Every shell command of the README runs as written: the `make` targets exist, every `snakemake` form parses
(dry runs, as `-n`; the others with `-n` added), every `celldag` subcommand exists."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conda_standin import install
from conftest import copy_workflow

# Each command runs Snakemake (a dry run, or the conda env set-up) in a subprocess: 4-17 s apiece
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]


def readme_commands() -> list[str]:
    """The command lines of the README's ```bash blocks, comments and blank lines dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_has_its_three_commands_first():
    commands = readme_commands()
    assert commands[:3] == ["make run", "make test", "make check"]
    assert not re.search(r"revision [0-9a-f]{7}|\d+\.\d s and \d+\.\d s", (ROOT / "README.md").read_text())


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout to run the commands in (their .snakemake/ stays out of the repository)."""
    folder = copy_workflow(tmp_path_factory.mktemp("readme") / "celldag")
    shutil.copytree(ROOT / "src", folder / "src")
    return folder


@pytest.fixture(scope="module")
def conda_path(tmp_path_factory) -> str:
    """PATH with the tests' stand-in conda first (tests/support/conda_standin.py: Snakemake's env handling, not a solver)."""
    base = tmp_path_factory.mktemp("conda-standin")
    install(base, sys.executable)
    return f"{base / 'bin'}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_runs_as_written(command, checkout, conda_path):
    words = shlex.split(command)
    tool = Path(words[0]).name
    if tool == "make":
        targets = [word for word in words[1:] if "=" not in word]
        result = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0 and targets, (command, result.stderr)
    elif tool == "snakemake":
        dry = words[1:] if "-n" in words else [*words[1:], "-n"]
        environ = {key: value for key, value in os.environ.items() if not key.startswith("CONDA")}
        if "conda" in words:
            environ |= {"PATH": conda_path, "PIP_NO_INDEX": "1"}
        result = subprocess.run([sys.executable, "-m", "snakemake", *dry, "--quiet", "rules"], cwd=checkout,
                                env=environ, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-2000:])
    elif tool == "celldag":
        result = subprocess.run([str(Path(sys.executable).parent / "celldag"), words[1], "--help"], cwd=ROOT,
                                capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 0, (command, result.stderr)
    else:
        pytest.fail(f"the README runs {tool!r}, which this test does not know how to check: {command}")
