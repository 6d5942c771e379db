"""The runs ``make reference`` makes (docs/check.md): the default run here, and in copies of the workflow the same
config on the noise model's seeds and the default run perturbed as another machine perturbs it.

A config's seeds are among its run jobs' params (one sciLaMA job trains every seed), so a run on more seeds would
redo the default run's jobs here and leave its results out of date: it runs in a copy, as each perturbed rerun
does, under ``results/reference_runs/{rerun}/`` (the workflow without its results; downloads linked). Their
scores are then ``…/{rerun}/results/{name}``, ``name`` the config's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from celldag.errors import InputError
from celldag.registry import DEFAULT_CONFIG, apply_schema, read_yaml

REFERENCE_CONFIG = "config/reference.yaml"
SEEDS = "seeds"  # the rerun on the noise model's seeds
RERUNS = Path("results/reference_runs")


def reference_config(workflow: Path) -> dict:
    path = workflow / REFERENCE_CONFIG
    return apply_schema(read_yaml(path), "reference", path)


def snakemake(workflow: Path, cores: str, *arguments: str, env: dict[str, str] | None = None) -> None:
    """Run the workflow's Snakemake with this interpreter; a failed run raises naming the folder."""
    command = [sys.executable, "-m", "snakemake", "--cores", cores, *arguments]
    print(f"[reference] in {workflow}: {' '.join(command[2:])}", flush=True)
    done = subprocess.run(command, cwd=workflow, env={**os.environ, **(env or {})}, check=False)
    if done.returncode != 0:
        raise InputError(
            f"{workflow}: snakemake {' '.join(arguments)} failed (exit {done.returncode}); its log is "
            f"in {workflow / '.snakemake' / 'log'}"
        )


NOT_COPIED = {"results", "resources", ".snakemake", ".venv", ".git", "__pycache__", ".pytest_cache"}


def workflow_copy(workflow: Path, dest: Path) -> None:
    """The workflow folder copied to ``dest`` without its outputs, caches and environments; its downloads
    (``resources/``) linked, not fetched again."""
    shutil.copytree(
        workflow,
        dest,
        dirs_exist_ok=True,
        ignore=lambda folder, names: [n for n in names if n in NOT_COPIED and Path(folder) == workflow],
    )
    downloads = workflow / "resources"
    if downloads.is_dir() and not (dest / "resources").exists():
        (dest / "resources").symlink_to(downloads.resolve())


def rerun_folder(workflow: Path, name: str) -> Path:
    return workflow / RERUNS / name


def rerun(
    workflow: Path, name: str, cores: str, env: dict[str, str], threads: dict[str, int], config: tuple[str, ...] = ()
) -> Path:
    """The workflow's run in a fresh copy of it, with ``env``, ``threads`` (rule → threads) and ``config``
    (``--config`` items); its results folder. A copy left by an earlier call is reused: Snakemake reruns only what is
    missing or out of date."""
    folder = rerun_folder(workflow, name)
    workflow_copy(workflow, folder)
    arguments = ["--set-threads", *[f"{rule}={count}" for rule, count in threads.items()]] if threads else []
    snakemake(folder, cores, *arguments, *(["--config", *config] if config else []), env=env)
    return folder / "results" / config_name(folder)


def config_name(workflow: Path) -> str:
    """The name of the workflow's config (config/config.yaml): its results are results/{name}."""
    return str(read_yaml(workflow / DEFAULT_CONFIG)["name"])


def make_runs(workflow: Path, cores: str) -> dict[str, Path]:
    """Every run a reference is built from, by role: ``default`` (here), ``seeds``, and each rerun by its name."""
    config = reference_config(workflow)
    snakemake(workflow, cores)
    folders = {"default": workflow / "results" / config_name(workflow)}
    seeds = "seeds=[" + ",".join(str(seed) for seed in config["seeds"]) + "]"
    folders[SEEDS] = rerun(workflow, SEEDS, cores, {}, {}, (seeds,))
    for item in [*config["perturbations"], *config["held_out"]]:
        folders[item["name"]] = rerun(workflow, item["name"], cores, item["env"], item["threads"])
    return folders
