"""A stand-in `conda` executable for tests/e2e/test_e2e_conda.py: answers the calls Snakemake 9's conda deployment
(snakemake/deployment/conda.py) makes, offline, and builds each env from this machine's packages.

It proves Snakemake's env handling and celldag's files — the generated env files, their hashes, the
post-deploy scripts, the jobs' self-check — not conda's solver: no channel is reachable where celldag is
tested, so nothing is downloaded or solved. What it answers (anything else exits 2, naming the call):

- ``conda info --json``: ``conda_prefix`` (this stand-in's base folder, whose ``bin/activate`` Snakemake
  sources to enter an env) and ``platform`` (for pin files ``<env>.<platform>.pin.txt``);
- ``conda --version``: 24.11.3 (Snakemake requires 24.7.1 or later);
- ``conda config --get channel_priority --json``: strict;
- ``conda env create --quiet --no-default-packages --file <env.yaml> --prefix <P>``: builds P as a venv of
  the Python that runs the stand-in's base interpreter (``python=3.11`` must match it), with a
  site-packages that links, from the environment running the stand-in, each distribution the env file
  names — its conda entries mapped to their PyPI names (``pytorch`` → ``torch``, ``matplotlib-base`` →
  ``matplotlib``) and its ``pip:`` section — at exactly the pinned version (another version, or none,
  fails as an unsatisfiable env would), plus what those require (their metadata's Requires-Dist, markers
  evaluated; conda would solve for them). ``celldag`` is never linked: only a post-deploy script puts it
  into an env. ``pip`` is the tool (as tests/unit/workflow/test_envs.py treats it): linked, its version not compared;
- ``conda clean -y --tarballs``: what Snakemake calls after creating an env (its default cleanup); nothing to do;
- ``conda create --quiet --no-default-packages --file <pin.txt> --prefix <P> --yes``: the same from an
  explicit pin file (package URLs ``…/<name>-<version>-<build>.conda``), as ``snakedeploy pin-conda-envs``
  writes them: conda packages only, no pip section.

``<base>/bin/activate <P>`` (sourced) sets ``CONDA_PREFIX`` and puts ``<P>/bin`` first on ``PATH``. Every
call is appended to ``<base>/calls.log``. The test writes the ``conda`` wrapper that runs this file into
``<base>/bin`` and puts that folder first on ``PATH``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import venv
from pathlib import Path

import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement

BASE = Path(os.environ.get("CONDA_STANDIN_BASE", Path(__file__).resolve().parent)).resolve()
VERSION = "24.11.3"
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}  # as tests/unit/workflow/test_envs.py
NEVER_LINKED = {"celldag"}
TOOLS = {"pip"}  # the env's tool: its version is not compared


class Unsatisfiable(SystemExit):
    def __init__(self, message: str) -> None:
        print(f"conda stand-in: {message}", file=sys.stderr)
        super().__init__(1)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def env_specs(path: Path) -> list[tuple[str, str | None]]:
    """(PyPI name, pinned version or None) of an env file's conda entries and pip section."""
    env = yaml.safe_load(path.read_text())
    specs = []
    for entry in env.get("dependencies") or []:
        if isinstance(entry, dict):
            for requirement in entry.get("pip") or []:
                parsed = Requirement(str(requirement).split(" #")[0].strip())
                pins = [s.version for s in parsed.specifier if s.operator == "=="]
                specs.append((normalise(parsed.name), pins[0] if pins else None))
            continue
        name, _, version = str(entry).split("#")[0].strip().partition("=")
        specs.append((name, version.lstrip("=") or None))
    return specs


def pin_specs(path: Path) -> list[tuple[str, str | None]]:
    """(name, version) of an explicit pin file's package URLs (``<name>-<version>-<build>.<ext>``)."""
    specs = []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("@"):
            continue
        stem = re.sub(r"\.(conda|tar\.bz2)$", "", line.rsplit("/", 1)[-1])
        name, version, _build = stem.rsplit("-", 2)
        specs.append((name, version))
    return specs


def closure(specs: list[tuple[str, str | None]]) -> dict[str, importlib.metadata.Distribution]:
    """The distributions to link, by normalised name: those named, at their pins, and what they require."""
    chosen: dict[str, importlib.metadata.Distribution] = {}
    pending = []
    for conda_name, version in specs:
        if conda_name == "python":
            found = f"{sys.version_info.major}.{sys.version_info.minor}"
            if version and not f"{found}.{sys.version_info.micro}".startswith(version):
                raise Unsatisfiable(f"python={version}: the stand-in's Python is {found}")
            continue
        name = normalise(CONDA_TO_PYPI.get(conda_name, conda_name))
        if name in NEVER_LINKED:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise Unsatisfiable(f"{conda_name}{'=' + version if version else ''}: not on this machine") from None
        # a local label is a build of the same release, as conda's build strings are (torch 2.13.0+cpu is 2.13.0)
        if version and name not in TOOLS and dist.version.split("+")[0] != version:
            raise Unsatisfiable(f"{conda_name}={version}: this machine has {dist.version}")
        chosen[name] = dist
        pending.append(dist)
    marker_env = default_environment() | {"extra": ""}
    while pending:
        for requirement in pending.pop().requires or []:
            parsed = Requirement(requirement)
            if parsed.marker is not None and not parsed.marker.evaluate(marker_env):
                continue
            name = normalise(parsed.name)
            if name in chosen or name in NEVER_LINKED:
                continue
            try:
                chosen[name] = importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                continue  # an optional dependency this machine does without: so does the env
            pending.append(chosen[name])
    return chosen


def build(prefix: Path, specs: list[tuple[str, str | None]], source: Path) -> None:
    dists = closure(specs)
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(prefix)
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    linked = {}
    for name, dist in sorted(dists.items()):
        root = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if Path(f).parts and Path(f).parts[0] != ".."}
        for top in sorted(tops - {"__pycache__"}):
            if top.endswith(".pth") or not (root / top).exists() or (site / top).exists():
                continue
            (site / top).symlink_to(root / top)
        linked[name] = dist.version
    meta = prefix / "conda-meta"
    meta.mkdir(exist_ok=True)
    (meta / "history").write_text(f"# conda stand-in: from {source}\n")
    (meta / "standin.json").write_text(json.dumps({"file": str(source), "linked": linked}, indent=1, sort_keys=True))


def option(args: list[str], name: str) -> str:
    if name not in args:
        raise SystemExit(f"conda stand-in: {name} missing in {args}")
    return args[args.index(name) + 1].strip("'\"")


def main(args: list[str]) -> int:
    with open(BASE / "calls.log", "a") as log:
        print(json.dumps(args), file=log)
    if args == ["info", "--json"]:
        print(
            json.dumps(
                {
                    "conda_prefix": str(BASE),
                    "root_prefix": str(BASE),
                    "platform": "linux-64",
                    "conda_version": VERSION,
                    "envs_dirs": [str(BASE / "envs")],
                }
            )
        )
    elif args == ["--version"]:
        print(f"conda {VERSION}")
    elif args[:2] == ["config", "--get"] and "channel_priority" in args:
        print(json.dumps({"get": {"channel_priority": "strict"}, "rc_path": str(BASE / ".condarc"), "success": True}))
    elif args[:2] == ["env", "create"]:
        source = Path(option(args, "--file"))
        build(Path(option(args, "--prefix")), env_specs(source), source)
    elif args[:1] == ["clean"]:
        pass  # nothing was downloaded, so no package tarballs to clean
    elif args[:1] == ["create"] and "--file" in args:
        source = Path(option(args, "--file"))
        build(Path(option(args, "--prefix")), pin_specs(source), source)
    else:
        print(f"conda stand-in: unsupported call: conda {' '.join(args)}", file=sys.stderr)
        return 2
    return 0


ACTIVATE = """\
# conda stand-in (tests/support/conda_standin.py): `source activate <prefix>` enters that env
if [ ! -x "$1/bin/python" ]; then echo "conda stand-in: $1: no env" >&2; return 1; fi
export CONDA_PREFIX="$(cd "$1" && pwd)" CONDA_DEFAULT_ENV="$1" CONDA_SHLVL=1
export PATH="$CONDA_PREFIX/bin:$PATH"
"""


def install(base: Path, python: str) -> Path:
    """Write the stand-in's base folder: bin/conda (this file, run by ``python``) and bin/activate; its bin."""
    bin_dir = base / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    conda = bin_dir / "conda"
    conda.write_text(f"#!/bin/sh\nCONDA_STANDIN_BASE='{base}' exec '{python}' '{Path(__file__).resolve()}' \"$@\"\n")
    conda.chmod(0o755)
    (bin_dir / "activate").write_text(ACTIVATE)
    return bin_dir


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
