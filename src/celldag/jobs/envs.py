"""Conda environments that carry celldag itself, for Snakemake's ``--sdm conda`` (docs/running.md#conda-environments).

Every job script imports the ``celldag`` package, and ``envs/<family>.yaml`` pins celldag's dependencies,
not celldag (it is on no package index, and a ``celldag @ git+…`` entry would pull all of its dependencies
into every env). Under ``--sdm conda`` a rule's ``conda:`` therefore names a file generated from the
shipped one (``RuleEnvs``; ``workflow/rules/common.smk``'s ``celldag_env``), in ``.snakemake/celldag-envs/`` of the
working directory:

- ``<name>.yaml``: the shipped (or a lab's) env file as it is, under a header that names the exact celldag
  source — a checkout's path, or a git repository and its resolved commit, or a URL — and the sha256 of its
  content, so that any change of celldag changes the env's hash and Snakemake builds a new env. ``pip`` is
  added to the dependencies when the file lacks it (the post-deploy script needs it);
- ``<name>.post-deploy.sh``: run by Snakemake once, inside the new env: ``pip install --no-deps --no-index``
  of a wheel of that celldag source (and of the lab's ``packages:``), then the env file's own ``pip:``
  section again (a pin file lists conda packages only: with one, the pip-only packages come from here);
- ``<name>.<platform>.pin.txt``: a copy of the shipped file's pin file, when there is one (Snakemake looks
  for it beside the env file it is given);
- ``wheels/<digest>/<name>-<version>-py3-none-any.whl``: the wheel, built here from the source's files (no
  build backend, no network, byte-identical for the same content).

Snakemake copies an env file to ``.snakemake/conda/<hash>.yaml`` before creating it, so nothing in these
files is a relative path. Cluster jobs parse the workflow again: the files are written only when their
content differs, atomically, and come out byte-identical from the same inputs.

Each job checks where it runs (``job_environment_problem``, called by ``celldag.jobs.joblog.start``): the
celldag it imported must be the workflow's version and, under ``--sdm conda``, come from the job's own env
(inside ``$CONDA_PREFIX``): Snakemake appends its own ``sys.path`` to every script (snakemake#840), so an
env that lacks celldag would otherwise run the celldag of the environment that runs Snakemake.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from celldag.release import content_digest, directory_files, kept

# set by the Snakefile at every parse (cluster jobs parse it again); jobs inherit them
VERSION_VARIABLE = "CELLDAG_WORKFLOW_VERSION"  # the workflow's pyproject.toml version
SDM_CONDA_VARIABLE = "CELLDAG_SDM_CONDA"  # "1" when Snakemake runs jobs in conda envs (--sdm conda)

GENERATED_DIR = ".snakemake/celldag-envs"  # relative to the working directory
FAMILY = re.compile(r"^[a-z][a-z0-9_-]*$")  # envs/<family>.yaml; anything else names an env file by path
PLATFORMS = ("linux-64", "linux-aarch64", "osx-64", "osx-arm64", "win-64")  # conda subdirs a pin file may be for
PIP = re.compile(r"^pip(\s|[=<>!~]|$)")


class EnvError(ValueError):
    """A source or env file that cannot become a generated env; the message names it."""


# ---------------------------------------------------------------- sources: the files a package is built from
@dataclass(frozen=True)
class Tree:
    """Files of a celldag workflow folder: ``read(path)`` and ``listing(folder)`` by paths relative to it
    ('/'-separated); ``origin``: where it is, in words (a header line of the generated env)."""

    read: Callable[[str], bytes]
    listing: Callable[[str], list[str]]
    origin: str


def directory_tree(root: Path, origin: str | None = None) -> Tree:
    """A checkout (or any folder holding pyproject.toml, src/celldag and envs/)."""
    root = Path(root).resolve()

    def listing(folder: str) -> list[str]:
        return directory_files(root / folder) if (root / folder).is_dir() else []

    return Tree(lambda path: (root / path).read_bytes(), listing, origin or f"checkout {root}")


def git(repository: str | Path, *args: str) -> bytes:
    result = subprocess.run(["git", "-C", str(repository), *args], capture_output=True)
    if result.returncode != 0:
        raise EnvError(f"git -C {repository} {' '.join(args)}: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def git_commit(repository: str | Path, ref: str) -> str:
    """The commit a branch, tag or commit names in a local repository (a clone, a bare cache)."""
    return git(repository, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()


def git_tree(repository: str | Path, commit: str, prefix: str = "", origin: str | None = None) -> Tree:
    """The workflow folder ``prefix`` of a repository at one commit, read with ``git archive`` (bytes as
    committed: no checkout, no working-tree changes)."""
    prefix = prefix.strip("/").removeprefix("./")
    prefix = "" if prefix in ("", ".") else prefix + "/"
    archive = git(
        repository,
        "archive",
        "--format=tar",
        commit,
        "--",
        *(f"{prefix}{p}" for p in ("pyproject.toml", "src", "envs")),
    )
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                files[member.name[len(prefix) :]] = tar.extractfile(member).read()  # type: ignore[union-attr]

    def read(path: str) -> bytes:
        if path not in files:
            raise EnvError(f"{repository}: {prefix}{path}: not in commit {commit}")
        return files[path]

    def listing(folder: str) -> list[str]:
        start = folder.rstrip("/") + "/"
        return sorted(p[len(start) :] for p in files if p.startswith(start) and kept(p[len(start) :]))

    return Tree(read, listing, origin or f"git repository {Path(repository).resolve()} commit {commit}")


def reader_tree(read: Callable[[str], bytes], package_files: Sequence[str], origin: str) -> Tree:
    """A workflow folder that can only be read file by file (a URL): ``package_files`` lists src/celldag."""

    def listing(folder: str) -> list[str]:
        return sorted(package_files) if folder == "src/celldag" else []

    return Tree(read, listing, origin)


# ---------------------------------------------------------------- packages and their wheels
@dataclass(frozen=True)
class Package:
    """A pure-Python distribution to install into an env: its files by their path in site-packages."""

    name: str
    version: str
    files: Mapping[str, bytes]
    origin: str  # where it comes from, in words
    digest: str  # sha256 of everything it is built from (celldag: its package files and pyproject.toml)
    summary: str = ""
    requires_python: str | None = None
    scripts: Mapping[str, str] = field(default_factory=dict)  # console script -> module:function

    @property
    def wheel_name(self) -> str:
        return f"{normalised(self.name)}-{self.version}-py3-none-any.whl"

    def describe(self) -> str:
        return f"{self.name} {self.version}: {self.origin}, content sha256 {self.digest}"


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def celldag_package(tree: Tree) -> Package:
    """celldag from a workflow folder: src/celldag/** and the name, version and scripts of pyproject.toml."""
    names = tree.listing("src/celldag")
    if "__init__.py" not in names:
        raise EnvError(
            f"{tree.origin}: no src/celldag/__init__.py: under --sdm conda every env gets celldag from the "
            "workflow's own source (a checkout, or a module from github(...), a URL or gitfile(...))"
        )
    pyproject = tree.read("pyproject.toml")
    project = tomllib.loads(pyproject.decode())["project"]
    files = {f"celldag/{name}": tree.read(f"src/celldag/{name}") for name in names}
    return Package(
        name=project["name"],
        version=project["version"],
        files=files,
        origin=tree.origin,
        digest=content_digest({**files, "pyproject.toml": pyproject}),
        summary=project.get("description", ""),
        requires_python=project.get("requires-python"),
        scripts=dict(project.get("scripts", {})),
    )


def path_package(path: str | Path) -> Package:
    """A lab's ``packages:`` entry: a folder of importable packages and modules, as one would put it on
    PYTHONPATH (a src layout's src/). Its top-level packages (folders holding Python files) and modules
    (*.py), with every file inside them, become one distribution ``celldag-path-<names>``, version
    ``0+<digest>``."""
    root = Path(path)
    if not root.is_dir():
        raise EnvError(
            f"{path}: not a folder (a packages: entry is a folder holding your importable package, as on PYTHONPATH)"
        )
    files: dict[str, bytes] = {}
    tops = []
    for entry in sorted(root.iterdir()):
        if entry.is_file() and entry.suffix == ".py" and entry.stem.isidentifier():
            files[entry.name] = entry.read_bytes()
            tops.append(entry.stem)
        elif entry.is_dir() and entry.name.isidentifier() and kept(entry.name):
            inside = directory_files(entry)
            if any(name.endswith(".py") for name in inside):
                files |= {f"{entry.name}/{name}": (entry / name).read_bytes() for name in inside}
                tops.append(entry.name)
    if not tops:
        raise EnvError(
            f"{path}: holds no Python package or module (a packages: entry is the folder your package is in)"
        )
    digest = content_digest(files)
    return Package(
        name="celldag-path-" + "-".join(t.replace("_", "-") for t in tops),
        version=f"0+{digest[:12]}",
        files=files,
        origin=f"path {root.resolve()}",
        digest=digest,
        summary=f"{', '.join(tops)} from {root.resolve()}, installed by celldag",
    )


def _record_hash(content: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()


def build_wheel(package: Package) -> bytes:
    """A wheel of a pure-Python package, byte-identical for the same package (sorted entries, fixed
    times). Its metadata names no dependencies: the env file provides them (installed with --no-deps)."""
    dist_info = f"{normalised(package.name)}-{package.version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {package.name}", f"Version: {package.version}"]
    if package.summary:
        metadata.append(f"Summary: {package.summary}")
    if package.requires_python:
        metadata.append(f"Requires-Python: {package.requires_python}")
    entries = dict(sorted(package.files.items()))
    entries[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    entries[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: celldag.jobs.envs\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if package.scripts:
        scripts = "".join(f"{name} = {target}\n" for name, target in sorted(package.scripts.items()))
        entries[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{scripts}".encode()
    record = "".join(f"{name},{_record_hash(content)},{len(content)}\n" for name, content in entries.items())
    entries[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, content in entries.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, content)
    return buffer.getvalue()


def wheel_path(directory: Path, package: Package) -> Path:
    return Path(directory).resolve() / "wheels" / package.digest[:16] / package.wheel_name


# ---------------------------------------------------------------- the generated env file and post-deploy script
def env_name(env: str, packages: Sequence[str] = ()) -> str:
    """A generated env's file stem: the family itself (``lineage``), else the env file's stem and a short
    hash of what it is made of (a lab's env file, a family with a lab's packages)."""
    if FAMILY.match(env) and not packages:
        return env
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(env).stem if not FAMILY.match(env) else env)
    spec = "\0".join([os.path.abspath(env) if not FAMILY.match(env) else env, *map(os.path.abspath, packages)])
    return f"{stem}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


def has_pip(dependencies: Iterable) -> bool:
    return any(isinstance(d, str) and PIP.match(d.strip()) for d in dependencies)


def pip_section(env: Mapping) -> list[str]:
    """The requirements of an env file's ``pip:`` section (comments gone)."""
    found = []
    for entry in env.get("dependencies") or []:
        if isinstance(entry, dict) and "pip" in entry:
            found += [str(r).split(" #")[0].strip() for r in entry["pip"] or []]
    return [r for r in found if r]


def env_file_text(base_text: str, base_path: str, packages: Sequence[Package], post_deploy: str) -> str:
    """The generated env file: a header naming what the post-deploy script installs (with each source's
    digest: a change of celldag changes the env's hash), then the base env file as it is — with ``pip``
    appended to its dependencies when it has none."""
    env = yaml.safe_load(base_text) or {}
    if not isinstance(env, dict) or not isinstance(env.get("dependencies"), list):
        raise EnvError(f"{base_path}: not a conda env file (no dependencies list)")
    header = [
        "# Written by celldag (celldag.jobs.envs) for Snakemake's --sdm conda, rewritten whenever it would differ: "
        "do not edit.",
        f"# Made from {base_path}; {post_deploy} beside it installs into the env (pip, --no-deps):",
        *(f"#   {package.describe()}" for package in packages),
    ]
    body = base_text if base_text.endswith("\n") else base_text + "\n"
    if not has_pip(env["dependencies"]):
        header.append("# pip added to the dependencies: the post-deploy script installs with it")
        body = yaml.safe_dump({**env, "dependencies": [*env["dependencies"], "pip"]}, sort_keys=False)
    return "\n".join(header) + "\n" + body


def post_deploy_text(name: str, wheels: Sequence[tuple[Package, Path]], requirements: Sequence[str]) -> str:
    """The post-deploy script: Snakemake runs it once in the new env (``source activate <env>; sh <it>``)."""
    pip = '"$CONDA_PREFIX/bin/python" -m pip install --no-input --disable-pip-version-check'
    lines = [
        "#!/bin/sh",
        f"# Written by celldag (celldag.jobs.envs) with {name}.yaml: Snakemake runs it once, inside the new env.",
        "set -eu",
    ]
    if requirements:
        lines += [
            "# the env file's pip section again: a pin file lists conda packages only (already installed: no-op)",
            f"{pip} {' '.join(shlex.quote(r) for r in requirements)}",
        ]
    for package, wheel in wheels:
        lines += [f"# {package.describe()}", f"{pip} --no-deps --no-index --force-reinstall {shlex.quote(str(wheel))}"]
    return "\n".join(lines) + "\n"


def write_if_changed(path: Path, content: bytes, mode: int = 0o644) -> bool:
    """Write ``content`` to ``path`` atomically unless it holds it already; True when written."""
    path = Path(path)
    try:
        if path.read_bytes() == content:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(content)
    temporary.chmod(mode)
    os.replace(temporary, path)
    return True


@dataclass(frozen=True)
class Generated:
    env_file: Path
    post_deploy: Path
    pins: tuple[Path, ...]
    wheels: tuple[Path, ...]


def write_env(
    directory: Path,
    name: str,
    base_text: str,
    base_path: str,
    packages: Sequence[Package],
    pins: Mapping[str, bytes] = {},
) -> Generated:
    """Write (when changed) a generated env, its post-deploy script, pin-file copies (platform -> content)
    and wheels into ``directory``; the returned paths are absolute."""
    directory = Path(directory).resolve()
    wheels = []
    for package in packages:
        wheel = wheel_path(directory, package)
        if not wheel.is_file():  # named by its content's digest: an existing one is this one
            write_if_changed(wheel, build_wheel(package))
        wheels.append(wheel)
    env_file, post_deploy = directory / f"{name}.yaml", directory / f"{name}.post-deploy.sh"
    requirements = pip_section(yaml.safe_load(base_text) or {})
    write_if_changed(post_deploy, post_deploy_text(name, list(zip(packages, wheels)), requirements).encode(), 0o755)
    pin_paths = []
    for platform, content in sorted(pins.items()):
        pin_paths.append(directory / f"{name}.{platform}.pin.txt")
        write_if_changed(pin_paths[-1], content)
    for stale in directory.glob(f"{name}.*.pin.txt"):
        if stale not in pin_paths:  # the base env's pin file went away: so does its copy
            stale.unlink(missing_ok=True)
    write_if_changed(env_file, env_file_text(base_text, base_path, packages, post_deploy.name).encode())
    return Generated(env_file, post_deploy, tuple(pin_paths), tuple(wheels))


# ---------------------------------------------------------------- the env of each rule (workflow/rules/common.smk)
# common.smk's thin adapter gives these what they need from Snakemake: the workflow folder (a Tree, through its
# source cache), whether a file of the workflow exists, where a shipped env file is, and whether --sdm conda is on.
LITERAL_ENV = re.compile(r"\.\./\.\./envs/([a-z][a-z0-9_-]*)\.yaml")  # a rule's `conda:` naming envs/<family>.yaml


def set_job_variables(version: str, sdm_conda: bool, environ: dict[str, str] | None = None) -> None:
    """Set what every job checks (``job_environment_problem``): the workflow's ``version`` and whether jobs run under
    --sdm conda. Jobs inherit the variables; cluster jobs parse the workflow again and set them again."""
    environ = os.environ if environ is None else environ
    environ[VERSION_VARIABLE] = version
    if sdm_conda:
        environ[SDM_CONDA_VARIABLE] = "1"
    else:
        environ.pop(SDM_CONDA_VARIABLE, None)


def git_source_tree(repository: str | Path, ref: str, prefix: str, where: str) -> Tree:
    """The workflow folder ``prefix`` of a git repository (a gitfile(...) repository, Snakemake's bare clone of a
    github(...) source) at the commit ``ref`` names; ``where``: the repository in words (its path, its URL)."""
    commit = git_commit(repository, ref)
    return git_tree(repository, commit, prefix, f"git repository {where} commit {commit}")


def url_tree(read: Callable[[str], bytes], package_folder: str | Path, url: str) -> Tree:
    """A workflow folder at a URL, read file by file with ``read``: what src/celldag holds there cannot be listed,
    so the files of the installed celldag (``package_folder``: its version is the workflow's, checked at every
    parse), each read from the URL."""
    return reader_tree(read, directory_files(Path(package_folder)), f"URL {url}")


def family_pins(tree: Tree, family: str, exists: Callable[[str], bool]) -> dict[str, bytes]:
    """Pin files of envs/<family>.yaml by platform (snakedeploy pin-conda-envs writes them beside it). A tree that
    lists no envs/ (a URL) is asked, with ``exists(path)``, for the file of each platform conda knows."""
    names = [n for n in tree.listing("envs") if n.startswith(f"{family}.") and n.endswith(".pin.txt")]
    if not tree.listing("envs"):
        names = [f"{family}.{p}.pin.txt" for p in PLATFORMS if exists(f"envs/{family}.{p}.pin.txt")]
    return {name[len(family) + 1 : -len(".pin.txt")]: tree.read(f"envs/{name}") for name in names}


def file_pins(env_file: Path) -> dict[str, bytes]:
    """Pin files of a lab's env file by platform: ``<stem>.<platform>.pin.txt`` beside it."""
    stem = env_file.stem
    return {p.name[len(stem) + 1 : -len(".pin.txt")]: p.read_bytes() for p in env_file.parent.glob(f"{stem}.*.pin.txt")}


def literal_family(conda_env: object) -> str | None:
    """The family a rule's ``conda:`` names literally (``../../envs/<family>.yaml``), else None (a function of the
    rules, a lab's path)."""
    found = LITERAL_ENV.fullmatch(conda_env) if isinstance(conda_env, str) else None
    return found[1] if found else None


def entry_env_problem(registries, exists: Callable[[str], bool]) -> str | None:
    """The first registry entry (datasets, then methods) whose env family is no file envs/<family>.yaml of the
    workflow (``exists(path)``), in one line; None when every family is there. ``registries``: a
    celldag.registry.Registries (a lab's env files and packages folders: ``registry.check_env_paths``)."""
    families: dict[str, bool] = {}
    for kind in ("datasets", "methods"):
        for entry_id, entry in getattr(registries, kind).items():
            env = entry.get("env")
            if env and FAMILY.match(env):
                if env not in families:
                    families[env] = exists(f"envs/{env}.yaml")
                if not families[env]:
                    return (
                        f"{registries.origin(kind, entry_id)}: {entry_id}.env: no env family {env!r} "
                        f"(envs/{env}.yaml of the celldag workflow)"
                    )
    return None


class RuleEnvs:
    """The conda env file of a family (``lineage``) or a lab's env file (a path) with a lab's ``packages``: under
    --sdm conda (``sdm_conda``) the generated one, written when first asked for, else the file itself
    (``shipped(family)``: the workflow's envs/<family>.yaml as Snakemake reads it).

    ``tree()`` reads the workflow folder, once, when a generated env is first asked for; ``exists(path)``: whether
    the workflow holds a file (pin files at a URL); ``directory``: where generated envs go, relative to the
    working directory.
    """

    def __init__(
        self,
        sdm_conda: bool,
        tree: Callable[[], Tree],
        shipped: Callable[[str], str],
        exists: Callable[[str], bool],
        directory: str | Path = GENERATED_DIR,
    ) -> None:
        self.sdm_conda = sdm_conda
        self.read_tree = tree
        self.shipped = shipped
        self.exists = exists
        self.directory = Path(directory)
        self._source: tuple[Tree, Package] | None = None
        self._generated: dict[tuple[str, tuple[str, ...]], str] = {}

    def env_file(self, env: str, packages: Sequence[str] = ()) -> str:
        if self.sdm_conda:
            return self.generated(env, tuple(packages))
        return self.shipped(env) if FAMILY.match(env) else os.path.abspath(env)

    def source(self) -> tuple[Tree, Package]:
        """(workflow folder, celldag package of its source): read once."""
        if self._source is None:
            tree = self.read_tree()
            self._source = tree, celldag_package(tree)
        return self._source

    def generated(self, env: str, packages: tuple[str, ...] = ()) -> str:
        """Write (when changed) the generated env of a family or a lab's env file with celldag and ``packages``
        (once per parse); its absolute path. EnvError names the env."""
        if (env, packages) not in self._generated:
            try:
                tree, package = self.source()
                if FAMILY.match(env):
                    base_text, base_path = tree.read(f"envs/{env}.yaml").decode(), f"envs/{env}.yaml of {tree.origin}"
                    pins = family_pins(tree, env, self.exists)
                else:
                    base = Path(env).resolve()
                    base_text, base_path, pins = base.read_text(), str(base), file_pins(base)
                lab_packages = [path_package(path) for path in packages]
                name = env_name(env, packages)
                written = write_env(self.directory, name, base_text, base_path, [package, *lab_packages], pins)
            except EnvError as err:
                raise EnvError(f"conda env {env}: {err}") from None
            self._generated[(env, packages)] = str(written.env_file)
        return self._generated[(env, packages)]


def put_on_pythonpath(folders: Sequence[str], environ: dict[str, str] | None = None) -> None:
    """Put ``folders`` first on ``PYTHONPATH`` (where absent): without --sdm conda, the jobs that inherit it
    import a lab's ``packages:`` from them (under --sdm conda Snakemake drops PYTHONPATH: the env has them)."""
    environ = os.environ if environ is None else environ
    present = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    added = [folder for folder in folders if folder not in present]
    if added:
        environ["PYTHONPATH"] = os.pathsep.join(added + present)


# ---------------------------------------------------------------- a job checks where it runs
def job_environment_problem(
    version: str, module_file: str, environ: Mapping[str, str] | None = None, prefix: str | None = None
) -> str | None:
    """Why this job must not run (one line), or None: the imported celldag (``version``, ``module_file``)
    is not the workflow's version (``$CELLDAG_WORKFLOW_VERSION``, set by the Snakefile), or, under
    ``--sdm conda`` (``$CELLDAG_SDM_CONDA``), it or the job's Python (``prefix``: sys.prefix) is outside
    the job's env (``$CONDA_PREFIX``). Outside a celldag workflow (the variables unset): None."""
    environ = os.environ if environ is None else environ
    prefix = sys.prefix if prefix is None else prefix
    expected = environ.get(VERSION_VARIABLE)
    if expected and expected != version:
        return (
            f"this job imported celldag {version} ({Path(module_file).parent}), "
            f"but the workflow is celldag {expected}: "
            "the job's environment holds another celldag than the workflow's"
        )
    if environ.get(SDM_CONDA_VARIABLE) != "1":
        return None
    env = environ.get("CONDA_PREFIX")
    if not env:
        return "this job runs under --sdm conda, but no conda env is active (CONDA_PREFIX unset)"
    env_path = Path(env).resolve()
    if not Path(prefix).resolve().is_relative_to(env_path):
        return (
            f"this job runs under --sdm conda in {env}, but with the Python of {prefix}: "
            "the env has no Python of its own"
        )
    if not Path(module_file).resolve().is_relative_to(env_path):
        return (
            f"this job runs under --sdm conda in {env}, but imported celldag from {Path(module_file).parent}, outside "
            "that env: the env lacks celldag (its post-deploy script did not install it); remove the env and rerun"
        )
    return None
