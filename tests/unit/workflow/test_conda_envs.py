"""celldag.jobs.envs: the generated conda envs that carry celldag (deterministic files, digests that follow the
source, headers and post-deploy scripts for a checkout and a git commit, wheels pip installs) and the jobs'
check of where they run. End to end through Snakemake: tests/e2e/test_e2e_conda.py."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from celldag import __version__ as VERSION
from celldag.jobs import envs

LINEAGE = (REPO / "envs/lineage.yaml").read_text()


def workflow_folder(root: Path) -> Path:
    """What celldag.jobs.envs reads of a workflow folder: pyproject.toml, src/celldag, envs/."""
    (root / "src").mkdir(parents=True)
    (root / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    subprocess.run(["cp", "-r", str(REPO / "src/celldag"), str(root / "src/celldag")], check=True)
    subprocess.run(["cp", "-r", str(REPO / "envs"), str(root / "envs")], check=True)
    (root / "src/celldag/__pycache__").mkdir(exist_ok=True)
    (root / "src/celldag/__pycache__/junk.cpython-311.pyc").write_bytes(b"compiled")  # never part of the source
    return root


def git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=celldag", "-c", "user.email=celldag@localhost", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    return workflow_folder(tmp_path / "celldag")


def test_the_celldag_package_of_a_checkout_is_its_source_and_its_digest_follows_every_file(checkout):
    package = envs.celldag_package(envs.directory_tree(checkout))
    assert (package.name, package.version, package.scripts) == ("celldag", VERSION, {"celldag": "celldag.cli:main"})
    assert package.origin == f"checkout {checkout.resolve()}"
    assert package.files["celldag/__init__.py"] == (REPO / "src/celldag/__init__.py").read_bytes()
    assert "celldag/schemas/methods.schema.yaml" in package.files  # package data travels with it
    assert not [name for name in package.files if "__pycache__" in name or name.endswith(".pyc")]
    assert (
        envs.celldag_package(envs.directory_tree(checkout)).digest == package.digest
    )  # the same source, the same digest
    plan = checkout / "src/celldag/plan.py"
    plan.write_text(plan.read_text() + "# a comment is a change\n")
    assert envs.celldag_package(envs.directory_tree(checkout)).digest != package.digest
    (checkout / "src/celldag/new_module.py").write_text("")
    assert "celldag/new_module.py" in envs.celldag_package(envs.directory_tree(checkout)).files


def test_a_git_source_is_read_at_its_commit_and_gives_the_checkouts_digest(checkout):
    git("init", "-q", cwd=checkout)
    git("add", "-A", cwd=checkout)
    git("commit", "-qm", "release", cwd=checkout)
    git("tag", "v0.1.0", cwd=checkout)
    commit = git("rev-parse", "HEAD", cwd=checkout)
    assert envs.git_commit(checkout, "v0.1.0") == envs.git_commit(checkout, "HEAD") == commit
    bare = checkout.parent / "bare.git"  # Snakemake's clone of a github(...) source is a bare one
    git("clone", "-q", "--bare", str(checkout), str(bare), cwd=checkout.parent)
    assert envs.git_commit(bare, "v0.1.0") == commit
    package = envs.celldag_package(envs.git_tree(bare, commit, "."))
    assert package.origin == f"git repository {bare.resolve()} commit {commit}"
    assert package.digest == envs.celldag_package(envs.directory_tree(checkout)).digest
    (checkout / "src/celldag/plan.py").write_text("uncommitted")  # the working tree is not the commit
    assert envs.celldag_package(envs.git_tree(checkout, commit)).digest == package.digest
    with pytest.raises(envs.EnvError, match="rev-parse"):
        envs.git_commit(checkout, "v9.9.9")


def test_the_wheel_is_byte_identical_and_installable_metadata(checkout):
    package = envs.celldag_package(envs.directory_tree(checkout))
    wheel = envs.build_wheel(package)
    assert wheel == envs.build_wheel(envs.celldag_package(envs.directory_tree(checkout)))
    assert package.wheel_name == f"celldag-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(io.BytesIO(wheel)) as archive:
        names = archive.namelist()
        assert names[-4:] == [
            f"celldag-{VERSION}.dist-info/{n}" for n in ("METADATA", "WHEEL", "entry_points.txt", "RECORD")
        ]
        assert f"Name: celldag\nVersion: {VERSION}\n" in archive.read(f"celldag-{VERSION}.dist-info/METADATA").decode()
        assert (
            archive.read(f"celldag-{VERSION}.dist-info/entry_points.txt")
            == b"[console_scripts]\ncelldag = celldag.cli:main\n"
        )
        record = archive.read(f"celldag-{VERSION}.dist-info/RECORD").decode().splitlines()
        assert len(record) == len(names) and record[-1] == f"celldag-{VERSION}.dist-info/RECORD,,"
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_a_labs_package_folder_becomes_a_distribution_of_its_top_level_packages(tmp_path):
    root = tmp_path / "labpkg_root"
    (root / "labpkg").mkdir(parents=True)
    (root / "labpkg/__init__.py").write_text("")
    (root / "labpkg/trees.py").write_text("def run(inputs, params, seed): ...\n")
    (root / "labpkg/table.csv").write_text("a,b\n")  # data inside a package travels with it
    (root / "notes").mkdir()
    (root / "notes/readme.txt").write_text("not Python: left out")
    (root / "pyproject.toml").write_text("")
    package = envs.path_package(root)
    assert package.name == "celldag-path-labpkg" and package.version == f"0+{package.digest[:12]}"
    assert set(package.files) == {"labpkg/__init__.py", "labpkg/trees.py", "labpkg/table.csv"}
    (root / "labpkg/trees.py").write_text("def run(inputs, params, seed): return None\n")
    assert envs.path_package(root).version != package.version
    with pytest.raises(envs.EnvError, match="holds no Python package or module"):
        envs.path_package(root / "notes")
    with pytest.raises(envs.EnvError, match="not a folder"):
        envs.path_package(tmp_path / "missing")


def test_generated_env_header_and_post_deploy_name_the_exact_source(checkout, tmp_path):
    package = envs.celldag_package(envs.directory_tree(checkout))
    out = tmp_path / "work/.snakemake/celldag-envs"
    pins = {"linux-64": b"@EXPLICIT\nhttps://conda.anaconda.org/conda-forge/linux-64/numpy-2.4.6-py311_0.conda\n"}
    made = envs.write_env(out, "lineage", LINEAGE, "envs/lineage.yaml of checkout X", [package], pins)
    text = made.env_file.read_text()
    assert (
        text.splitlines()[2] == f"#   celldag {VERSION}: checkout {checkout.resolve()}, content sha256 {package.digest}"
    )
    assert text.endswith(LINEAGE)  # the shipped file as it is, comments and all
    assert yaml.safe_load(text) == yaml.safe_load(LINEAGE)
    wheel = out.resolve() / "wheels" / package.digest[:16] / f"celldag-{VERSION}-py3-none-any.whl"
    assert made.wheels == (wheel,) and wheel.read_bytes() == envs.build_wheel(package)
    script = made.post_deploy.read_text()
    pip = '"$CONDA_PREFIX/bin/python" -m pip install --no-input --disable-pip-version-check'
    assert f"{pip} --no-deps --no-index --force-reinstall {wheel}\n" in script
    for requirement in envs.pip_section(yaml.safe_load(LINEAGE)):  # pin files list conda packages only
        assert requirement in script.splitlines()[4]
    assert made.pins == (out.resolve() / "lineage.linux-64.pin.txt",) and made.pins[0].read_bytes() == pins["linux-64"]
    assert made.env_file.parent == made.post_deploy.parent == out.resolve()  # Snakemake finds both beside each other


def test_generated_files_are_written_only_when_they_change(checkout, tmp_path):
    package = envs.celldag_package(envs.directory_tree(checkout))
    out = tmp_path / "celldag-envs"
    made = envs.write_env(out, "report", LINEAGE, "base", [package])
    stamps = {path: path.stat().st_mtime_ns for path in (made.env_file, made.post_deploy, *made.wheels)}
    digests = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in stamps}
    again = envs.write_env(out, "report", LINEAGE, "base", [package])  # a cluster job parsing the workflow again
    assert again == made
    assert {path: path.stat().st_mtime_ns for path in stamps} == stamps
    assert {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in stamps} == digests
    assert envs.write_if_changed(made.env_file, b"other") and made.env_file.read_bytes() == b"other"
    assert not list(out.glob(".*.tmp"))


def test_pip_is_added_to_an_env_file_without_it(checkout):
    package = envs.celldag_package(envs.directory_tree(checkout))
    lab = "channels: [conda-forge]\ndependencies:\n  - python=3.11\n  - pandas=2.3.3\n"
    text = envs.env_file_text(lab, "lab.yaml", [package], "lab.post-deploy.sh")
    assert yaml.safe_load(text)["dependencies"] == ["python=3.11", "pandas=2.3.3", "pip"]
    assert "# pip added to the dependencies" in text
    assert envs.env_file_text(LINEAGE, "lineage.yaml", [package], "x").endswith(LINEAGE)  # has pip: as it is
    with pytest.raises(envs.EnvError, match="not a conda env file"):
        envs.env_file_text("name: x\n", "x.yaml", [package], "x")


def test_env_names_of_families_lab_files_and_packages():
    assert envs.env_name("lineage") == "lineage"
    assert envs.env_name("lineage", ["labpkg_root"]).startswith("lineage-")
    assert envs.env_name("envs/lab method.yaml").startswith("lab-method-")
    assert envs.env_name("envs/a.yaml") != envs.env_name("other/a.yaml")


def test_package_folders_go_first_on_pythonpath_once():
    environ = {"PYTHONPATH": "/b"}
    envs.put_on_pythonpath(["/a", "/b"], environ)
    assert environ == {"PYTHONPATH": "/a:/b"}
    empty: dict[str, str] = {}
    envs.put_on_pythonpath([], empty)
    assert empty == {}  # no empty PYTHONPATH where there was none


# ---------------------------------------------------------------- the jobs' check
SITE = "/work/.snakemake/conda/abc_/lib/python3.11/site-packages/celldag/__init__.py"


def test_a_job_outside_a_celldag_workflow_or_plain_run_passes():
    assert envs.job_environment_problem("0.1.0", "/anywhere/celldag/__init__.py", {}) is None
    plain = {envs.VERSION_VARIABLE: "0.1.0", "CONDA_PREFIX": "/opt/conda"}  # conda's base active, no --sdm conda
    assert (
        envs.job_environment_problem("0.1.0", "/work/main/src/celldag/__init__.py", plain, prefix="/work/.venv") is None
    )


def test_a_job_with_another_celldag_version_stops_with_one_line():
    problem = envs.job_environment_problem("0.1.0", "/x/celldag/__init__.py", {envs.VERSION_VARIABLE: "0.2.0"})
    assert problem == (
        "this job imported celldag 0.1.0 (/x/celldag), but the workflow is celldag 0.2.0: "
        "the job's environment holds another celldag than the workflow's"
    )
    assert "\n" not in problem


def test_under_sdm_conda_celldag_and_python_must_be_the_envs():
    environ = {
        envs.VERSION_VARIABLE: "0.1.0",
        envs.SDM_CONDA_VARIABLE: "1",
        "CONDA_PREFIX": "/work/.snakemake/conda/abc_",
    }
    env = environ["CONDA_PREFIX"]
    assert envs.job_environment_problem("0.1.0", SITE, environ, prefix=env) is None
    outside = envs.job_environment_problem("0.1.0", "/work/main/src/celldag/__init__.py", environ, prefix=env)
    assert outside == (
        f"this job runs under --sdm conda in {env}, but imported celldag from /work/main/src/celldag, "
        "outside that env: the env lacks celldag (its post-deploy script did not install it); "
        "remove the env and rerun"
    )
    python = envs.job_environment_problem("0.1.0", SITE, environ, prefix="/work/main/.venv")
    assert (
        python == f"this job runs under --sdm conda in {env}, but with the Python of /work/main/.venv: "
        "the env has no Python of its own"
    )
    unset = {k: v for k, v in environ.items() if k != "CONDA_PREFIX"}
    assert "CONDA_PREFIX unset" in envs.job_environment_problem("0.1.0", SITE, unset, prefix=env)


def test_joblog_stops_a_job_in_the_wrong_env_with_one_line_on_console_and_in_its_log(tmp_path):
    log = tmp_path / "logs/job.log"
    script = f"from celldag.jobs import joblog\njoblog.start({str(log)!r})\nprint('ran', flush=True)\n"
    environ = {
        "PATH": "/usr/bin:/bin",
        envs.VERSION_VARIABLE: VERSION,
        envs.SDM_CONDA_VARIABLE: "1",
        "CONDA_PREFIX": str(tmp_path / "env"),
    }
    result = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: this job runs under --sdm conda in {tmp_path / 'env'}, but with the Python of ")
    assert log.read_text() == line + "\n"
    environ[envs.SDM_CONDA_VARIABLE] = "0"  # a plain run: the same job runs
    result = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "ran\n", result.stderr
