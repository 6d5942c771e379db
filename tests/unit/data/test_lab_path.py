"""The lab path: an unreadable file in `celldag validate`, no rerun of a job's input error, a tree in `uns`,
the `values: transformed` hint, and the matrices `validate` checks and sees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_workflow
from lab_data import NEWICK, cells_by_leaf, lab_dataset, leaves, lineage_entry

from celldag.cli import main
from celldag.data.h5ad import prepare_lineage_h5ad
from celldag.errors import InputError
from celldag.jobs.joblog import NOT_RETRIED
from celldag.lineage.tree import parse_newick

# ---------------------------------------------------------------- celldag validate


@pytest.fixture(scope="module")
def workflow(tmp_path_factory) -> Path:
    """Datasets `good`, `broken` (its h5ad cut in half) and `layered` (values in a layer; NaN in X and another)."""
    workdir = copy_workflow(tmp_path_factory.mktemp("lab"))
    lab_dataset(workdir, "good", leaves())
    lab_dataset(workdir, "broken", leaves())
    source = workdir / "broken/cells.h5ad"
    source.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    layered = leaves()
    layered.layers["profiles"], layered.layers["raw"] = layered.X.copy(), np.abs(layered.X)
    layered.X[0, 0] = np.nan
    layered.layers["raw"][1, :2] = np.inf
    lab_dataset(workdir, "layered", layered, layer="profiles")
    return workdir


def validate(workdir: Path, monkeypatch, capsys, *dataset_ids: str) -> tuple[int, str, str]:
    monkeypatch.chdir(workdir)
    status = main(["validate", *dataset_ids])
    out, err = capsys.readouterr()
    return status, out, err


def test_an_unreadable_file_is_a_problem_and_the_other_datasets_are_still_checked(workflow, monkeypatch, capsys):
    status, out, err = validate(workflow, monkeypatch, capsys, "broken", "good")
    assert status == 1 and err == ""
    broken, good = out.split("\n\n")
    assert broken.startswith("dataset broken (lineage track)\n  1 problem:\n    - ")
    assert f"{workflow}/broken/cells.h5ad: file: not a readable h5ad file (" in broken
    assert good.startswith("dataset good (lineage track)") and good.endswith("no problems found\n")


def test_a_wrong_id_is_exit_2_and_the_other_datasets_are_still_reported(workflow, monkeypatch, capsys):
    status, out, err = validate(workflow, monkeypatch, capsys, "goood", "good")
    assert status == 2
    assert err.startswith("error: unknown dataset id 'goood'; known ids: ") and err.count("\n") == 1
    assert out.startswith("dataset good (lineage track)") and "no problems found" in out


def test_validate_names_the_matrix_it_checked_and_warns_of_nan_in_the_others(workflow, monkeypatch, capsys):
    status, out, _ = validate(workflow, monkeypatch, capsys, "layered", "good")
    assert status == 0  # the matrix the entry reads is fine: the others' NaN are warnings
    layered, good = out.split("\n\n")
    path = workflow / "layered/cells.h5ad"
    assert "  matrix checked:        layers['profiles'] (not read: X, layers['raw'])\n" in layered
    assert f"  warning: {path}: X: 1 NaN or infinite values (not read by this entry)\n" in layered
    assert f"  warning: {path}: layers['raw']: 2 NaN or infinite values (not read by this entry)\n" in layered
    assert "  matrix checked:        X\n" in good and "warning" not in good


# ---------------------------------------------------------------- a retry after an input error


JOB = """
import sys
from types import SimpleNamespace

# what Snakemake's script preamble defines: the job's rule, input, params, resources
snakemake = SimpleNamespace(rule="prepare_dataset", input=[sys.argv[2]], params=[{"values": "counts"}],
                            resources={"mem_mb": int(sys.argv[3]), "runtime": 60})
from celldag.jobs import joblog
from celldag.errors import InputError

joblog.start(sys.argv[1])
print("working", file=sys.stderr)
raise {"InputError": InputError, "MemoryError": MemoryError, "RuntimeError": RuntimeError}[sys.argv[4]](
    "lab.h5ad: X: negative counts")
"""


def run_job(tmp_path, error: str, mem_mb: int) -> subprocess.CompletedProcess:
    """One try of a job script failing with ``error``, as Snakemake runs it (the log is removed before each try)."""
    script, log = tmp_path / "job.py", tmp_path / "logs/job.log"
    script.write_text(JOB)
    log.unlink(missing_ok=True)
    return subprocess.run(
        [sys.executable, script, str(log), str(tmp_path / "lab.h5ad"), str(mem_mb), error],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_retry_of_an_input_error_exits_at_once_with_the_line_in_its_log(tmp_path):
    (tmp_path / "lab.h5ad").write_text("source")
    first = run_job(tmp_path, "InputError", 8000)
    assert first.returncode == 1 and first.stderr == "error: lab.h5ad: X: negative counts\n"
    retry = run_job(tmp_path, "InputError", 16000)  # per_attempt: twice the memory
    assert retry.returncode == 1 and retry.stderr == ""
    assert (tmp_path / "logs/job.log").read_text() == f"error: lab.h5ad: X: negative counts\n{NOT_RETRIED}\n"
    again = run_job(tmp_path, "InputError", 8000)  # a later snakemake run: a new try, which shows the error
    assert again.stderr == first.stderr and "working" in (tmp_path / "logs/job.log").read_text()


def test_a_changed_input_is_tried_again(tmp_path):
    (tmp_path / "lab.h5ad").write_text("source")
    run_job(tmp_path, "InputError", 8000)
    (tmp_path / "lab.h5ad").write_text("fixed source")
    assert run_job(tmp_path, "InputError", 16000).stderr == "error: lab.h5ad: X: negative counts\n"


@pytest.mark.parametrize("error", ["MemoryError", "RuntimeError"])
def test_other_failures_get_their_retry(tmp_path, error):
    (tmp_path / "lab.h5ad").write_text("source")
    run_job(tmp_path, error, 8000)
    retry = run_job(tmp_path, error, 16000)
    assert retry.stderr.startswith(f"error: {error}: ") and "working" in (tmp_path / "logs/job.log").read_text()
    assert not (tmp_path / "logs/job.log.input-error").exists()


def test_the_marker_holds_what_decides_a_retry(tmp_path):
    (tmp_path / "lab.h5ad").write_text("source")
    run_job(tmp_path, "InputError", 8000)
    marker = json.loads((tmp_path / "logs/job.log.input-error").read_text())
    assert marker["resources"] == {"mem_mb": 8000, "runtime": 60}
    assert marker["error"] == "error: lab.h5ad: X: negative counts"
    assert "prepare_dataset" in marker["key"] and str(tmp_path / "lab.h5ad") in marker["key"]


# ---------------------------------------------------------------- lineage_h5ad: a tree in uns, the values hint


def prepare(tmp_path, adata, **params):
    entry, files = lineage_entry(tmp_path, adata, **params)
    return prepare_lineage_h5ad("lab", entry["params"], 0, files)


def test_lineage_h5ad_reads_the_tree_from_a_newick_string_in_uns(tmp_path):
    adata = cells_by_leaf(["A", "B", "C", "D"])
    adata.uns["lineage_tree"] = "((A,B),(C,D));"
    prepared = prepare(tmp_path, adata, leaf_key="clone", newick_key="lineage_tree")
    assert set(parse_newick(prepared.uns["tree_newick"]).leaf_names) == {"A", "B", "C", "D"}


@pytest.mark.parametrize(
    ("uns", "params", "problem"),
    [
        ({}, {"newick_key": "tree"}, "uns['tree']: missing tree (uns keys: [])"),
        (
            {"tree": "((A,B),(C,D);"},
            {"newick_key": "tree"},
            "uns['tree']: not a valid Newick tree "
            "(malformed Newick at character 12: unbalanced parentheses: 1 '(' not closed)",
        ),
        (
            {"tree": "((A,B),(C,D));"},
            {"newick_key": "tree", "lineage_key": "lineage"},
            "params: give exactly one of newick (a tree file), newick_key (a Newick string in uns) and lineage_key",
        ),
    ],
)
def test_a_tree_in_uns_is_checked_like_a_tree_file(tmp_path, uns, params, problem):
    adata = cells_by_leaf(["A", "B", "C", "D"])
    adata.uns.update(uns)
    with pytest.raises(InputError) as raised:
        prepare(tmp_path, adata, leaf_key="clone", **params)
    assert str(raised.value) == f"{tmp_path}/cells.h5ad: {problem}"


def test_negative_lineage_counts_hint_at_values_transformed(tmp_path):
    adata = leaves()  # z-scored-like profiles, registered with the default values: counts
    with pytest.raises(InputError) as raised:
        prepare(tmp_path, adata, newick=NEWICK)
    assert str(raised.value) == (
        f"{tmp_path}/cells.h5ad: X: negative counts (min {adata.X.min():g}); "
        "set values: transformed for log-transformed or z-scored input"
    )


SEEDS_JOB = """
import sys
from celldag.jobs import joblog

for seed, log in enumerate(sys.argv[1:]):  # a run_method job running its seeds in turn
    joblog.start(log)
    print(f"seed {seed} working", file=sys.stderr)
raise RuntimeError("the last seed failed")
"""


def test_a_job_of_several_seeds_logs_each_to_its_own_file_and_its_error_line_to_the_console(tmp_path):
    script, logs = tmp_path / "job.py", [tmp_path / f"logs/seed{seed}.log" for seed in range(3)]
    script.write_text(SEEDS_JOB)
    done = subprocess.run([sys.executable, script, *map(str, logs)], capture_output=True, text=True, timeout=60)
    assert [log.read_text().splitlines()[0] for log in logs] == [f"seed {seed} working" for seed in range(3)]
    assert "RuntimeError: the last seed failed" in logs[2].read_text()
    # one line on the console, naming the failed seed's log, and nothing of the seeds' logging
    assert done.stderr == f"error: RuntimeError: the last seed failed (traceback in {logs[2]})\n"
