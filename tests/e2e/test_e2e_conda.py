"""`snakemake --sdm conda` end to end through Snakemake's own conda code, offline, with a stand-in `conda`.

No conda channel is reachable where celldag is tested. tests/support/conda_standin.py answers the calls Snakemake 9
makes (``info --json``, ``--version``, ``config --get channel_priority``, ``env create --file --prefix``,
``create --file <pin>``) and builds each env as a venv that links, from the venv running the tests, exactly
the distributions the env file pins (and what they require), never celldag; ``activate`` sets
CONDA_PREFIX and PATH. So these tests prove Snakemake's env handling and celldag's files — the generated
env files and their hashes, the post-deploy scripts that install celldag and a lab's packages, the jobs'
check that they import celldag from their own env — not conda's solver (docs/running.md: the manual check
on a machine with conda).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conda_standin import install
from conftest import REPO, copy_workflow
from lab_workflow import write_lab_workflow

from celldag import __version__ as VERSION
from celldag.jobs.envs import celldag_package, directory_tree

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    """The stand-in conda's base folder (bin/conda, bin/activate, calls.log)."""
    base = tmp_path_factory.mktemp("conda-standin")
    install(base, sys.executable)
    return base


def conda_environ(standin: Path) -> dict[str, str]:
    """The tests' environment with the stand-in first on PATH: no PYTHONPATH, no conda env active, pip offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDA") and k != "PYTHONPATH"}
    env["PATH"] = f"{standin / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_NO_INDEX"] = "1"  # nothing is downloaded: every package is linked from this venv or a local wheel
    return env


def snakemake(folder: Path, standin: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--sdm", "conda", "--cores", "2", *args]
    result = subprocess.run(
        command, cwd=folder, env=conda_environ(standin), capture_output=True, text=True, timeout=600
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-4000:]}")
    return result


def envs_of(folder: Path) -> dict[str, Path]:
    """The envs Snakemake created: hash → prefix (.snakemake/conda/<hash>)."""
    conda = folder / ".snakemake/conda"
    return {p.name: p for p in conda.iterdir() if p.is_dir()} if conda.is_dir() else {}


def env_made_from(folder: Path, generated: Path) -> Path:
    """The env Snakemake created from a generated env file (it copies the file to <prefix>.yaml)."""
    (env,) = [env for env in envs_of(folder).values() if Path(f"{env}.yaml").read_text() == generated.read_text()]
    return env


def site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def header_digest(env_yaml: Path, package: str = "celldag") -> str:
    return re.search(rf"^#   {package} \S+: .*content sha256 ([0-9a-f]{{64}})$", env_yaml.read_text(), re.M)[1]


def installed_from(env: Path, dist_info_glob: str) -> str:
    """The URL pip recorded for a distribution installed into an env (PEP 610 direct_url.json)."""
    (dist_info,) = site_packages(env).glob(dist_info_glob)
    assert not dist_info.is_symlink(), f"{dist_info} is linked, not installed"
    return json.loads((dist_info / "direct_url.json").read_text())["url"]


def clone(folder: Path) -> Path:
    """What a clone holds of celldag: the workflow files and the package source (src/celldag: copy_workflow's)."""
    copy_workflow(folder)
    (folder / "config/config.yaml").write_text("datasets: [bm_default]\nmethods: [nj_raw]\nseeds: [0]\n")
    return folder


def test_a_clone_runs_its_jobs_in_envs_that_carry_its_own_celldag(tmp_path, standin):
    folder = clone(tmp_path / "celldag")
    snakemake(folder, standin, "--until", "run_method")
    calls = [json.loads(line) for line in (standin / "calls.log").read_text().splitlines()]
    assert ["info", "--json"] in calls and ["--version"] in calls
    assert any(call[:2] == ["env", "create"] for call in calls)  # Snakemake's own env creation, through the stand-in

    generated = folder / ".snakemake/celldag-envs/lineage.yaml"
    assert (
        len(envs_of(folder)) == 2
    )  # of the DAG's families, lineage (its jobs ran) and report (aggregate, report_html)
    env = env_made_from(folder, generated)  # prepare_dataset and run_method of a lineage method
    assert Path(f"{env}.post-deploy.sh").read_text() == generated.with_suffix(".post-deploy.sh").read_text()
    digest = header_digest(generated)
    assert f"celldag {VERSION}: checkout {folder.resolve()}" in generated.read_text()
    assert installed_from(env, f"celldag-{VERSION}.dist-info").endswith(
        f"/wheels/{digest[:16]}/celldag-{VERSION}-py3-none-any.whl"
    )
    for log in [
        *folder.glob("results/logs/prepare_dataset/bm_default/*/seed0.log"),
        *folder.glob("results/logs/run_method/bm_default/nj_raw/default/*/seed0.log"),
    ]:
        assert (
            f"celldag {VERSION} from {site_packages(env).resolve()}/celldag, env {env.resolve()}" in log.read_text()
        ), log
    (record,) = folder.glob("results/runs/bm_default/nj_raw/default/*/seed0/run.json")
    assert json.loads(record.read_text())["status"] == "ok"

    # a change of what celldag's wheel is built from is a new env: Snakemake builds it (on a login node:
    # --conda-create-envs-only). Its pyproject.toml here: a change of src/celldag is one too, but the workflow's guard
    # refuses a source other than the installed celldag's (test_e2e_module.py), and this test's is this checkout's
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('description = "', 'description = "(changed) ', 1))
    snakemake(folder, standin, "--conda-create-envs-only")
    assert header_digest(generated) != digest
    new_env = env_made_from(folder, generated)
    assert new_env != env and env.is_dir()
    assert installed_from(new_env, f"celldag-{VERSION}.dist-info").endswith(
        f"/wheels/{header_digest(generated)[:16]}/celldag-{VERSION}-py3-none-any.whl"
    )

    # an env without celldag: the job would import the celldag of Snakemake's own environment (its sys.path is
    # appended to every script, snakemake#840); it stops with one line instead
    subprocess.run(
        [new_env / "bin/python", "-m", "pip", "uninstall", "-qy", "celldag"], check=True, capture_output=True
    )
    result = snakemake(folder, standin, "--until", "prepare_dataset", check=False)
    assert result.returncode != 0
    errors = {
        line for line in result.stderr.splitlines() if line.startswith("error: ")
    }  # the profile's retry says it again
    assert errors == {
        f"error: this job runs under --sdm conda in {new_env.resolve()}, but imported celldag from "
        f"{REPO / 'src/celldag'}, outside that env: the env lacks celldag (its post-deploy script did not "
        "install it); remove the env and rerun"
    }, result.stderr[-3000:]


def test_a_pin_file_beside_a_family_is_used_and_celldag_still_comes_by_post_deploy(tmp_path, standin):
    """snakedeploy pin-conda-envs writes envs/<family>.<platform>.pin.txt: conda packages only. Snakemake creates
    the env from its copy beside the generated env file; the post-deploy script still installs celldag."""
    folder = clone(tmp_path / "celldag")
    report = yaml.safe_load((folder / "envs/report.yaml").read_text())
    urls = [
        f"https://conda.anaconda.org/conda-forge/linux-64/{name}-{version}-0.conda"
        for name, _, version in (
            d.split("#")[0].strip().partition("=") for d in report["dependencies"] if isinstance(d, str)
        )
    ]
    (folder / "envs/report.linux-64.pin.txt").write_text("# platform: linux-64\n@EXPLICIT\n" + "\n".join(urls) + "\n")
    result = snakemake(folder, standin, "--conda-create-envs-only")
    copy = folder / ".snakemake/celldag-envs/report.linux-64.pin.txt"
    assert copy.read_text() == (folder / "envs/report.linux-64.pin.txt").read_text()
    assert f"Using pinnings from {copy}" in result.stderr
    (env,) = [
        env for env in envs_of(folder).values() if Path(f"{env}.pin.txt").is_file()
    ]  # Snakemake's copy of the pins
    assert Path(f"{env}.pin.txt").read_text() == copy.read_text()
    assert (
        Path(f"{env}.post-deploy.sh").read_text()
        == (folder / ".snakemake/celldag-envs/report.post-deploy.sh").read_text()
    )
    assert json.loads((env / "conda-meta/standin.json").read_text())["file"].endswith(".pin.txt")  # made from the pins
    assert installed_from(env, f"celldag-{VERSION}.dist-info").endswith(f"/celldag-{VERSION}-py3-none-any.whl")


def lab_with_packages(folder: Path) -> Path:
    """tests/support/lab_workflow.py's folder (celldag as a local module, by a path to this checkout), its method
    naming its own env file and its package folder: nothing on PYTHONPATH."""
    write_lab_workflow(folder)
    config = yaml.safe_load((folder / "config/config.yaml").read_text())
    config["celldag"] |= {"datasets": ["lab_lineage"], "methods": ["lab_corr_nj"]}
    (folder / "config/config.yaml").write_text(yaml.safe_dump(config))
    methods = yaml.safe_load((folder / "lab/methods.yaml").read_text())
    methods["lab_corr_nj"] |= {"env": "envs/lab_method.yaml", "packages": ["labpkg_root"]}
    (folder / "lab/methods.yaml").write_text(yaml.safe_dump(methods, sort_keys=False))
    lineage = yaml.safe_load((REPO / "envs/lineage.yaml").read_text())
    lab_env = {
        "channels": lineage["channels"],
        "dependencies": [d for d in lineage["dependencies"] if isinstance(d, str)],
    }
    (folder / "envs/lab_method.yaml").write_text(yaml.safe_dump(lab_env))  # the lab's own: lineage's, no pip section
    return folder


def test_a_labs_workflow_runs_its_method_from_its_own_env_file_with_its_package_installed(tmp_path, standin):
    folder = lab_with_packages(tmp_path / "pipeline")
    snakemake(folder, standin, "--until", "celldag_run_method")
    (record,) = folder.glob("results/runs/lab_lineage/lab_corr_nj/default/*/seed0/run.json")
    assert json.loads(record.read_text())["status"] == "ok"
    generated = list((folder / ".snakemake/celldag-envs").glob("lab_method-*.yaml"))
    assert len(generated) == 1 and f"Made from {folder.resolve()}/envs/lab_method.yaml" in generated[0].read_text()
    env = env_made_from(folder, generated[0])
    assert installed_from(env, f"celldag-{VERSION}.dist-info").startswith("file://")
    assert "/wheels/" in installed_from(env, "celldag_path_labpkg-0+*.dist-info")
    assert (site_packages(env) / "labpkg/trees.py").read_text() == (folder / "labpkg_root/labpkg/trees.py").read_text()
    (log,) = folder.glob("results/logs/run_method/lab_lineage/lab_corr_nj/default/*/seed0.log")
    assert f"env {env.resolve()}" in log.read_text()
    # besides: the lab's own rule's env (its plain env file), the lineage family's (validation, preparation)
    # and report's
    assert len(envs_of(folder)) == 4


def test_the_same_lab_entry_runs_without_sdm_conda_its_package_folder_on_the_jobs_pythonpath(tmp_path):
    folder = lab_with_packages(tmp_path / "pipeline")
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--until", "celldag_run_method"]
    result = subprocess.run(command, cwd=folder, env=environ, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = folder.glob("results/runs/lab_lineage/lab_corr_nj/default/*/seed0/run.json")
    assert json.loads(record.read_text())["status"] == "ok"
    assert not (folder / ".snakemake/celldag-envs").exists()  # nothing generated without --sdm conda


def test_a_lab_entry_naming_a_missing_env_file_or_package_folder_stops_the_parse_with_one_line(tmp_path):
    folder = lab_with_packages(tmp_path / "pipeline")
    (folder / "envs/lab_method.yaml").unlink()
    command = [sys.executable, "-m", "snakemake", "-n"]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert (
        "invalid configuration: lab/methods.yaml: lab_corr_nj.env: envs/lab_method.yaml: file not found "
        "(paths are relative to the working directory)"
    ) in result.stdout + result.stderr, result.stdout[-2000:]
    shutil.rmtree(folder / "labpkg_root")
    (folder / "envs/lab_method.yaml").write_text("dependencies: [python=3.11]\n")
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert (
        "invalid configuration: lab/methods.yaml: lab_corr_nj.packages[0]: labpkg_root: no such folder "
        "(paths are relative to the working directory)"
    ) in result.stdout + result.stderr, result.stdout[-2000:]
    folder = lab_with_packages(tmp_path / "other")
    methods = yaml.safe_load((folder / "lab/methods.yaml").read_text())
    methods["lab_corr_nj"]["env"] = "lineag"
    (folder / "lab/methods.yaml").write_text(yaml.safe_dump(methods, sort_keys=False))
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert (
        "invalid configuration: lab/methods.yaml: lab_corr_nj.env: no env family 'lineag' (envs/lineag.yaml of "
        "the celldag workflow)"
    ) in result.stdout + result.stderr, result.stdout[-2000:]


def git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=celldag", "-c", "user.email=celldag@localhost", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def outer_workflow(folder: Path, snakefile: str) -> Path:
    """A lab's folder whose Snakefile uses celldag as a module from ``snakefile`` (Python source of the marker)."""
    (folder / "config").mkdir(parents=True)
    (folder / "Snakefile").write_text(
        f'configfile: "config/config.yaml"\n\n\nmodule celldag:\n    snakefile:\n        {snakefile}\n'
        "    config:\n        config\n\n\nuse rule * from celldag as celldag_*\n"
    )
    (folder / "config/config.yaml").write_text("datasets: [bm_default]\nmethods: [nj_raw]\nseeds: [0]\n")
    return folder


def test_a_module_from_github_installs_the_commit_its_tag_resolves_to(tmp_path, standin):
    """github(..., tag=...): Snakemake reads the module from its bare clone in the source cache (made here from a
    local repository, so nothing is fetched); the envs get celldag from that clone at the tag's commit."""
    repository = clone(tmp_path / "celldag")
    git("init", "-q", cwd=repository)
    git("add", "-A", cwd=repository)
    git("commit", "-qm", "release", cwd=repository)
    git("tag", f"v{VERSION}", cwd=repository)
    commit = git("rev-parse", "HEAD", cwd=repository)
    cache = tmp_path / "cache"  # XDG_CACHE_HOME: Snakemake's source cache, snakemake-git-cache/<host>/<repo>
    bare = cache / "snakemake/snakemake/source-cache/snakemake-git-cache/github.com/lab/celldag"
    git("clone", "-q", "--bare", str(repository), str(bare), cwd=tmp_path)
    folder = outer_workflow(
        tmp_path / "pipeline", f'github("lab/celldag", path="workflow/Snakefile", tag="v{VERSION}")'
    )
    environ = conda_environ(standin) | {"XDG_CACHE_HOME": str(cache)}
    command = [sys.executable, "-m", "snakemake", "--sdm", "conda", "--cores", "1", "--conda-create-envs-only"]
    result = subprocess.run(command, cwd=folder, env=environ, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    generated = folder / ".snakemake/celldag-envs/lineage.yaml"
    assert (
        f"#   celldag {VERSION}: git repository https://github.com/lab/celldag commit {commit}, content sha256 "
        in generated.read_text()
    )
    assert header_digest(generated) == celldag_package(directory_tree(repository)).digest  # the commit's content
    env = env_made_from(folder, generated)
    assert installed_from(env, f"celldag-{VERSION}.dist-info").endswith(
        f"/wheels/{header_digest(generated)[:16]}/celldag-{VERSION}-py3-none-any.whl"
    )
    assert (site_packages(env) / "celldag/plan.py").read_bytes() == (repository / "src/celldag/plan.py").read_bytes()


class CheckoutFiles(SimpleHTTPRequestHandler):
    """Serves this checkout on 127.0.0.1, as a web server would serve a release's files."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, directory=str(REPO), **kwargs)

    def log_message(self, *args) -> None:
        pass


def test_a_module_from_a_url_installs_the_celldag_files_served_there(tmp_path, standin):
    server = ThreadingHTTPServer(("127.0.0.1", 0), CheckoutFiles)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/workflow/Snakefile"
        folder = outer_workflow(tmp_path / "pipeline", repr(url))
        snakemake(folder, standin, "--conda-create-envs-only")
    finally:
        server.shutdown()
    generated = folder / ".snakemake/celldag-envs/lineage.yaml"
    assert (
        f"#   celldag {VERSION}: URL http://127.0.0.1:{server.server_address[1]}, content sha256 "
        in generated.read_text()
    )
    assert (
        header_digest(generated) == celldag_package(directory_tree(REPO)).digest
    )  # the checkout's files, read at the URL
    env = env_made_from(folder, generated)
    assert (site_packages(env) / "celldag/jobs/envs.py").read_bytes() == (
        REPO / "src/celldag/jobs/envs.py"
    ).read_bytes()
