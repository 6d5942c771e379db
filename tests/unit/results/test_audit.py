"""``celldag audit``: the comparison logic without Snakemake, then one tiny real pipeline audited clean and damaged."""

from __future__ import annotations

import json
import math
import re
import shutil

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS, planned_run

from celldag.artifacts import sha256_file
from celldag.cli import main
from celldag.commands import audit
from celldag.jobs import prepare
from celldag.jobs.evaluate import checksums_path, write_scores
from celldag.plan import DATASET_SCORES, PREPARED, RUN_OUTPUT, RUN_RECORD, Run, method_params
from celldag.results import output_differences
from celldag.results.tolerance import CUDA_TOLERANCE, values_match
from celldag.tracks import Track

ULP = math.ulp(0.25)

# ---------------------------------------------------------------- comparison logic (fast, no Snakemake)


def test_scores_match_bit_for_bit_without_a_tolerance():
    assert values_match(0.25, 0.25, None)
    assert not values_match(0.25, 0.25 + ULP, None)  # one unit in the last place is a difference
    assert values_match(math.nan, math.nan, None) and not values_match(math.nan, 0.0, None)
    assert not values_match(None, 0.0, None) and values_match(None, None, None)


def test_cuda_runs_match_within_the_stated_tolerance():
    assert values_match(0.5, 0.5 + 4e-5, CUDA_TOLERANCE)  # 4e-5 ≤ 1e-6 + 1e-4 · 0.5
    assert not values_match(0.5, 0.5 + 1e-4, CUDA_TOLERANCE)
    assert values_match(0.0, 1e-7, CUDA_TOLERANCE)  # the absolute part, for scores near 0
    assert str(CUDA_TOLERANCE) == "|Δ| ≤ 1e-06 + 0.0001·|recorded|"


def test_score_differences_name_each_metric_including_those_on_one_side():
    recorded = {"rf": 0.5, "quartet_dist": 0.25, "qdist_sampled": 0.125}
    now = {"rf": 0.5, "quartet_dist": 0.25 + ULP, "k_qdist": 0.1}
    assert output_differences.score_differences(recorded, now, None) == [
        ("k_qdist", None, 0.1),
        ("qdist_sampled", 0.125, None),
        ("quartet_dist", 0.25, 0.25 + ULP),
    ]
    assert output_differences.score_differences(recorded, dict(recorded), None) == []


def test_arrays_compare_by_their_bits_or_within_the_tolerance():
    x = np.random.default_rng(0).normal(size=(5, 3))
    assert output_differences.array_difference(x, x.copy(), None) is None
    nudged = x.copy()
    nudged[2, 1] = np.nextafter(nudged[2, 1], np.inf)
    assert output_differences.array_difference(x, nudged, None).startswith("max |Δ| ")
    assert output_differences.array_difference(x, nudged, CUDA_TOLERANCE) is None
    assert output_differences.array_difference(x, x[:4], None) == "shape (5, 3) recorded, (4, 3) now"
    assert output_differences.array_difference(x, x.astype(np.float32), None) is not None  # other dtype, other bits


def test_trees_compare_as_text_or_by_topology_and_branch_lengths():
    tree = "((a:0.5,b:1.25):0.75,(c:1,d:2));"
    assert output_differences.newick_difference(tree, tree, None) is None
    longer = tree.replace("1.25", "1.2500001")
    assert output_differences.newick_difference(tree, longer, None) == "another tree"
    assert output_differences.newick_difference(tree, longer, CUDA_TOLERANCE) is None
    assert output_differences.newick_difference(tree, tree.replace("1.25", "1.3"), CUDA_TOLERANCE).startswith(
        "max |Δ| 0.05"
    )
    swapped = "((a:0.5,c:1.25):0.75,(b:1,d:2));"
    assert output_differences.newick_difference(tree, swapped, CUDA_TOLERANCE) == "another topology or leaf names"


def output(embedding=None, tree=None, status="ok") -> anndata.AnnData:
    adata = anndata.AnnData(obs=pd.DataFrame(index=["a", "b", "c"]))
    adata.uns["status"] = status
    if embedding is not None:
        adata.obsm["X_emb"] = embedding
    if tree is not None:
        adata.uns["tree_newick"] = tree
    return adata


def test_outputs_compare_status_embedding_and_tree_not_training_facts():
    x = np.arange(6.0).reshape(3, 2)
    recorded, same = output(x, "(a,(b,c));"), output(x.copy(), "(a,(b,c));")
    same.uns["training"] = {"device": "cuda:0"}  # how it was made, not what it is
    assert output_differences.output_differences(recorded, same, None) == []
    other = output(x + 1, "(b,(a,c));", status="failed")
    assert output_differences.output_differences(recorded, other, None) == [
        "uns['status'] recorded 'ok' now 'failed'",
        "obsm['X_emb'] max |Δ| 1",
        "uns['tree_newick'] another tree",
    ]
    assert output_differences.output_differences(recorded, output(None, "(a,(b,c));"), None) == [
        "obsm['X_emb'] on one side only"
    ]


def scores_table(values: dict[tuple[str, int, str], float]) -> pd.DataFrame:
    rows = [
        {
            "dataset": "bm",
            "track": "lineage",
            "method": method,
            "variant": "default",
            "seed": seed,
            "metric": metric,
            "value": value,
            "higher_is_better": False,
            "status": "ok",
        }
        for (method, seed, metric), value in values.items()
    ]
    return pd.DataFrame(rows)


def test_an_edited_score_is_named_by_its_run_and_metric(tmp_path, capsys):
    path = str(tmp_path / "scores/bm.parquet")
    write_scores(
        scores_table({("nj_raw", 0, "rf"): 0.5, ("nj_raw", 0, "quartet_dist"): 0.25, ("nj_pca", 0, "rf"): 0.75}), path
    )
    assert json.loads((tmp_path / "scores/bm.sha256.json").read_text())["sha256"] == sha256_file(path)
    report = audit.Report()
    audit.check_scores_table(path, audit.Digests(), report)
    assert report.problems == 0 and report.counts["scores tables"] == 1

    table = pd.read_parquet(path)
    table.loc[(table["method"] == "nj_raw") & (table["metric"] == "quartet_dist"), "value"] = 0.2  # a hand edit
    table[table["method"] != "nj_pca"].to_parquet(path, index=False)  # and a run's rows dropped
    report = audit.Report()
    audit.check_scores_table(path, audit.Digests(), report)
    lines = capsys.readouterr().out.splitlines()
    assert report.problems == 2
    assert lines[-2].startswith(f"score changed: bm/nj_pca/default/0 rf in {path} (row removed; ")
    assert lines[-1].startswith(f"score changed: bm/nj_raw/default/0 quartet_dist in {path} (now 0.2; ")
    assert lines[-1].endswith(f"whose digest is in {checksums_path(path)})")


def test_edited_rows_lists_changed_added_and_removed_rows():
    recorded = {"d/m/v/0": {"rf": "1", "qd": "2"}, "d/m/v/1": {"rf": "3"}}
    now = {"d/m/v/0": {"rf": "1", "qd": "x"}, "d/m/v/2": {"rf": "4"}}
    assert audit.edited_rows(recorded, now) == [("d/m/v/0", "qd"), ("d/m/v/1", "rf"), ("d/m/v/2", "rf")]


def test_the_sample_is_seeded_and_only_of_ok_runs():
    runs = {
        Run("bm", "nj", "default", seed, "k" * 10, "d" * 10): {"status": "ok" if seed != 3 else "failed"}
        for seed in range(8)
    }
    first = audit.sample_runs(runs, 3, seed=0)
    assert first == audit.sample_runs(runs, 3, seed=0) and len(first) == 3
    assert audit.sample_runs(runs, 3, seed=1) != first  # another seed, (here) another sample
    assert [run.seed for run in audit.sample_runs(runs, 20, seed=0)] == [0, 1, 2, 4, 5, 6, 7]


def test_a_rerun_gets_exactly_the_recorded_params(tmp_path):
    # a GPU job that fell back to the CPU recorded device: cpu, which its registry entry does not say
    method = {
        "track": "lineage",
        "run": "celldag.methods.celltreeqm:run",
        "params": {"device": "cuda", "steps": 5},
        "variants": {"supervised": {"setting": "supervised"}},
    }
    record = {
        "config": {
            "method": method,
            "dataset": {},
            "variant": "supervised",
            "params": {"device": "cpu", "steps": 5, "setting": "supervised"},
        },
        "seed": 2,
        "threads": 1,
        "device": "cpu (x86_64)",
        "inputs": {"prepared": "p.h5ad"},
    }
    kwargs = audit.rerun_kwargs(Run("bm", "celltreeqm", "supervised", 2, "k" * 10, "d" * 10), record, tmp_path)
    assert method_params(kwargs["method_entry"], kwargs["variant"]) == record["config"]["params"]
    assert str(tmp_path) in kwargs["output_path"] and not kwargs["gpu_requested"] and kwargs["gene_table_path"] is None


def test_prepared_datasets_carry_the_digests_of_their_source_files(tmp_path, monkeypatch):
    source = tmp_path / "counts.csv"
    source.write_text("cell,gene\n")

    def loader(dataset_id, params, seed, files):  # records its own fingerprints, as CeNGEN's does
        adata = anndata.AnnData(np.zeros((4, 2)), obs=pd.DataFrame(index=list("abcd")))
        adata.uns["source_files"] = {"package.csv": "f" * 64}
        return adata

    monkeypatch.setattr(prepare.extensions, "load", lambda reference: loader)
    entry = {
        "loader": "lab:loader",
        "params": {},
        "track": "toy",
        "files": [{"name": "counts.csv", "path": str(source)}],
    }
    adata = prepare.prepare_dataset(
        "lab", entry, Track(**{**vars(TRACKS["lineage"]), "arrange": None}), 0, {"counts.csv": str(source)}
    )
    assert adata.uns[prepare.SOURCE_FILES] == {"counts.csv": {"path": str(source), "sha256": sha256_file(source)}}
    assert adata.uns["source_files"] == {"package.csv": "f" * 64}  # the loader's own record is kept


# ---------------------------------------------------------------- one tiny pipeline, audited


e2e = pytest.mark.e2e  # the tests above run without Snakemake: only those below carry the marker


@pytest.fixture
def results(tiny_lineage_run, tmp_path, monkeypatch):
    """A copy of the finished tiny lineage run (conftest.TINY_LINEAGE) to damage, as the working directory."""
    workdir = shutil.copytree(tiny_lineage_run, tmp_path / "copy", symlinks=True)
    monkeypatch.chdir(workdir)
    return workdir


def run_audit(capsys, *args: str) -> tuple[int, list[str]]:
    status = main(["audit", *args])
    return status, capsys.readouterr().out.splitlines()


@e2e
def test_intact_results_audit_clean(results, capsys):
    status, lines = run_audit(capsys)
    reproduced = [line for line in lines if line.startswith("reproduced: ")]
    assert status == 0, "\n".join(lines)
    assert len(reproduced) == 3  # the default sample
    assert all(line.endswith("(cpu; output and 3 scores bit-identical)") for line in reproduced)
    assert lines[-1] == (
        "summary: 6 run records, 8 files, 1 scores table, 5 aggregate files checked (0 changed, 0 missing, "
        "0 errors); "
        "3 re-runs: 3 reproduced, 0 differ, 0 not re-run — OK"
    )


@e2e
def test_records_hold_what_the_audit_reads(results):
    run = planned_run(results, "bm_small", "nj_pca", "default", 1)
    record = json.loads((results / run.path(RUN_RECORD)).read_text())
    assert record["output_sha256"] == sha256_file(results / run.path(RUN_OUTPUT))
    assert record["inputs"] == {"prepared": run.path(PREPARED)} and record["threads"] == 1
    assert record["source_sha256"] == {}  # a simulated dataset has no source files


@e2e
def test_a_changed_prepared_dataset_is_named_with_the_runs_that_used_it(results, capsys):
    prepared = planned_run(results, "bm_small", "nj_raw", "default", 0).path(PREPARED)
    data = bytearray((results / prepared).read_bytes())
    data[-100] ^= 1
    (results / prepared).write_bytes(bytes(data))
    status, lines = run_audit(capsys, "--run", "bm_small/nj_raw/default/0")
    assert status == 1
    assert (
        f"input changed: {prepared} (used by 3 runs: bm_small/nj_pca/default/0, bm_small/nj_raw/default/0, "
        "bm_small/upgma_raw/default/0)"
    ) in lines
    assert f"not re-run: bm_small/nj_raw/default/0 (input changed: {prepared})" in lines


@e2e
def test_an_edited_score_is_named_by_both_checks(results, capsys):
    path = DATASET_SCORES.format(name="tiny", dataset="bm_small")
    table = pd.read_parquet(path)
    row = (table["method"] == "nj_raw") & (table["seed"] == 0) & (table["metric"] == "rf")
    recorded = float(table.loc[row, "value"].iloc[0])
    table.loc[row, "value"] = recorded + 0.01
    table.to_parquet(path, index=False)
    status, lines = run_audit(capsys, "--run", "bm_small/nj_raw/default/0")
    assert status == 1
    assert any(
        line.startswith(f"score changed: bm_small/nj_raw/default/0 rf in {path} (now {recorded + 0.01!r}; ")
        for line in lines
    )
    assert f"differs: bm_small/nj_raw/default/0 rf recorded {recorded + 0.01!r} now {recorded!r}" in lines


@e2e
def test_an_edited_aggregate_row_is_named_by_file_and_row(results, capsys):
    path = "results/tiny/scores.parquet"  # the table behind leaderboard.md and index.html
    table = pd.read_parquet(path)
    row = (table["method"] == "nj_pca") & (table["seed"] == 1) & (table["metric"] == "quartet_dist")
    recorded = float(table.loc[row, "value"].iloc[0])
    table.loc[row, "value"] = recorded / 2
    table.to_parquet(path, index=False)
    status, lines = run_audit(capsys, "--sample", "0")
    assert status == 1
    assert (
        f"aggregate row changed: bm_small/nj_pca/default/1 quartet_dist in {path} (value now {recorded / 2!r}; "
        f"the tables it is built from give {recorded!r})"
    ) in lines
    assert lines[-1].endswith("— FAILED") and "(1 changed," in lines[-1]


@e2e
def test_a_removed_aggregate_row_is_named_by_file_and_row(results, capsys):
    path = "results/tiny/scores.parquet"
    table = pd.read_parquet(path)
    keep = ~((table["method"] == "nj_raw") & (table["seed"] == 0) & (table["metric"] == "rf"))
    table[keep].to_parquet(path, index=False)
    status, lines = run_audit(capsys, "--sample", "0")
    assert status == 1
    assert f"aggregate row removed: bm_small/nj_raw/default/0 rf from {path}" in lines


@e2e
def test_an_edited_leaderboard_is_named_by_file_and_line(results, capsys):
    path = results / "results/tiny/leaderboard.md"
    lines_before = path.read_text().splitlines()
    number = next(i for i, line in enumerate(lines_before) if "| nj_pca | default | " in line)
    edited = re.sub(r"\| nj_pca \| default \| [0-9.]+", "| nj_pca | default | 0.000", lines_before[number])
    path.write_text("\n".join([*lines_before[:number], edited, *lines_before[number + 1 :]]) + "\n")
    status, lines = run_audit(capsys, "--sample", "0")
    assert status == 1
    assert (
        f"leaderboard changed: results/tiny/leaderboard.md line {number + 1}: {edited!r}; the scores give "
        f"{lines_before[number]!r} (1 differing line)"
    ) in lines


@e2e
def test_a_record_without_a_field_is_one_error_line(results, capsys):
    path = planned_run(results, "bm_small", "nj_pca", "default", 1).path(RUN_RECORD)
    record = json.loads((results / path).read_text())
    del record["config"]["params"]
    (results / path).write_text(json.dumps(record))
    status, lines = run_audit(capsys, "--sample", "0")
    assert status == 1
    assert [line for line in lines if line.startswith("error: ")] == [
        f"error: {path}: field 'config.params' missing from the run record "
        "(records written by an older celldag lack some fields; rerunning the run rewrites its record)"
    ]
    assert (
        "not checked: results/tiny/scores.parquet, results/tiny/runs.parquet, results/tiny/floor_cards.parquet, "
        "results/tiny/qc.parquet, results/tiny/leaderboard.md "
        "(a run record they come from is unreadable)" in lines
    )


@e2e
def test_an_unknown_run_is_a_usage_error(results, capsys):
    assert main(["audit", "--run", "bm_small/nj_raw/default/7"]) == 2
    assert capsys.readouterr().err.startswith("error: --run bm_small/nj_raw/default/7: not a run of this configuration")


@e2e
def test_lineage_scores_do_not_depend_on_the_outputs_scored_together(results):
    """Why the audit may compare: each output's scores are the same alone as beside the others of its seed."""
    from celldag.tracks import ScoringContext

    runs = [planned_run(results, "bm_small", method, "default", 0) for method in ("nj_pca", "nj_raw")]
    prepared = anndata.read_h5ad(runs[0].path(PREPARED))
    outputs = [anndata.read_h5ad(run.path(RUN_OUTPUT)) for run in runs]
    context = ScoringContext(0, {}, {"qdist_quartets": 100000})
    together = TRACKS["lineage"].call("scorer", prepared, outputs, context)
    alone = [TRACKS["lineage"].call("scorer", prepared, [one], context)[0] for one in outputs]
    assert together == alone
