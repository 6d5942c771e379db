"""ruff's checks and its format (pyproject.toml [tool.ruff]) hold over src, workflow, tests and benchmarks: an unused
import or an undefined name fails the fast tier, not a reviewer's eye."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from conftest import REPO

RUFF = Path(sys.executable).parent / "ruff"  # installed beside this Python from requirements/lock.txt
LINTED = ("src", "workflow", "tests", "benchmarks")


def ruff_check(*paths: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), "check", "--no-cache", *paths], cwd=cwd, capture_output=True, text=True)


def test_the_tree_passes_ruff():
    checked = ruff_check(*LINTED)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ruff_with_the_projects_settings_finds_an_unused_import_and_an_undefined_name(tmp_path):
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "module.py").write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    (tmp_path / "script.py").write_text("print(snakemake.input)\n")  # Snakemake's script object: a builtin here
    checked = ruff_check("module.py", "script.py", cwd=tmp_path)
    assert checked.returncode == 1
    assert "F401" in checked.stdout and "F821" in checked.stdout and "script.py" not in checked.stdout


def test_the_tree_is_formatted_by_ruff():
    formatted = subprocess.run(
        [str(RUFF), "format", "--check", "--no-cache", *LINTED], cwd=REPO, capture_output=True, text=True
    )
    assert formatted.returncode == 0, "run .venv/bin/ruff format: " + formatted.stdout + formatted.stderr


def test_the_commit_hooks_run_the_projects_own_tools():
    """Local hooks only (nothing fetched at commit time), each an executable of this .venv, which CI also uses."""
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    hooks = config["repos"][0]["hooks"]
    assert {hook["language"] for hook in hooks} == {"system"}
    for hook in hooks:
        executable = REPO / hook["entry"].split()[0]
        assert executable.parent == REPO / ".venv/bin" and executable.name in {
            RUFF.name,
            "lint-imports",
            "snakemake",
            "python",
        }, hook["entry"]
        assert (RUFF.parent / executable.name).is_file(), f"{hook['id']}: {executable.name} is not in the .venv"
    assert {"ruff-check", "ruff-format", "import-contracts", "fast-tests"} <= {hook["id"] for hook in hooks}


def test_the_formatter_owns_the_layout():
    """No hand layout the formatter is told to skip, imports sorted and no line over the limit: ruff's I and E501 are
    selected (the tree passing them is test_the_tree_passes_ruff)."""
    skipped = [str(path) for path in (REPO / "src").rglob("*.py") if "fmt: " + "skip" in path.read_text()]
    assert not skipped, f"# fmt: skip in {skipped}"
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    assert {"I", "E501"} <= set(settings["lint"]["select"]) and settings["line-length"] == 120
