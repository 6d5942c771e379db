"""Scoring a large dataset on a stratified subsample (`evaluation.score_cells`): the subsample's size, strata,
proportions and seeding; every method of a dataset and seed scored on the same cells; no change at all
when the dataset is not larger than max_cells; the size and seed in the scores table, accepted by its
contract and by `celldag audit`'s comparisons; the leaderboard's note; the UMAP figure's subsample.

scib-metrics itself is replaced by a stand-in that records what it is given (its JAX kernels compile
for a minute in a cold process): the scores are a function of those inputs (tests/
test_representation_determinism.py), so the same inputs, to the bit, mean the same scores.
"""

from __future__ import annotations

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS

from celldag import artifacts, contracts
from celldag.commands import audit
from celldag.jobs.evaluate import checksums_path, score_dataset
from celldag.jobs.prepare import prepare_dataset
from celldag.report.leaderboard import leaderboard_markdown
from celldag.representation import figures
from celldag.representation import scoring as representation_scoring
from celldag.representation.scoring import allocate, score_seed, stratified_subsample
from celldag.tracks import FigureData, ScoringContext

TRACK = TRACKS["representation"]
DATASET = "synthetic_test"
ENTRY = {
    "track": "representation",
    "loader": "celldag.data.synthetic:prepare_synthetic_counts",
    "params": {"n_cells": 600, "n_genes": 200, "n_types": 12, "n_batches": 4},
}


@pytest.fixture(scope="module")
def prepared():
    return prepare_dataset(DATASET, ENTRY, TRACK, seed=0)


def strata_of(obs: pd.DataFrame) -> pd.Series:
    return obs["label"].astype(str) + "|" + obs["batch"].astype(str)


def output(prepared, method: str, status: str = "ok") -> anndata.AnnData:
    """A run's output: column 0 of the embedding is each cell's row number, so a scorer's input shows its cells."""
    out = anndata.AnnData(
        obs=pd.DataFrame(index=prepared.obs_names),
        uns={"dataset_id": DATASET, "method_id": method, "variant": "default", "seed": 0, "status": status},
    )
    if status == "ok":
        noise = np.random.default_rng(len(method)).normal(size=(prepared.n_obs, 4))
        out.obsm["X_emb"] = np.column_stack([np.arange(prepared.n_obs), noise]).astype(np.float32)
    else:
        out.uns["status_reason"] = "a test"
    return out


@pytest.fixture
def scib_inputs(monkeypatch) -> list[dict]:
    """Replaces scib-metrics by a stand-in: each call's inputs are recorded, its scores are sums of them."""
    calls = []

    def stand_in(embeddings, labels, batch, pre_integration, *, batch_metrics=True, n_jobs=1, subsample=None):
        calls.append(
            {
                "embeddings": {key: np.array(x) for key, x in embeddings.items()},
                "labels": np.array(labels),
                "batch": np.array(batch),
                "pre_integration": np.array(pre_integration),
                "subsample": subsample,
            }
        )
        scored = len(labels) if subsample is None else len(subsample)
        return {
            key: {
                "total": float(np.asarray(x, dtype=np.float64).sum()),
                "ilisi": float(np.asarray(pre_integration, dtype=np.float64).sum()),
                "clisi": float(scored),
            }
            for key, x in embeddings.items()
        }

    monkeypatch.setattr(representation_scoring, "scib_scores", stand_in)
    monkeypatch.setattr(representation_scoring, "enable_jax_cache", lambda: None)
    monkeypatch.setattr(representation_scoring, "cache_umap_graph_kernels", lambda: None)
    return calls


# ── the subsample ─────────────────────────────────────────────────────────────────────────────────────


def test_the_subsample_has_its_size_and_every_stratum_in_proportion(prepared):
    rows = stratified_subsample(prepared.obs["label"], prepared.obs["batch"], 300, seed=0, dataset_seed=0)
    assert rows.size == 300 and np.array_equal(rows, np.unique(rows))  # sorted, no cell twice
    strata = strata_of(prepared.obs)
    counts, taken = strata.value_counts(), strata.iloc[rows].value_counts()
    assert set(taken.index) == set(counts.index)  # every non-empty stratum, the rare ones included
    quota = 300 * counts / counts.sum()
    bumped = quota < 1  # under one cell's share: one cell each
    assert bumped.any() and (taken[bumped.index[bumped]] == 1).all()
    # the others share the rest in proportion, within rounding
    rest = (300 - bumped.sum()) * counts[~bumped] / counts[~bumped].sum()
    assert (np.abs(taken[rest.index] - rest) < 1).all()
    assert (np.abs(taken[counts.index] - quota) < 2).all()


def test_without_tiny_strata_every_stratum_keeps_its_share_within_rounding():
    labels = np.repeat(["a", "b", "c"], [500, 300, 200])
    batch = np.tile(["x", "y"], 500)
    rows = stratified_subsample(labels, batch, 333, seed=1, dataset_seed=2)
    strata = pd.Series(labels).str.cat(batch, sep="|")
    counts, taken = strata.value_counts(), strata.iloc[rows].value_counts()
    assert rows.size == 333 and (np.abs(taken[counts.index] - 333 * counts / 1000) < 1).all()


def test_allocation_sums_to_the_size_and_never_exceeds_a_stratum():
    rng = np.random.default_rng(0)
    for _ in range(300):
        counts = rng.integers(1, rng.integers(2, 300), size=rng.integers(1, 30))
        size = int(rng.integers(1, counts.sum() + 1))
        alloc = allocate(size, counts)
        assert alloc.sum() == size and (alloc <= counts).all() and (alloc >= 0).all()
        assert counts.size > size or (alloc >= 1).all()
    assert allocate(2, np.array([5, 5, 5])).sum() == 2  # more strata than cells: not every one can be kept


def test_the_subsample_is_seeded_by_its_seed_and_the_dataset_seed(prepared):
    labels, batch = prepared.obs["label"], prepared.obs["batch"]
    first = stratified_subsample(labels, batch, 300, seed=0, dataset_seed=0)
    assert np.array_equal(first, stratified_subsample(labels, batch, 300, seed=0, dataset_seed=0))
    assert not np.array_equal(first, stratified_subsample(labels, batch, 300, seed=1, dataset_seed=0))
    assert not np.array_equal(first, stratified_subsample(labels, batch, 300, seed=0, dataset_seed=1))
    assert np.array_equal(stratified_subsample(labels, batch, 600, seed=0, dataset_seed=0), np.arange(600))


# ── scoring ───────────────────────────────────────────────────────────────────────────────────────────


def test_max_cells_at_or_above_the_size_scores_exactly_as_without_the_option(prepared, scib_inputs):
    outputs = [output(prepared, "pca"), output(prepared, "harmony"), output(prepared, "scvi", "not_applicable")]
    plain = score_seed(prepared, outputs, ScoringContext(0, {}, {"score_cells": None}))
    for max_cells in (600, 100_000):
        same = score_seed(
            prepared, outputs, ScoringContext(0, {}, {"score_cells": {"max_cells": max_cells, "seed": 3}})
        )
        assert same == plain and "scored_cells" not in same[0]
    assert plain[2] == {}  # a run that is not ok: no scores
    reference = scib_inputs[0]
    assert all(call["subsample"] is None for call in scib_inputs)
    for call in scib_inputs[1:]:
        for key in ("labels", "batch", "pre_integration"):
            assert call[key].dtype == reference[key].dtype and np.array_equal(call[key], reference[key])
        for key, embedding in call["embeddings"].items():
            assert embedding.dtype == np.float32 and embedding.tobytes() == reference["embeddings"][key].tobytes()
    assert len(reference["labels"]) == 600


def test_every_method_of_a_seed_is_scored_on_the_same_subsample(prepared, scib_inputs):
    outputs = [output(prepared, "pca"), output(prepared, "harmony"), output(prepared, "scvi", "not_applicable")]
    scores = score_seed(prepared, outputs, ScoringContext(0, {}, {"score_cells": {"max_cells": 300, "seed": 7}}))
    rows = stratified_subsample(prepared.obs["label"], prepared.obs["batch"], 300, seed=7, dataset_seed=0)
    (call,) = scib_inputs
    assert np.array_equal(call["subsample"], rows)  # the quadratic metrics' cells; the graph metrics: every cell
    for embedding in call["embeddings"].values():
        assert np.array_equal(embedding[:, 0], np.arange(prepared.n_obs))  # column 0: the cell's row number
    assert np.array_equal(call["labels"], prepared.obs["label"].astype(str).to_numpy())
    assert np.array_equal(call["batch"], prepared.obs["batch"].astype(str).to_numpy())
    assert call["pre_integration"].shape[0] == 300  # the PCR reference: the subsample's own PCA
    assert [s["scored_cells"] for s in scores] == [300, 300, 300]
    assert [s["subsample_seed"] for s in scores] == [7, 7, 7]
    assert scores[2] == {"scored_cells": 300, "subsample_seed": 7}  # not ok: the facts, no metric
    assert scores[0]["clisi"] == 300.0
    # another dataset seed draws other cells
    score_seed(prepared, outputs[:1], ScoringContext(1, {}, {"score_cells": {"max_cells": 300, "seed": 7}}))
    assert not np.array_equal(scib_inputs[-1]["subsample"], rows)


def write_run(tmp_path, prepared, evaluation: dict, dataset: str = DATASET) -> pd.DataFrame:
    """score_dataset on the prepared file and three outputs; the table it wrote."""
    prepared_path = str(tmp_path / dataset / "seed0.h5ad")
    copy = prepared.copy()
    copy.uns["dataset_id"] = dataset
    artifacts.write_h5ad(copy, prepared_path)
    paths = []
    for method, status in (("pca", "ok"), ("harmony", "ok"), ("scvi", "not_applicable")):
        out = output(prepared, method, status)
        out.uns["dataset_id"] = dataset
        paths.append(str(tmp_path / dataset / f"{method}.h5ad"))
        artifacts.write_h5ad(out, paths[-1])
    scores_path = str(tmp_path / "scores" / f"{dataset}.parquet")
    score_dataset(
        prepared_paths=[prepared_path],
        output_paths=paths,
        table_paths=[],
        scores_path=scores_path,
        track_id="representation",
        track=TRACK,
        dataset=ENTRY,
        evaluation=evaluation,
    )
    return artifacts.read_scores(scores_path)


def test_the_scores_table_carries_the_subsample_size_and_seed(tmp_path, prepared, scib_inputs):
    table = write_run(tmp_path, prepared, {"score_cells": {"max_cells": 300, "seed": 5}})
    assert (table["scored_cells"] == 300).all() and (table["subsample_seed"] == 5).all()
    assert pd.api.types.is_integer_dtype(table["scored_cells"]) and pd.api.types.is_integer_dtype(
        table["subsample_seed"]
    )
    assert not set(table["metric"]) & set(contracts.SCORE_FACTS)  # the facts are columns, never metric rows
    assert {"total", "ilisi", "clisi"} <= set(table.loc[table["method"] == "pca", "metric"])
    assert set(table.loc[table["method"] == "scvi", "metric"]) == set(TRACK.core_metrics)  # NaN rows, as before
    # audit: the digests beside the table match it
    report = audit.Report()
    audit.check_scores_table(str(tmp_path / "scores" / f"{DATASET}.parquet"), audit.Digests(), report)
    assert report.problems == 0 and report.counts["scores tables"] == 1
    assert checksums_path(str(tmp_path / "scores" / f"{DATASET}.parquet")).endswith(".sha256.json")


def test_without_the_option_the_table_has_no_subsample_columns(tmp_path, prepared, scib_inputs):
    table = write_run(tmp_path, prepared, {"score_cells": {"max_cells": 600, "seed": 5}})
    assert list(table.columns) == list(contracts.SCORE_COLUMNS)


def test_the_leaderboard_notes_the_subsample_under_its_dataset(tmp_path, prepared, scib_inputs):
    sub = write_run(tmp_path, prepared, {"score_cells": {"max_cells": 300, "seed": 5}})
    full = write_run(tmp_path, prepared, {}, dataset="other_dataset")
    scores = pd.concat([sub, full], ignore_index=True)  # a configuration's scores.parquet: NaN where scored in full
    contracts.check_scores(scores, "scores.parquet")
    path = tmp_path / "scores.parquet"
    scores.to_parquet(path, index=False)
    report = audit.Report()
    audit.compare_rows(str(path), str(path), audit.AGGREGATE_KEYS["scores"], report)  # NaN facts compare equal
    assert report.problems == 0
    text = leaderboard_markdown(scores, TRACKS)
    note = (
        "Silhouettes, isolated labels, PCR comparison, Leiden and batch ASW from a stratified subsample of 300 "
        "cells (by label × batch; `evaluation.score_cells` seed 5 with the dataset seed: seeds 0), the same cells "
        "for every method of a seed; LISI, kBET, graph connectivity and k-means NMI/ARI on every cell. Aggregates "
        "scored this way stayed within 0.003 of every cell's at half of 20,000 cells (docs/representation.md)."
    )
    assert text.count(note) == 1
    sub_part, other_part = text.split("## synthetic_test (representation)")[1], text.split("## synthetic_test")[0]
    assert note in sub_part and note not in other_part and "## other_dataset (representation)" in other_part
    assert "subsample" not in leaderboard_markdown(full, TRACKS)


@pytest.mark.parametrize(
    ("column", "values"), [("scored_cells", [-1.0]), ("subsample_seed", [0.5]), ("scored_cells", ["300"])]
)
def test_the_contract_refuses_bad_subsample_facts(column, values):
    table = pd.DataFrame(
        {
            "dataset": ["d"],
            "track": ["representation"],
            "method": ["pca"],
            "variant": ["default"],
            "seed": [0],
            "metric": ["total"],
            "value": [0.5],
            "higher_is_better": [True],
            "status": ["ok"],
            column: values,
        }
    )
    with pytest.raises(contracts.ContractError, match=f"column '{column}'"):
        contracts.check_scores(table, "scores.parquet")


# ── the UMAP figure ───────────────────────────────────────────────────────────────────────────────────


def figure_data(prepared, evaluation: dict) -> FigureData:
    return FigureData(
        dataset=DATASET,
        dataset_entry=ENTRY,
        track_id="representation",
        track=TRACK,
        seed=0,
        evaluation=evaluation,
        prepared=prepared,
        outputs={"pca/default": output(prepared, "pca")},
    )


def test_the_umap_draws_a_stratified_subsample_of_a_large_dataset_and_says_so(prepared, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "umap_coordinates", lambda x: drawn.append(x) or np.asarray(x[:, 1:3]))
    title = figures.umap(figure_data(prepared, {})).get_suptitle()
    assert title.endswith("(seed 0, 600 cells)") and len(drawn[-1]) == 600  # at most UMAP_MAX_CELLS: every cell
    monkeypatch.setattr(figures, "UMAP_MAX_CELLS", 300)
    title = figures.umap(figure_data(prepared, {"score_cells": {"max_cells": 400, "seed": 2}})).get_suptitle()
    assert "a stratified subsample of 300 of its 600 cells" in title
    rows = stratified_subsample(prepared.obs["label"], prepared.obs["batch"], 300, seed=2, dataset_seed=0)
    assert np.array_equal(drawn[-1][:, 0], rows)  # the scorer's function, with score_cells' seed
