"""The per-rule conda envs pin the same versions as the tested venv (requirements/lock.txt)."""

from __future__ import annotations

import re

import pytest
import yaml

from celldag.registry import read_yaml

CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}  # conda-forge names that differ from PyPI's


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def lock(repo) -> dict[str, str]:
    pins = {}
    for line in (repo / "requirements/lock.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[normalise(name)] = version.split("+")[0]  # torch's +cpu: conda-forge's pytorch of the release
    return pins


def env_files(repo):
    return sorted((repo / "envs").glob("*.yaml"))


def conda_and_pip_pins(dependencies: list) -> list[str]:
    """`name=version` strings of the conda entries and the pip section (`name==version` → `name=version`)."""
    pins = []
    for entry in dependencies:
        if isinstance(entry, dict):
            pins += [pin.split("#")[0].strip().replace("==", "=") for pin in entry["pip"]]
        elif not entry.startswith("pip="):  # the pip tool itself is the venv's, not the lock's
            pins.append(entry)
    return pins


def test_every_env_pin_matches_the_lock(repo, lock):
    assert env_files(repo), "no envs/*.yaml"
    for path in env_files(repo):
        env = yaml.safe_load(path.read_text())
        assert env["channels"] == ["conda-forge", "nodefaults"], path.name
        for dependency in conda_and_pip_pins(env["dependencies"]):
            name, _, version = dependency.partition("=")
            assert version, f"{path.name}: {dependency} is not pinned"
            if name == "python":
                assert version == "3.11", f"{path.name}: python {version}; the tested venv is 3.11"
                continue
            pypi = normalise(CONDA_TO_PYPI.get(name, name))
            assert pypi in lock, f"{path.name}: {name} is not in requirements/lock.txt"
            assert lock[pypi] == version, f"{path.name}: {name}={version} but the lock has {lock[pypi]}"


def test_every_env_has_pip(repo):
    """celldag is pip-installed (--no-deps) into each env after it is created: every env lists pip, one version."""
    versions = {}
    for path in env_files(repo):
        pips = [
            e for e in yaml.safe_load(path.read_text())["dependencies"] if isinstance(e, str) and e.startswith("pip=")
        ]
        assert len(pips) == 1, f"{path.name}: {len(pips)} pip= entries; each env needs one"
        versions[path.name] = pips[0]
    assert len(set(versions.values())) == 1, f"the envs pin different pips: {versions}"


def test_every_registry_env_and_rule_env_exists(repo):
    names = {path.stem for path in env_files(repo)}
    for method, entry in read_yaml(repo / "config/methods.yaml").items():
        assert entry.get("env", "lineage") in names, f"method {method}: envs/{entry.get('env')}.yaml is missing"
    for rule_file in (repo / "workflow/rules").glob("*.smk"):
        for env in re.findall(r'"\.\./\.\./envs/([\w-]+)\.yaml"', rule_file.read_text()):
            assert env in names, f"{rule_file.name} uses envs/{env}.yaml, which is missing"


def test_lock_pins_the_orchestrator_and_cpu_torch(lock):
    assert lock["snakemake"].startswith("9.")
    assert lock["snakemake-executor-plugin-slurm"].startswith("2.")
    assert lock["torch"] == "2.13.0"
