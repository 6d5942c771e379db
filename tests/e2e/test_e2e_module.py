"""celldag as a module of a lab's own Snakemake workflow (tests/support/lab_workflow.py): the lab's datasets built
by its own rule from CSV tables, its registries merged over celldag's, its method from its own package;
results under the lab's folder; `celldag audit` clean there; a broken CSV stopped at validation."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, copy_workflow
from lab_workflow import LAB_METHOD, lab_env, snakemake_command, write_lab_workflow

from celldag import __version__ as VERSION
from celldag import release

pytestmark = pytest.mark.e2e


def run_lab(folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        snakemake_command("--cores", "2", *args),
        cwd=folder,
        env=lab_env(folder),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def job_counts(dry_run_output: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", dry_run_output, flags=re.M)}


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    folder = write_lab_workflow(tmp_path_factory.mktemp("lab") / "pipeline")
    planned = job_counts(run_lab(folder, "-n", "--quiet", "rules").stdout)
    built_before_run = (folder / "build").exists()
    result = run_lab(folder)
    return {"folder": folder, "planned": planned, "built_before_run": built_before_run, "console": result.stderr}


def test_the_dag_links_the_labs_rule_to_validation_and_preparation_without_opening_its_files(lab_run):
    planned = lab_run["planned"]
    assert planned["lab_h5ad"] == 1  # the lab's own rule writes the files its registry entries name
    assert planned["celldag_validate_dataset"] == 2 and planned["celldag_prepare_dataset"] == 2
    assert planned["celldag_run_method"] == 4 and planned["celldag_all"] == 1
    assert not lab_run["built_before_run"]  # planned while the files did not exist: nothing opened them


def test_results_land_in_the_labs_folder_with_its_method_ranked_beside_celldags(lab_run):
    folder = lab_run["folder"]
    for name in ("leaderboard.md", "index.html", "scores.parquet", "runs.parquet"):
        assert (folder / "results/lab" / name).is_file(), name
    assert not (REPO / "results/lab").exists()  # nothing written beside the module's files
    runs = pd.read_parquet(folder / "results/lab/runs.parquet")
    assert set(zip(runs["dataset"], runs["method"], runs["status"])) == {
        ("lab_lineage", "nj_raw", "ok"),
        ("lab_lineage", "upgma_raw", "ok"),
        ("lab_lineage", "lab_corr_nj", "ok"),
        ("lab_rna", "pca", "ok"),
    }
    leaderboard = (folder / "results/lab/leaderboard.md").read_text()
    lineage = leaderboard.split("## lab_lineage (lineage)")[1].split("##")[0]
    assert re.search(r"^\| [^|]+ \| lab_corr_nj \| default \| \d\.\d{3} \|", lineage, flags=re.M)  # after its rank
    assert re.search(r"^\| [^|]+ \| nj_raw \| default \| \d\.\d{3} \|", lineage, flags=re.M)
    scores = pd.read_parquet(folder / "results/lab/scores.parquet")
    rf = scores[(scores["dataset"] == "lab_lineage") & (scores["metric"] == "rf")].set_index("method")["value"]
    assert set(rf.index) == {"nj_raw", "upgma_raw", "lab_corr_nj"} and rf.between(0, 1).all()
    validation = next((folder / "results/data/lab_rna").glob("*/validation.txt")).read_text()
    assert "dataset lab_rna (representation track)" in validation and "no problems found" in validation


def test_audit_of_the_labs_folder_is_clean(lab_run):
    folder = lab_run["folder"]
    command = [
        sys.executable,
        "-m",
        "celldag.cli",
        "audit",
        "--workflow",
        str(REPO),
        "--config-key",
        "celldag",
        "--sample",
        "4",
    ]
    result = subprocess.run(command, cwd=folder, env=lab_env(folder), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reproduced: lab_lineage/lab_corr_nj/default/0" in result.stdout
    assert result.stdout.rstrip().endswith("— OK")


def test_lint_is_clean_for_the_labs_workflow(lab_run):
    result = run_lab(lab_run["folder"], "--lint")
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_a_broken_csv_stops_at_the_validate_rule_with_one_line(tmp_path):
    folder = write_lab_workflow(tmp_path / "pipeline")
    cells = pd.read_csv(folder / "data/rna_cells.csv")
    cells.loc[[3, 7], "cell_type"] = None  # two cells the lab forgot to annotate
    cells.to_csv(folder / "data/rna_cells.csv", index=False)
    result = run_lab(folder, check=False)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: build/rna.h5ad: obs['cell_type']: label missing for 2 of 240 rows (first: 'r003')"], (
        result.stderr[-3000:]
    )
    assert "rule celldag_validate_dataset" in result.stderr
    assert not list(folder.glob("results/data/lab_rna/*/seed*.h5ad"))  # nothing downstream ran on it


def test_an_installed_celldag_of_another_version_stops_the_parse_with_one_line(tmp_path):
    module = copy_workflow(tmp_path / "celldag")
    pyproject = module / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(f'version = "{VERSION}"', 'version = "99.0.0"', 1))
    folder = write_lab_workflow(tmp_path / "pipeline", snakefile=str(module / "workflow/Snakefile"))
    result = run_lab(folder, "-n", check=False)
    assert result.returncode != 0
    console = result.stdout + result.stderr
    assert re.search(
        rf"celldag {re.escape(VERSION)} is installed \(.+\), but this workflow \(.+/pyproject\.toml\) is "
        r"celldag 99\.0\.0: install that version",
        console,
    ), console[-2000:]
    shutil.rmtree(module)


def test_an_installed_celldag_of_the_same_version_from_another_commit_stops_the_parse_naming_both_digests(tmp_path):
    """The version agrees but the source does not: a checkout whose src/celldag differs from the installed one's, and
    a workflow without src/celldag (as github(...) or a URL reads it) whose recorded digest names another source."""
    installed = release.package_digest()
    module = copy_workflow(tmp_path / "celldag")
    (module / "src/celldag/plan.py").write_text((module / "src/celldag/plan.py").read_text() + "# another commit\n")
    folder = write_lab_workflow(tmp_path / "pipeline", snakefile=str(module / "workflow/Snakefile"))
    checkout = release.source_digest(module / "src/celldag")

    def refused(workflow_digest: str) -> None:
        result = run_lab(folder, "-n", check=False)
        console = result.stdout + result.stderr
        assert result.returncode != 0
        assert (
            f"celldag {VERSION} is installed ({release.PACKAGE_FOLDER}, source sha256 {installed[:16]}), but this "
            f"workflow's celldag" in console
        ), console[-2000:]
        assert f"has source sha256 {workflow_digest[:16]}: the same version from another commit" in console

    refused(checkout)
    shutil.rmtree(module / "src")  # now the workflow names its source in workflow/celldag-source.sha256
    (module / release.WORKFLOW_DIGEST_FILE).write_text("f" * 64 + "\n")
    refused("f" * 64)
    (module / release.WORKFLOW_DIGEST_FILE).write_text(installed + "\n")  # the installed one's: the parse goes on
    assert run_lab(folder, "-n", check=False).returncode == 0


def fenced_after(text: str, marker: str) -> str:
    """The first fenced block of ``text`` after ``marker``, without its fences."""
    return re.search(r"```\w*\n(.*?)```", text[text.index(marker) :], flags=re.S).group(1)


def test_the_module_guides_example_runs_the_labs_method_on_a_dataset_of_its_track(tmp_path):
    """docs/using-as-a-module.md's outer Snakefile, config and registry files as the page shows them, the module
    read from this checkout: the dry run plans the lab's lineage method on a lineage dataset, and warns of nothing
    idle."""
    guide = (REPO / "docs/using-as-a-module.md").read_text()
    folder = tmp_path / "pipeline"
    for sub in ("config", "lab", "labpkg_root/labpkg", "data", "envs", "scripts"):
        (folder / sub).mkdir(parents=True)
    snakefile = re.sub(r"github\(.*\)", repr(str(REPO / "workflow/Snakefile")), fenced_after(guide, "## 2. The outer"))
    (folder / "Snakefile").write_text(snakefile)
    (folder / "config/config.yaml").write_text(fenced_after(guide, "`config/config.yaml` of your pipeline"))
    (folder / "lab/datasets.yaml").write_text(fenced_after(guide, "`lab/datasets.yaml`:"))
    (folder / "lab/methods.yaml").write_text(fenced_after(guide, "`lab/methods.yaml`:"))
    (folder / "labpkg_root/labpkg/__init__.py").write_text("")
    (folder / "labpkg_root/labpkg/trees.py").write_text(LAB_METHOD)
    for name in ("data/counts.csv", "data/cells.csv", "envs/lab.yaml", "scripts/lab_h5ad.py"):  # only planned here
        (folder / name).touch()
    result = run_lab(folder, "-n")
    jobs = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    wildcards: (.*)$", result.stdout, flags=re.M)
    lab_jobs = [wildcards for rule, wildcards in jobs if rule == "celldag_run_method" and "lab_method" in wildcards]
    assert lab_jobs and all("bm_default" in wildcards for wildcards in lab_jobs), result.stdout[-3000:]
    assert "runs on no selected dataset" not in result.stdout + result.stderr


class WorkflowFiles(SimpleHTTPRequestHandler):
    """Serves the checkout on 127.0.0.1, as a git host serves a tag; records what was asked for."""

    requested: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, directory=str(REPO), **kwargs)

    def do_GET(self) -> None:
        self.requested.append(self.path)
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


def test_a_remote_module_reads_its_registries_envs_and_scripts_from_its_source(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), WorkflowFiles)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        folder = tmp_path / "pipeline"
        (folder / "config").mkdir(parents=True)
        url = f"http://127.0.0.1:{server.server_address[1]}/workflow/Snakefile"
        (folder / "Snakefile").write_text(
            f'configfile: "config/config.yaml"\n\n\nmodule celldag:\n    snakefile:\n'
            f'        "{url}"\n    config:\n        config\n\n\n'
            "use rule * from celldag as celldag_*\n"
        )
        (folder / "config/config.yaml").write_text("datasets: [bm_default]\nmethods: [nj_raw]\nseeds: [0]\n")
        run_lab(folder)
    finally:
        server.shutdown()
    assert (folder / "results/default/leaderboard.md").is_file()
    asked = set(WorkflowFiles.requested)
    assert {
        "/pyproject.toml",
        "/config/datasets.yaml",
        "/config/methods.yaml",
        "/envs/lineage.yaml",
        "/workflow/rules/common.smk",
        "/workflow/scripts/run_method.py",
    } <= asked


def git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "user.name=celldag", "-c", "user.email=celldag@localhost", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_snakedeploy_from_a_local_repository_and_tag_gives_a_working_folder(tmp_path):
    """docs/using-as-a-module.md's commands: a checkout of the tag, snakedeploy, then the module's path set to
    the checkout (snakedeploy writes "workflow/Snakefile" for a local source: the deployed folder's own)."""
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)
    repository = tmp_path / "celldag"  # the working tree as a repository tagged v<version>
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True)
    for name in listed.stdout.splitlines():
        if (REPO / name).is_file():
            (repository / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repository / name)
    git("init", "-q", cwd=repository)
    git("add", "-A", cwd=repository)
    git("commit", "-qm", "release", cwd=repository)
    git("tag", f"v{version}", cwd=repository)
    checkout = tmp_path / f"celldag-v{version}"
    git("clone", "-q", "--branch", f"v{version}", str(repository), str(checkout), cwd=tmp_path)
    deployed = tmp_path / "pipeline"
    snakedeploy = Path(sys.executable).parent / "snakedeploy"
    subprocess.run(
        [
            str(snakedeploy),
            "deploy-workflow",
            str(checkout),
            str(deployed),
            "--tag",
            f"v{version}",
            "--name",
            "celldag",
        ],
        check=True,
        capture_output=True,
    )
    snakefile = deployed / "workflow/Snakefile"
    assert '"workflow/Snakefile"' in snakefile.read_text()  # the mis-written module path the docs correct
    snakefile.write_text(snakefile.read_text().replace('"workflow/Snakefile"', f'"{checkout}/workflow/Snakefile"'))
    assert (deployed / "config/datasets.yaml").is_file() and (deployed / "profiles/slurm/profile.yaml").is_file()
    (deployed / "config/config.yaml").write_text("datasets: [bm_default]\nmethods: [nj_raw, upgma_raw]\nseeds: [0]\n")
    run_lab(deployed)
    assert (deployed / "results/default/index.html").is_file()
    audit = subprocess.run([sys.executable, "-m", "celldag.cli", "audit"], cwd=deployed, capture_output=True, text=True)
    assert audit.returncode == 0 and audit.stdout.rstrip().endswith("— OK"), audit.stdout + audit.stderr
