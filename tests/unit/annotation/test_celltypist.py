"""CellTypist's model in celldag (celldag.annotation.celltypist) and its classifier: trained as CellTypist trains,
read and written as CellTypist's model files, and predicting what CellTypist itself predicts from the same file."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from celldag.annotation import celltypist as ct
from celldag.annotation.track import AnnotationInput, fit_labels
from celldag.methods.classifiers import celltypist as celltypist_classifier

PARITY = Path(__file__).resolve().parents[3] / ".parity"  # requirements/parity.txt, installed by `make test`


def celltypist_package():
    if PARITY.is_dir() and str(PARITY) not in sys.path:
        sys.path.insert(0, str(PARITY))
    return pytest.importorskip("celltypist", reason="celltypist is absent: `make test` installs it into .parity/")


def lognormalised(n_cells: int = 300, n_genes: int = 80, seed: int = 0, types=("B", "NK", "T")):
    """(log1p of counts per 10,000, labels, genes): each type raises its own ten genes."""
    rng = np.random.default_rng(seed)
    labels = np.array(types)[rng.integers(0, len(types), n_cells)]
    counts = rng.poisson(1.0, (n_cells, n_genes)).astype(float)
    for j, name in enumerate(types):
        counts[labels == name, 10 * j : 10 * j + 10] += rng.poisson(2.0, (int((labels == name).sum()), 10))
    counts[:, -1] = 0  # a gene no cell expresses: CellTypist drops it
    return np.log1p(counts / counts.sum(axis=1, keepdims=True) * 1e4), labels, [f"G{i}" for i in range(n_genes)]


def test_each_type_is_its_own_binary_logistic_regression_on_clipped_scaled_genes():
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    values, labels, genes = lognormalised()
    model = ct.train(values, labels, genes)
    assert model.genes.tolist() == genes[:-1] and model.types.tolist() == ["B", "NK", "T"]
    kept = values[:, :-1]
    scaled = np.minimum(StandardScaler().fit_transform(kept), 10)
    for k, name in enumerate(model.types):  # one-vs-rest, as CellTypist's multi_class='ovr': an independent fit each
        alone = LogisticRegression(C=1.0, max_iter=1000).fit(scaled, labels == name)
        np.testing.assert_allclose(model.coef[k], alone.coef_[0], atol=1e-8)
        np.testing.assert_allclose(model.intercept[k], alone.intercept_[0], atol=1e-8)
    decisions, used = ct.decision(model, kept, genes[:-1])
    assert used == 79
    np.testing.assert_allclose(decisions, scaled @ model.coef.T + model.intercept, atol=1e-10)
    assert (model.types[decisions.argmax(axis=1)] == labels).mean() > 0.9
    assert model.description["converged"] and model.description["solver"] == "lbfgs"


def test_two_types_give_opposite_decisions_and_a_gene_the_data_lack_drops_its_term():
    values, labels, genes = lognormalised(types=("B", "T"))
    model = ct.train(values, labels, genes)
    decisions, _ = ct.decision(model, values, genes)
    np.testing.assert_allclose(decisions[:, 0], -decisions[:, 1])
    subset = [3, 7, 20, 50]
    partial, used = ct.decision(model, values[:, subset], [genes[i] for i in subset])
    scaled = np.minimum((values[:, subset] - model.mean[subset]) / model.scale[subset], 10)
    assert used == 4
    np.testing.assert_allclose(partial, scaled @ model.coef[:, subset].T + model.intercept, atol=1e-10)
    with pytest.raises(ValueError, match="no gene of the data is a gene of the CellTypist model"):
        ct.decision(model, values[:, :2], ["X1", "X2"])


def test_a_model_file_reads_back_as_written_and_a_foreign_pickle_is_refused_naming_the_file(tmp_path):
    values, labels, genes = lognormalised()
    model = ct.train(values, labels, genes, description={"details": "test"})
    ct.write_model(model, tmp_path / "model.pkl")
    back = ct.read_model(tmp_path / "model.pkl")
    for name in ("genes", "types", "mean", "scale", "coef", "intercept"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
    assert back.description["details"] == "test" and back.description["number_celltypes"] == 3
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"weights": [1, 2]}))
    with pytest.raises(ValueError, match=r"other\.pkl: not a CellTypist model file \(no 'Model' entry\)"):
        ct.read_model(tmp_path / "other.pkl")


class Payload:
    """An object whose unpickling would run a command: what a malicious model file holds."""

    def __reduce__(self):
        import os

        return os.getcwd, ()


def test_a_model_file_naming_anything_but_a_models_classes_is_refused_before_it_is_built(tmp_path):
    from sklearn.linear_model import SGDClassifier

    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"Model": Payload(), "Scaler_": None}))
    with pytest.raises(
        ValueError,
        match=r"evil\.pkl: not a CellTypist model file \(UnpicklingError: it names "
        r"posix\.getcwd, which a CellTypist model does not hold\)",
    ):
        ct.read_model(tmp_path / "evil.pkl")
    values, labels, genes = lognormalised()  # an SGD model, as CellTypist's published ones: its loss object is allowed
    model = ct.train(values, labels, genes)
    ct.write_model(model, tmp_path / "model.pkl")
    content = pickle.loads((tmp_path / "model.pkl").read_bytes())
    sgd = SGDClassifier(loss="log_loss", random_state=0).fit(values[:, :-1], labels)
    sgd.features = content["Model"].features
    (tmp_path / "sgd.pkl").write_bytes(pickle.dumps({**content, "Model": sgd}))
    read = ct.read_model(tmp_path / "sgd.pkl")
    np.testing.assert_array_equal(read.coef, sgd.coef_)
    np.testing.assert_allclose(
        ct.decision(read, values, genes)[0],
        sgd.decision_function(np.minimum((values[:, :-1] - model.mean) / model.scale, 10)),
        atol=1e-10,
    )


def test_celltypist_itself_predicts_from_celldags_model_file_what_celldag_predicts(tmp_path):
    """The parity of issue 52: celltypist.annotate reads the file celldag writes and gives the same decision values and
    sigmoids (1e-6), best match and prob match, on a query whose genes come in another order, a fifth of the model's
    genes missing and genes of its own besides."""
    import anndata

    celltypist = celltypist_package()
    values, labels, genes = lognormalised(n_cells=400, n_genes=120)
    model = ct.train(values[:300], labels[:300], genes)
    ct.write_model(model, tmp_path / "model.pkl")
    rng = np.random.default_rng(1)
    kept = np.sort(rng.permutation(len(genes))[: int(0.8 * len(genes))])[::-1]
    query_genes = [genes[i] for i in kept] + ["EXTRA1", "EXTRA2"]
    query = np.hstack([values[300:, kept], np.log1p(rng.poisson(1.0, (100, 2)))])
    found = celltypist.annotate(
        anndata.AnnData(
            X=query, var=pd.DataFrame(index=query_genes), obs=pd.DataFrame(index=[f"c{i}" for i in range(100)])
        ),
        model=str(tmp_path / "model.pkl"),
        mode="prob match",
    )
    decisions, used = ct.decision(model, query, query_genes)
    assert used == len(kept) - (1 if len(genes) - 1 in kept else 0)
    assert list(found.decision_matrix.columns) == model.types.tolist()
    np.testing.assert_allclose(found.decision_matrix.to_numpy(), decisions, atol=1e-6)
    sigmoid = ct.sigmoids(decisions)
    np.testing.assert_allclose(found.probability_matrix.to_numpy(), sigmoid, atol=1e-6)
    matched = ct.prob_match(sigmoid)
    assert 0 < (~matched.any(axis=1)).sum() < 100  # Unassigned cells and assigned ones
    # CellTypist writes "Unassigned" into a fixed-width numpy string array as wide as the longest joined call, so with
    # short type names it comes out cut ('Unas' here): compared as a prefix
    for call, row in zip(found.predicted_labels["predicted_labels"].astype(str), matched, strict=True):
        assert call == "|".join(model.types[row]) if row.any() else ct.UNASSIGNED.startswith(call), (call, row)


def test_a_label_takes_the_largest_sigmoid_of_its_model_types_and_the_map_names_what_it_leaves_out(tmp_path):
    (tmp_path / "map.tsv").write_text("model_type\tlabel\nCD4 T\tT\nCD8 T\tT\nNaive B\tB\nPlatelet\tMegakaryocyte\n")
    mapping = ct.read_label_map(tmp_path / "map.tsv")
    mapped = ct.label_map(["CD4 T", "CD8 T", "DC", "Naive B", "Platelet"], ["B", "NK", "T"], mapping)
    assert mapped.labels == ("B", "NK", "T") and mapped.columns == ((3,), (), (0, 1))
    assert mapped.unmapped_types == ("DC", "Platelet") and mapped.labels_without_type == ("NK",)
    sigmoid = np.array([[0.7, 0.2, 0.9, 0.1, 0.4], [0.1, 0.6, 0.0, 0.8, 0.3]])
    np.testing.assert_allclose(ct.mapped_sigmoids(sigmoid, mapped), [[0.1, 0.0, 0.7], [0.8, 0.0, 0.6]])
    (tmp_path / "twice.tsv").write_text("model_type\tlabel\nDC\tB\nDC\tT\n")
    with pytest.raises(ValueError, match=r"twice\.tsv: model_type 'DC' is mapped more than once"):
        ct.read_label_map(tmp_path / "twice.tsv")
    (tmp_path / "bad.tsv").write_text("type\tlabel\nDC\tB\n")
    with pytest.raises(ValueError, match=r"bad\.tsv: no column 'model_type'"):
        ct.read_label_map(tmp_path / "bad.tsv")


def test_normalised_sigmoids_keep_each_cells_order_and_sum_to_one():
    sigmoid = np.array([[0.9, 0.3, 0.6], [0.0, 0.0, 0.0], [1e-320, 0.0, 0.0]])
    out = ct.normalised(sigmoid)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    np.testing.assert_allclose(out[0], [0.5, 1 / 6, 1 / 3])
    np.testing.assert_allclose(out[1], [1 / 3] * 3)
    assert ct.prob_match(sigmoid).tolist() == [[True, False, True], [False] * 3, [False] * 3]


def annotation_input(values, labels, genes, expression=True) -> AnnotationInput:
    n = len(labels)
    half = np.arange(n) < n // 2
    fits = {"random": half, "without_type_1": half & (labels != "NK")}
    return AnnotationInput(
        features=np.zeros((n, 2), dtype=np.float32),
        labels=fit_labels(labels, fits),
        batch=np.array(["b"] * n),
        classes=tuple(sorted(set(labels))),
        fits=fits,
        expression=values.astype(np.float32) if expression else None,
        genes=tuple(genes) if expression else (),
    )


def test_the_classifier_calibrates_on_normalised_sigmoids_keeps_the_raw_ones_and_needs_genes():
    values, labels, genes = lognormalised()
    inputs = annotation_input(values, labels, genes)
    result = celltypist_classifier(inputs, {"C": 1.0}, seed=0)
    proba, sigmoid = result.obsm["proba_random"], result.obsm["sigmoid_random"]
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(proba, sigmoid / sigmoid.sum(axis=1, keepdims=True), atol=1e-12)
    model = ct.train(values[: len(labels) // 2].astype(np.float32), labels[: len(labels) // 2], genes)
    np.testing.assert_allclose(sigmoid, ct.sigmoids(ct.decision(model, values.astype(np.float32), genes)[0]))
    held_out = result.obsm["sigmoid_without_type_1"]
    assert (held_out[:, 1] == 0).all() and (result.obsm["proba_without_type_1"][:, 1] == 0).all()
    assert result.uns["converged"] == {"random": True, "without_type_1": True}
    reason = annotation_input(values, labels, genes, expression=False).unmet("genes")
    assert reason.startswith("reads genes") and "`expression`" in reason
    assert inputs.unmet("genes") is None


def expression_task(n_cells: int, batches: tuple[str, ...]):
    """(prepared data, its annotation task, an `expression` upstream's output) of ``lognormalised`` cells dealt to
    ``batches`` in turn."""
    import anndata

    from celldag.annotation.track import chain_task
    from celldag.representation.preprocess import preprocess

    values, labels, genes = lognormalised(n_cells=n_cells)
    raw = anndata.AnnData(
        X=np.round(np.expm1(values)).astype(np.float32),
        var=pd.DataFrame(index=genes),
        obs=pd.DataFrame(
            {"type": labels, "sample": np.array(batches)[np.arange(n_cells) % len(batches)]},
            index=[f"c{i}" for i in range(n_cells)],
        ),
    )
    data = preprocess(raw, label_key="type", batch_key="sample", seed=0, params={})
    data.uns.update(dataset_id="lab", track="representation", seed=0)
    upstream = anndata.AnnData(
        obs=pd.DataFrame(index=data.obs_names),
        uns={"status": "ok"},
        obsm={"X_emb": np.asarray(data.X, dtype=np.float32)},
    )
    return data, chain_task(data, {}, 0), upstream


def test_the_benchmark_hands_genes_to_the_classifier_on_the_expression_upstream_alone():
    """chain_task keeps the prepared log-normalised expression; chain_input passes it on only where the upstream's
    entry says its embedding is the expression, so celltypist runs once per dataset seed, not once per embedding."""
    from celldag.annotation.track import chain_input, method_input

    data, task, output = expression_task(n_cells=240, batches=("a", "b"))
    on_expression = method_input(
        chain_input(task, output, {"config": {"method": {"embedding_is_expression": True}}}), None
    )
    on_pca = method_input(chain_input(task, output, {"config": {"method": {}}}), None)
    assert on_expression.genes == tuple(data.var_names) and on_pca.genes == ()
    lognorm = data.layers["lognorm"]
    np.testing.assert_array_equal(
        on_expression.expression.toarray(), lognorm.toarray() if hasattr(lognorm, "toarray") else lognorm
    )
    assert on_expression.unmet("genes") is None and on_pca.unmet("genes").startswith("reads genes")
    result = celltypist_classifier(on_expression, {}, seed=0)
    assert set(result.obsm) >= {f"{kind}_{fit}" for kind in ("proba", "sigmoid") for fit in on_expression.fits}


def test_celltypists_rules_and_the_confident_rule_are_scored_on_the_sets_cells():
    """scoring.rule_scores (issue 52): on the random split's query cells and on each left-out batch under the fit
    that never saw it, CellTypist's prob match and best match read from the raw sigmoids and the top type at p >= 0.5
    from the normalised ones, checked cell by cell."""
    import anndata

    from celldag.annotation.scoring import codes, rule_scores, split_masks
    from celldag.annotation.track import chain_input, method_input

    data, task, upstream = expression_task(n_cells=300, batches=("a", "b", "c"))
    inputs = method_input(chain_input(task, upstream, {"config": {"method": {"embedding_is_expression": True}}}), None)
    result = celltypist_classifier(inputs, {}, seed=0)
    output = anndata.AnnData(
        obs=pd.DataFrame(index=data.obs_names), obsm=result.obsm, uns={"classes": list(inputs.classes)}
    )
    scores = rule_scores(task, output)
    truth = np.array([inputs.classes.index(label) for label in task.obs["label"].astype(str)])
    _, query = split_masks(task)
    matched = ct.prob_match(result.obsm["sigmoid_random"])[query]
    assert scores["prob_match_coverage"] == pytest.approx(matched[np.arange(query.sum()), truth[query]].mean())
    assert scores["prob_match_unassigned"] == pytest.approx((~matched.any(axis=1)).mean())
    proba = result.obsm["proba_random"][query]
    confident = proba.max(axis=1) >= 0.5
    assert scores["confident_singletons"] == pytest.approx(confident.mean())
    assert scores["confident_singleton_errors"] == pytest.approx(
        (confident & (proba.argmax(axis=1) != truth[query])).mean()
    )
    best = result.obsm["sigmoid_random"][query]
    answered = best.max(axis=1) >= 0.5
    assert scores["best_match_singletons"] == pytest.approx(answered.mean())
    assert scores["best_match_coverage"] == pytest.approx((answered & (best.argmax(axis=1) == truth[query])).mean())
    batch = codes(task.obs["batch"])
    left_out = np.concatenate(
        [ct.prob_match(result.obsm[f"sigmoid_without_{b}"])[batch == b].sum(axis=1) for b in range(3)]
    )
    assert scores["prob_match_label_free_set_size"] == pytest.approx(left_out.mean())


def test_a_registry_model_is_fetched_through_the_mirror_verified_and_then_read_from_its_download(tmp_path, monkeypatch):
    """--model <id> (issue 52): a pretrained model of the registry is downloaded into resources/models/ through the
    mirror and checked against the registry's sha256; a verified copy is read again without a fetch; a copy whose
    bytes differ from the registry's digest is refused with one line naming --model; a .pkl is taken as given."""
    import dataclasses

    from celldag.artifacts import sha256_file
    from celldag.commands.annotate import model_path
    from celldag.errors import InputError
    from celldag.jobs.download import mirror_path
    from celldag.registry import Registries

    monkeypatch.chdir(tmp_path)
    url = "https://models.example.org/v2/Lab_Immune.pkl"
    values, labels, genes = lognormalised()
    served = tmp_path / "mirror" / mirror_path(url)
    served.parent.mkdir(parents=True)
    ct.write_model(ct.train(values, labels, genes), served)
    entry = {
        "classifier": "celltypist",
        "description": "d",
        "license": "l",
        "file": {"name": "Lab_Immune.pkl", "url": url, "sha256": sha256_file(served)},
    }
    registries = Registries(datasets={}, methods={}, models={"lab_immune": entry})
    downloads = {"mirror": str(tmp_path / "mirror"), "strict": True}  # strict: the origin is never contacted

    path = model_path("lab_immune", registries, downloads)
    assert path == "resources/models/Lab_Immune.pkl" and sha256_file(path) == sha256_file(served)
    assert list(ct.read_model(path).types) == ["B", "NK", "T"]
    served.unlink()  # the verified copy is read again: no second fetch
    assert model_path("lab_immune", registries, downloads) == path
    assert model_path("own/model.pkl", registries, downloads) == "own/model.pkl"

    wrong = dataclasses.replace(
        registries, models={"lab_immune": entry | {"file": entry["file"] | {"sha256": "0" * 64}}}
    )
    ct.write_model(ct.train(values, labels, genes), served)
    with pytest.raises(InputError, match=r"^--model lab_immune: .*sha256"):
        model_path("lab_immune", wrong, downloads)
    with pytest.raises(InputError, match=r"^--model: 'lab_immun' is neither a \.pkl file nor a pretrained model"):
        model_path("lab_immun", registries, downloads)
