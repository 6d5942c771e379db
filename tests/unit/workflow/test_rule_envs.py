"""celldag.jobs.envs' side of the rules' conda envs (RuleEnvs and the functions common.smk's adapter calls), on plain
inputs: a workflow folder on disk or in memory, a file-exists callable, the --sdm conda flag. The files the generated
envs hold: tests/unit/workflow/test_conda_envs.py; end to end through Snakemake: tests/e2e/test_e2e_conda.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from celldag.jobs import envs
from celldag.registry import Registries

LINEAGE = (REPO / "envs/lineage.yaml").read_text()
PIN = b"@EXPLICIT\nhttps://conda.anaconda.org/conda-forge/linux-64/numpy-2.4.6-py311_0.conda\n"


def small_workflow(root: Path) -> Path:
    """A workflow folder as celldag.jobs.envs reads it: pyproject.toml, src/celldag,
    envs/ (two families, one pinned)."""
    (root / "src/celldag").mkdir(parents=True)
    (root / "envs").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "celldag"\nversion = "0.1.0"\n')
    (root / "src/celldag/__init__.py").write_text('__version__ = "0.1.0"\n')
    (root / "envs/lineage.yaml").write_text(LINEAGE)
    (root / "envs/lineage.linux-64.pin.txt").write_bytes(PIN)
    (root / "envs/report.yaml").write_text("dependencies: [python=3.11, pip]\n")
    (root / "envs/report-extra.linux-64.pin.txt").write_bytes(b"not report's")  # another family's name prefix
    return root


def rule_envs(tmp_path: Path, sdm_conda: bool, tree=None, exists=None) -> tuple[envs.RuleEnvs, list[str]]:
    """RuleEnvs over ``tree`` (default: a small workflow folder on disk), writing into tmp_path/out; and the log of
    the tree's reads (one entry per read of the whole folder)."""
    reads: list[str] = []
    folder = None if tree else small_workflow(tmp_path / "celldag")

    def read_tree() -> envs.Tree:
        reads.append("tree")
        return tree or envs.directory_tree(folder)

    made = envs.RuleEnvs(
        sdm_conda,
        read_tree,
        lambda family: f"/shipped/envs/{family}.yaml",
        exists or (lambda path: False),
        tmp_path / "out",
    )
    return made, reads


def test_without_sdm_conda_a_rule_runs_in_the_given_file_and_the_workflow_is_never_read(tmp_path):
    made, reads = rule_envs(tmp_path, sdm_conda=False)
    assert made.env_file("lineage") == "/shipped/envs/lineage.yaml"
    assert made.env_file("lineage", ["labpkg"]) == "/shipped/envs/lineage.yaml"  # packages: on PYTHONPATH instead
    assert made.env_file("lab/env.yaml") == os.path.abspath("lab/env.yaml")
    assert reads == [] and not (tmp_path / "out").exists()


def test_under_sdm_conda_a_family_gets_its_generated_env_with_its_pins_reading_the_workflow_once(tmp_path):
    made, reads = rule_envs(tmp_path, sdm_conda=True)
    lineage = made.env_file("lineage")
    out = (tmp_path / "out").resolve()
    assert lineage == str(out / "lineage.yaml")
    text = Path(lineage).read_text()
    assert f"# Made from envs/lineage.yaml of checkout {(tmp_path / 'celldag').resolve()};" in text
    assert text.endswith(LINEAGE)
    assert (out / "lineage.linux-64.pin.txt").read_bytes() == PIN
    assert made.env_file("report") == str(out / "report.yaml")
    assert not list(out.glob("report*.pin.txt"))  # report-extra's pin file is not report's
    assert made.env_file("lineage") == lineage  # asked again (each job of a rule): written once
    assert reads == ["tree"]  # one read of the workflow folder for every env


def test_under_sdm_conda_a_labs_env_file_gets_its_pins_and_packages(tmp_path):
    made, _ = rule_envs(tmp_path, sdm_conda=True)
    lab = tmp_path / "lab"
    (lab / "envs").mkdir(parents=True)
    (lab / "envs/method.yaml").write_text("dependencies: [python=3.11]\n")
    (lab / "envs/method.osx-arm64.pin.txt").write_bytes(PIN)
    (lab / "pkgs/labpkg").mkdir(parents=True)
    (lab / "pkgs/labpkg/__init__.py").write_text("")
    env, packages = str(lab / "envs/method.yaml"), (str(lab / "pkgs"),)
    generated = Path(made.env_file(env, packages))
    assert generated.name == f"{envs.env_name(env, packages)}.yaml" and generated.name.startswith("method-")
    assert generated.with_name(generated.stem + ".osx-arm64.pin.txt").read_bytes() == PIN
    text = generated.read_text()
    assert "#   celldag-path-labpkg 0+" in text and "# pip added to the dependencies" in text
    assert envs.file_pins(lab / "envs/method.yaml") == {"osx-arm64": PIN}


def test_an_env_that_cannot_be_generated_names_itself(tmp_path):
    made, _ = rule_envs(tmp_path, sdm_conda=True)
    lab_env = tmp_path / "lab.yaml"
    lab_env.write_text("name: lab\n")
    named = re.escape(str(lab_env.resolve()))
    with pytest.raises(envs.EnvError, match=rf"^conda env {re.escape(str(lab_env))}: {named}: not a conda env file"):
        made.env_file(str(lab_env))
    bare, _ = rule_envs(tmp_path / "bare", sdm_conda=True, tree=envs.reader_tree(lambda path: b"", [], "URL http://x"))
    with pytest.raises(envs.EnvError, match=r"^conda env lineage: URL http://x: no src/celldag/__init__\.py"):
        bare.env_file("lineage")


def test_pins_of_a_family_are_listed_or_asked_for_platform_by_platform(tmp_path):
    folder = small_workflow(tmp_path / "celldag")
    assert envs.family_pins(envs.directory_tree(folder), "lineage", lambda path: pytest.fail(path)) == {"linux-64": PIN}
    assert envs.family_pins(envs.directory_tree(folder), "report", lambda path: pytest.fail(path)) == {}
    files = {"envs/lineage.osx-64.pin.txt": b"osx"}
    asked: list[str] = []
    at_url = envs.reader_tree(files.__getitem__, [], "URL http://x")  # lists no envs/: each platform is asked for

    def exists(path: str) -> bool:
        asked.append(path)
        return path in files

    assert envs.family_pins(at_url, "lineage", exists) == {"osx-64": b"osx"}
    assert asked == [f"envs/lineage.{platform}.pin.txt" for platform in envs.PLATFORMS]


def test_a_rules_literal_env_names_its_family():
    assert envs.literal_family("../../envs/lineage.yaml") == "lineage"
    assert envs.literal_family("../../envs/scvi-gpu.yaml") == "scvi-gpu"
    assert envs.literal_family("envs/lineage.yaml") is None  # a lab's path
    assert envs.literal_family("../../envs/Lineage.yaml") is None
    assert envs.literal_family(lambda wildcards: "x") is None  # dataset_env, method_env


def test_an_entry_naming_a_missing_family_is_named_by_its_registry_file(registries: Registries):
    asked: list[str] = []

    def exists(path: str) -> bool:
        asked.append(path)
        return path != "envs/lineag.yaml"

    assert envs.entry_env_problem(registries, exists) is None
    families = {entry.get("env") for kind in (registries.datasets, registries.methods) for entry in kind.values()} - {
        None
    }
    assert sorted(asked) == sorted(f"envs/{family}.yaml" for family in families)  # each family asked once
    registries.methods["lab_corr_nj"] = registries.methods["nj_raw"] | {"env": "lineag"}
    registries.methods["lab_file"] = registries.methods["nj_raw"] | {
        "env": "lab/envs/method.yaml"
    }  # a path: not a family
    registries.origins["methods"] = {"lab_corr_nj": "lab/methods.yaml"}
    assert envs.entry_env_problem(registries, exists) == (
        "lab/methods.yaml: lab_corr_nj.env: no env family 'lineag' (envs/lineag.yaml of the celldag workflow)"
    )
    assert "lab/envs/method.yaml" not in " ".join(asked)


def test_job_variables_name_the_version_and_sdm_conda_only_when_on():
    environ = {envs.SDM_CONDA_VARIABLE: "1", "OTHER": "x"}
    envs.set_job_variables("0.2.0", False, environ)
    assert environ == {envs.VERSION_VARIABLE: "0.2.0", "OTHER": "x"}
    envs.set_job_variables("0.2.0", True, environ)
    assert environ == {envs.VERSION_VARIABLE: "0.2.0", envs.SDM_CONDA_VARIABLE: "1", "OTHER": "x"}


def test_a_git_source_is_read_at_the_commit_its_ref_names(tmp_path):
    repository = tmp_path / "repo"
    small_workflow(repository / "wf")
    git = ["git", "-c", "user.name=celldag", "-c", "user.email=celldag@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=repository, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repository, check=True)
    subprocess.run([*git, "commit", "-qm", "release"], cwd=repository, check=True)
    subprocess.run([*git, "tag", "v0.1.0"], cwd=repository, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repository, check=True, capture_output=True, text=True
    ).stdout.strip()
    (repository / "wf/envs/lineage.yaml").write_text("edited after the tag\n")  # not in the commit
    tree = envs.git_source_tree(repository, "v0.1.0", "wf", "https://github.com/lab/celldag")
    assert tree.origin == f"git repository https://github.com/lab/celldag commit {commit}"
    assert tree.read("envs/lineage.yaml").decode() == LINEAGE
    assert tree.listing("src/celldag") == ["__init__.py"]


def test_a_url_source_reads_the_installed_packages_file_list_from_the_url(tmp_path):
    package = tmp_path / "celldag"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plan.py").write_text("")
    (package / "__pycache__/plan.cpython-311.pyc").write_bytes(b"")
    served = {"src/celldag/__init__.py": b"served", "src/celldag/plan.py": b"", "pyproject.toml": b""}
    tree = envs.url_tree(served.__getitem__, package, "http://127.0.0.1:8000")
    assert tree.origin == "URL http://127.0.0.1:8000"
    assert tree.listing("src/celldag") == ["__init__.py", "plan.py"] and tree.listing("envs") == []
    assert tree.read("src/celldag/__init__.py") == b"served"
