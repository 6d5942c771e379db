"""The track interface: references checked without importing, declarations checked at parse time, and
every metric a shipped scorer returns is declared by its track."""

from __future__ import annotations

import anndata
import pandas as pd
import pytest
import yaml
from conftest import REPO, TRACKS

from celldag import contracts
from celldag.errors import InputError
from celldag.extensions import check_entry_point, load
from celldag.jobs.prepare import prepare_dataset
from celldag.registry import KINDS, ConfigError, load_config, read_yaml
from celldag.tracks import Metric, MetricGroup, ScoringContext, Track, check_declaration, check_track

BM = {
    "track": "lineage",
    "loader": "celldag.data.bm:prepare_bm_simulator",
    "params": {
        "depth": 4,
        "n_signal": 20,
        "n_noise": 5,
        "n_spurious": 5,
        "max_walk": 3.0,
        "noise_std": 1.0,
        "measurement_std": 0.5,
    },
}


def test_a_reference_must_name_a_top_level_definition_of_a_findable_module():
    check_entry_point("celldag.methods.distance_tree:run", "m.yaml: x.run")  # a function
    check_entry_point("celldag.lineage.track:TRACK", "t.yaml: x")  # an assignment
    check_entry_point("celldag.methods.celltreeqm:run", "m.yaml: x.run")  # re-exported by an import
    for reference, problem in (
        ("celldag.methods.distance_tree", "not an entry point of the form 'package.module:name'"),
        ("celldag.methods.nothing_here:run", "no module 'celldag.methods.nothing_here' on the Python path"),
        ("nowhere.at_all:run", "no module 'nowhere.at_all'"),
        ("celldag.methods.distance_tree:runn", "module 'celldag.methods.distance_tree' defines no 'runn'"),
    ):
        with pytest.raises(InputError, match=f"^m.yaml: x.run: .*{problem}"):
            check_entry_point(reference, "m.yaml: x.run")
    assert load("celldag.methods.distance_tree:run").__name__ == "run"


def test_track_declarations_are_checked():
    lineage = TRACKS["lineage"]
    entry = {"definition": "celldag.lineage.track:TRACK", "description": "x"}
    assert check_track("lineage", entry, "tracks.yaml") is lineage
    group = lineage.metric_groups[0]
    renamed = MetricGroup("Δ", (Metric("delta_rf", higher_is_better=True),))
    for changes, problem in (
        ({"scorer": "celldag.lineage.scoring:score_all"}, "t: scorer: .*defines no 'score_all'"),
        ({"metric_groups": (group, group)}, "t: metric 'rf' declared twice"),
        ({"metric_groups": lineage.metric_groups[1:]}, "t: no core metric"),
        ({"metric_groups": (group, renamed)}, "t: metric 'delta_rf': the prefixes 'delta_' and 'scaled_' are"),
    ):
        with pytest.raises(InputError, match=problem):
            check_declaration(Track(**{**vars(lineage), **changes}), "t")


@pytest.mark.parametrize(
    ("metric", "problem"),
    [
        (Metric("x", True, role="judged"), "role 'judged', not one of"),
        (Metric("x", True, role="guarantee"), "a guarantee, and only a guarantee, names a target"),
        (Metric("x", True, role="ranking", target="coverage"), "a guarantee, and only a guarantee, names a target"),
        (Metric("x", True, role="guarantee", target="most"), "target 'most', not one of"),
        (Metric("x", True, null="null_tree/random"), "names a null and an oracle, or neither"),
        (Metric("x", True, role="diagnostic", null="a/b", oracle="c/d"), "a diagnostic is not judged against controls"),
    ],
)
def test_a_metric_declares_its_role_and_what_it_is_judged_against(metric, problem):
    lineage = TRACKS["lineage"]
    groups = (*lineage.metric_groups, MetricGroup("extra", (metric,)))
    with pytest.raises(InputError, match=f"t: metric 'x': {problem}"):
        check_declaration(Track(**{**vars(lineage), "metric_groups": groups}), "t")


def test_every_shipped_metric_has_a_role_and_each_named_control_is_a_registry_control_of_its_track():
    methods = read_yaml(REPO / "config" / "methods.yaml")
    for track_id, track in TRACKS.items():
        for metric in track.metrics.values():
            if metric.null is None:
                continue
            for control in (metric.null, metric.oracle):
                method, _, variant = control.partition("/")
                assert methods[method]["track"] == track_id, (track_id, metric.name, control)
                # a chained track's row is a control where its method or the run it chains on is one (the annotation
                # oracle: logistic regression on the oracle embedding)
                upstream = variant.partition("/")[0] if track.upstream else None
                kinds = {methods[method]["kind"], methods[upstream]["kind"] if upstream else None}
                assert "control" in kinds, (track_id, metric.name, control)
    annotation = TRACKS["annotation"].metrics
    assert annotation["kandinsky_augmented_coverage"].role == "guarantee"
    assert annotation["kandinsky_augmented_max_shortfall"].target == "shortfall"
    assert annotation["unknown_type_false_flags"].target == "error_rate"
    assert annotation["split_lac_set_size"].role == "efficiency"
    assert annotation["confident_coverage"].role == "ranking"  # a classifier's own rule promises no coverage
    assert annotation["label_free_shifted"].role == "diagnostic"
    assert annotation["accuracy"].null == "permuted_labels/pca/default"
    assert annotation["confident_coverage"].null == "majority/pca/default"  # a rule's floor: the majority, certain
    assert annotation["confident_set_size"].null == "permuted_labels/pca/default"
    assert TRACKS["representation"].metrics["n_marker_genes"].role == "diagnostic"


def test_the_schema_refuses_the_truth_to_any_kind_but_control(tmp_path):
    oracle = {
        "track": "lineage",
        "run": "celldag.methods.control_trees:oracle_tree",
        "description": "d",
        "needs": ["truth"],
    }
    for entry, problem in (
        (oracle, "'kind' is a required property"),
        ({**oracle, "kind": "method"}, "'control' was expected"),
        ({**oracle, "kind": "control", "kind_by_variant": {"default": "baseline"}}, "'control' was expected"),
        (
            {**oracle, "needs": [], "kind": "baseline", "needs_by_variant": {"default": ["truth"]}},
            "'control' was expected",
        ),
    ):
        with pytest.raises(ConfigError, match=problem):
            registries_with(tmp_path, {"cheat": entry})
    assert registries_with(tmp_path, {"oracle": {**oracle, "kind": "control"}}).methods["oracle"]["kind"] == "control"


def registries_with(folder, methods: dict):
    """The shipped registries with ``methods`` added to the methods registry, loaded as a workflow would."""
    for kind in KINDS:
        data = read_yaml(REPO / "config" / f"{kind}.yaml")
        if kind == "methods":
            data |= methods
        (folder / f"{kind}.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    config = read_yaml(REPO / "config" / "config.yaml")
    _, registries = load_config(config, {}, root={kind: str(folder / f"{kind}.yaml") for kind in KINDS})
    return registries


def test_every_metric_the_lineage_scorer_returns_is_declared_and_every_declared_one_is_returned():
    from celldag.methods.distance_tree import run

    track = TRACKS["lineage"]
    prepared = prepare_dataset("bm", BM, track, seed=0)
    result = run(track.call("method_input", prepared, None, None), {"features": "raw", "reconstruction": "nj"}, 0)
    leaves = list(prepared.obs_names)
    outputs = []
    for supervision in (
        {},
        {"setting": "high_level_partition", "level": 2},
        {"setting": "partially_labelled", "known_leaves": leaves[: len(leaves) // 2]},
    ):
        output = anndata.AnnData(obs=pd.DataFrame(index=prepared.obs_names))
        output.obsm["X_emb"] = result.embedding
        output.uns.update(status="ok", tree_newick=result.tree_newick, supervision=supervision)
        outputs.append(output)
    failed = anndata.AnnData(obs=pd.DataFrame(index=prepared.obs_names))
    failed.uns["status"] = "failed"
    scored = track.call("scorer", prepared, [*outputs, failed], ScoringContext(0, BM, {"qdist_quartets": 5000}))
    # a reference with polytomies (leaves in fours under one root, as a barcode tree leaves cells) adds its scores
    reconstructed = prepared.copy()
    fours = [leaves[i : i + 4] for i in range(0, len(leaves), 4)]
    reconstructed.uns["tree_newick"] = "(" + ",".join("(" + ",".join(four) + ")" for four in fours) + ");"
    against_polytomies = track.call(
        "scorer", reconstructed, outputs[:1], ScoringContext(0, BM, {"qdist_quartets": 5000})
    )
    assert "a reconstruction" in against_polytomies[0].pop(contracts.SCORE_NOTE)
    returned = set().union(*scored, *against_polytomies)
    assert returned == set(track.metrics), "scorer and declaration disagree"
    assert scored[-1] == {}


def test_the_representation_scorer_returns_declared_metrics_only():
    """scIB metrics come from one Benchmarker call (tested in test_representation_metrics.py; too slow to
    repeat here): its metric list and the marker metrics must be what the track declares, same direction."""
    import numpy as np

    from celldag.representation.metrics import SCIB_METRICS
    from celldag.representation.scoring import marker_scores

    track = TRACKS["representation"]
    assert {name: track.metrics[name].higher_is_better for name in SCIB_METRICS} == SCIB_METRICS
    genes = ["CD79A", "MS4A1", "CD19", "GNLY", "NKG7", "PRF1"]
    output = anndata.AnnData(obs=pd.DataFrame(index=["c0"]), var=pd.DataFrame(index=genes))
    output.varm["X_gene_emb"] = np.repeat(np.eye(2), 3, axis=0) + np.arange(6)[:, None] * 0.01
    markers = {"B": genes[:3], "NK": genes[3:]}
    returned = set(marker_scores(output, markers, []))
    assert returned <= set(track.metrics) and set(SCIB_METRICS) | returned == set(track.metrics) - {
        "marker_db_static",
        "marker_ch_static",
    }  # the static pair needs a table: scored in the e2e test


def registry_tree(tmp_path, **changes) -> dict:
    """The shipped registries in tmp_path/config with entries replaced; returns the run config."""
    (tmp_path / "config").mkdir(exist_ok=True)
    for name in KINDS:
        registry = read_yaml(REPO / f"config/{name}.yaml")
        for entry_id, entry in changes.get(name, {}).items():
            registry[entry_id] = registry.get(entry_id, {}) | entry
        (tmp_path / f"config/{name}.yaml").write_text(yaml.safe_dump(registry))
    return {"datasets": ["bm_default"], "methods": ["nj_raw"]}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"datasets": {"bm_default": {"track": "lineages"}}},
            "config/datasets.yaml: bm_default.track: unknown track 'lineages'; "
            "known: annotation, lineage, representation",
        ),
        (
            {"datasets": {"bm_default": {"loader": "celldag.data.bm:prepare_bm"}}},
            "config/datasets.yaml: bm_default.loader: module 'celldag.data.bm' defines no 'prepare_bm'",
        ),
        (
            {"methods": {"nj_raw": {"run": "celldag.methods.distance_tree"}}},
            "config/methods.yaml: nj_raw.run: 'celldag.methods.distance_tree' is not an entry point",
        ),
        (
            {"methods": {"nj_raw": {"needs": ["batches"]}}},
            "config/methods.yaml: nj_raw.needs: the lineage track provides no optional input 'batches'; "
            "known: counts, replicates",
        ),
        (
            {"methods": {"nj_raw": {"needs_by_variant": {"supervised": ["replicates"]}}}},
            "config/methods.yaml: nj_raw.needs_by_variant.supervised: 'nj_raw' has no variant 'supervised'",
        ),
        (
            {"methods": {"nj_raw": {"kind_by_variant": {"relabelled": "control"}}}},
            "config/methods.yaml: nj_raw.kind_by_variant: 'nj_raw' has no variant 'relabelled'",
        ),
        (
            {"embeddings": {"random_384": {"provider": "celldag.embeddings.providers:noise"}}},
            "config/embeddings.yaml: random_384.provider: module 'celldag.embeddings.providers' defines no 'noise'",
        ),
        (
            {"tracks": {"lineage": {"definition": "celldag.lineage.track:TRACKS"}}},
            "config/tracks.yaml: lineage.definition: module 'celldag.lineage.track' defines no 'TRACKS'",
        ),
        (
            {"datasets": {"bm_default": {"chained": {"annotation": {}}}}},
            "config/datasets.yaml: bm_default.chained.annotation: the annotation track chains on representation, "
            "not on this dataset's track lineage",
        ),
        (
            {"datasets": {"bm_default": {"chained": {"annotations": {}}}}},
            "config/datasets.yaml: bm_default.chained.annotations: unknown track; known: annotation, lineage",
        ),
        (
            {"methods": {"knn": {"variants": {"default": {}, "k50": {"n_neighbors": 50}}}}},
            "config/methods.yaml: knn.variants: a method of the chained track annotation has one variant, default",
        ),
    ],
)
def test_registry_entry_points_fail_at_parse_time_naming_file_and_key(tmp_path, changes, message):
    config = registry_tree(tmp_path, **changes)
    with pytest.raises(ConfigError) as raised:
        load_config(config, "run.yaml", root=tmp_path)
    assert str(raised.value).removeprefix(f"{tmp_path}/").startswith(message)  # the shipped files of root=tmp_path


def test_the_import_graph_has_no_cycle_between_packages():
    """methods → tracks/embeddings, never back: a package that imports another is not imported by it."""
    import ast
    from itertools import permutations

    packages = ("methods", "embeddings", "lineage", "representation", "data", "report")
    imports = {package: set() for package in packages}
    for package in packages:
        for path in (REPO / "src/celldag" / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("celldag."):
                    imported = node.module.split(".")[1]
                    if imported in packages and imported != package:
                        imports[package].add(imported)
    cycles = [(a, b) for a, b in permutations(packages, 2) if b in imports[a] and a in imports[b]]
    assert cycles == []
