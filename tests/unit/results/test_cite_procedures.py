"""``celldag cite`` cites the works behind the metrics too (issue 55): the tracks registry's ``references:`` names, per
track, the procedures and metric families behind its metrics (config/tracks.yaml); every metric the shipped tracks
declare is covered, and a results folder cites a family's works only where one of its metrics has an ok score."""

from __future__ import annotations

import copy
from fnmatch import fnmatchcase

import pandas as pd
import pytest
from conftest import REPO

from celldag.annotation.track import PROCEDURES
from celldag.bibliography import references_of
from celldag.cli import main
from celldag.commands.cite import Cited, scored_metrics, works_and_gaps
from celldag.registry import ConfigError, Registries, apply_schema, load_workflow_config

KANDINSKY = "https://arxiv.org/abs/2502.17264"  # Bairaktari, Wu & Wu, ICML 2025 (docs/annotation.md)
GIBBS = "10.1093/jrsssb/qkaf008"  # Gibbs, Cherian & Candès, JRSS-B 2025 (arXiv 2305.12616)
SCIB = "10.1038/s41592-021-01336-8"  # Luecken et al. 2022, Nature Methods
ROBINSON_FOULDS = "10.1016/0025-5564(81)90043-2"
ESTABROOK = "10.2307/2413326"
# the works each annotation procedure's metrics must cite (its prefix: `<procedure>_coverage` is one of its metrics)
PROCEDURE_WORKS = {
    "kandinsky_augmented": {KANDINSKY, GIBBS},
    "kandinsky_augmented_unrandomised": {KANDINSKY, GIBBS},
    "kandinsky": {KANDINSKY, GIBBS},
    "split_lac": {"10.1080/01621459.2017.1395341", "10.1080/01621459.2017.1307116"},  # Sadinle et al.; Lei et al.
    "split_aps": {"https://proceedings.neurips.cc/paper/2020/hash/244edd7e85dc81602b7615cd705545f5-Abstract.html"},
    "class_conditional": {"https://proceedings.mlr.press/v25/vovk12.html"},  # Vovk 2012, label-conditional
    "class_conditional_pooled": {"https://proceedings.mlr.press/v25/vovk12.html"},
    "mondrian_batch": {"https://proceedings.mlr.press/v25/vovk12.html"},
    "label_shift": {"https://arxiv.org/abs/1904.06019", "https://proceedings.mlr.press/v161/podkopaev21a.html"},
}


@pytest.fixture(scope="module")
def registries() -> Registries:
    return load_workflow_config(str(REPO / "config" / "config.yaml"), str(REPO))[1]


def links(works) -> set[str]:
    return {work.get("doi") or work.get("url") for work in works}


def works_of(registries: Registries, track_id: str, metric: str) -> set[str]:
    """The DOIs and urls of the works the track's families cite for ``metric``."""
    families = registries.tracks[track_id]["references"].values()
    return {
        link
        for spec in families
        if any(fnmatchcase(metric, pattern) for pattern in spec["metrics"])
        for link in links(references_of(spec))
    }


def test_every_metric_of_every_shipped_track_is_covered_by_a_family_with_works(registries):
    """No exemption: every declared metric, diagnostics and counts included, names the work behind it; a new metric
    without a family fails here. And no pattern is dead: each covers a declared metric (a typo would cover none)."""
    assert set(registries.tracks) == {"lineage", "representation", "annotation"}
    for track_id in registries.tracks:
        metrics = list(registries.track(track_id).metrics)
        families = registries.tracks[track_id]["references"]
        uncovered = [metric for metric in metrics if not works_of(registries, track_id, metric)]
        assert not uncovered, f"{track_id}: no `references:` family covers {uncovered} (config/tracks.yaml)"
        for family, spec in families.items():
            for pattern in spec["metrics"]:
                assert any(fnmatchcase(metric, pattern) for metric in metrics), f"{track_id}.{family}: {pattern}"
            works = references_of(spec)
            assert works and all(isinstance(work, dict) and (work.get("doi") or work.get("url")) for work in works)


def test_every_annotation_procedure_cites_its_own_works(registries):
    assert set(PROCEDURE_WORKS) == set(PROCEDURES)  # a new procedure is listed here with the works behind it
    for procedure, expected in PROCEDURE_WORKS.items():
        for scenario in ("", "new_batch_", "no_empty_"):
            cited = works_of(registries, "annotation", f"{procedure}_{scenario}coverage")
            assert expected <= cited, (procedure, scenario, expected - cited)
    assert KANDINSKY not in works_of(registries, "annotation", "split_lac_coverage")
    assert GIBBS not in works_of(registries, "annotation", "mondrian_batch_coverage")
    assert works_of(registries, "representation", "nmi_kmeans") == {SCIB}
    assert works_of(registries, "lineage", "rf") == {ROBINSON_FOULDS}
    assert ESTABROOK in works_of(registries, "lineage", "quartet_dist")


SCORE_ROW = {"method": "knn", "variant": "pca/default", "seed": 0, "higher_is_better": True}


def write_results(folder, rows: list[tuple[str, str, str, float, str]]) -> None:
    """A results folder: one ok kNN-on-PCA run of pbmc68k_batched, and scores of (dataset, track, metric, value,
    status)."""
    folder.mkdir(parents=True)
    scores = pd.DataFrame(rows, columns=["dataset", "track", "metric", "value", "status"])
    scores.assign(**SCORE_ROW).to_parquet(folder / "scores.parquet")
    runs = [("pbmc68k_batched", "knn", "pca/default", "ok"), ("pbmc68k_batched", "pca", "default", "ok")]
    pd.DataFrame(runs, columns=["dataset", "method", "variant", "status"]).assign(seed=0).to_parquet(
        folder / "runs.parquet"
    )


def cite(folder, monkeypatch, capsys, *options: str) -> str:
    monkeypatch.chdir(REPO)
    assert main(["cite", str(folder), *options]) == 0
    return capsys.readouterr().out


def test_cite_lists_kandinsky_and_gibbs_for_ok_annotation_procedure_rows_and_scib_for_representation_ones(
    tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "results" / "default"
    write_results(
        folder,
        [
            ("pbmc68k_batched", "annotation", "kandinsky_augmented_coverage", 0.91, "ok"),
            ("pbmc68k_batched", "annotation", "split_aps_coverage", float("nan"), "ok"),  # NaN: APS not scored
            ("pbmc68k_batched", "annotation", "label_shift_coverage", 0.9, "failed"),  # failed: not cited
            ("pbmc68k_batched", "representation", "nmi_kmeans", 0.7, "ok"),
        ],
    )
    out = cite(folder, monkeypatch, capsys)
    lines = {line.split(". ", 1)[0]: line for line in out.splitlines() if line[:1].isdigit()}
    kandinsky = next(line for line in lines.values() if KANDINSKY in line)
    assert kandinsky.endswith(f"{KANDINSKY} — for annotation metrics kandinsky (kandinsky_*)")
    assert "Bairaktari K, Wu J, Wu ZS. Kandinsky Conformal Prediction" in kandinsky
    assert f"doi:{GIBBS} — for annotation metrics kandinsky (kandinsky_*)" in out
    # Sadinle et al.'s LAC, the score of every procedure but APS
    assert "doi:10.1080/01621459.2017.1395341 — for annotation metrics lac (split_lac_*" in out
    # scIB: the method (expression is not run here) is not, the representation metrics are, cited for it
    assert f"doi:{SCIB} — for representation metrics scib (nmi_*, ari_*, silhouette_*" in out
    assert "Romano" not in out and "Podkopaev" not in out  # NaN and failed rows cite nothing
    assert "metrics with at least one ok score: 1 of annotation, 1 of representation" in out
    assert "Without a reference" not in out
    bib = cite(folder, monkeypatch, capsys, "--format", "bibtex")
    assert "% for: annotation metrics kandinsky (kandinsky_*)\n@inproceedings{bairaktari2025kandinsky," in bib
    assert "% for: annotation metrics kandinsky (kandinsky_*)\n@article{gibbs2025conformal," in bib
    assert f"  doi = {{{GIBBS}}}" in bib and f"  url = {{{KANDINSKY}}}" in bib
    assert "% for: representation metrics scib (" in bib and f"  doi = {{{SCIB}}}" in bib


def test_cite_of_lineage_scores_alone_lists_no_conformal_work(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "results" / "default"
    write_results(
        folder,
        [
            ("bm_default", "lineage", "rf", 0.2, "ok"),
            ("bm_default", "lineage", "delta_quartet_dist", 0.1, "ok"),  # a Δ counts for the metric it reads
            ("pbmc68k_batched", "annotation", "kandinsky_coverage", 0.9, "not_applicable"),
        ],
    )
    out = cite(folder, monkeypatch, capsys)
    assert KANDINSKY not in out and GIBBS not in out and SCIB not in out
    assert f"doi:{ROBINSON_FOULDS} — for lineage metrics splits (" in out
    assert f"doi:{ESTABROOK} — for lineage metrics quartets (" in out
    assert "metrics with at least one ok score: 2 of lineage." in out


def test_scored_metrics_keep_ok_finite_rows_and_read_delta_and_scaled_rows_as_their_metric():
    scores = pd.DataFrame(
        [
            ("lineage", "rf", 0.1, "ok"),
            ("lineage", "scaled_quartet_dist", 0.5, "ok"),
            ("lineage", "qdist_sampled", float("nan"), "ok"),
            ("annotation", "accuracy", 0.8, "failed"),
            ("annotation", "delta_accuracy", 0.1, "ok"),
        ],
        columns=["track", "metric", "value", "status"],
    )
    assert scored_metrics(scores) == {"annotation": ["accuracy"], "lineage": ["quartet_dist", "rf"]}


def test_a_labs_track_without_references_and_a_metric_no_family_covers_are_named():
    work = {"authors": ["Us"], "title": "Our score", "venue": "v", "year": 2024, "doi": "10.1/ours"}
    registries = Registries(
        datasets={},
        methods={},
        tracks={
            "annotation": {"references": {"ours": {"metrics": ["ours_*"], "reference": work}}},
            "lab_track": {"definition": "lab.track:TRACK"},
        },
        origins={"tracks": {"annotation": "config/tracks.yaml", "lab_track": "lab/tracks.yaml"}},
    )
    cited = Cited(
        "results/x",
        {"methods": [], "datasets": [], "embeddings": []},
        planned=False,
        metrics={"annotation": ["ours_a", "ours_b", "theirs"], "lab_track": ["score"], "gone": ["x"]},
    )
    works, gaps, _ = works_and_gaps(cited, registries)
    assert [(w.reference, w.cited_for) for w in works] == [(work, ("annotation metrics ours (ours_*)",))]
    assert gaps == [
        "annotation metrics theirs (config/tracks.yaml): no family of its track's `references:` covers them",
        "track lab_track (lab/tracks.yaml): its entry has no `references:` for its metrics",
        "track gone: not in the registries this config loads",
    ]


def test_a_work_cited_for_different_reasons_drops_its_note():
    noted = {"authors": ["Us"], "title": "Lib", "venue": "v", "year": 2020, "url": "https://x.org", "note": "library"}
    registries = Registries(
        datasets={},
        methods={"pca": {"reference": noted, "license": "MIT"}, "knn": {"reference": noted, "license": "MIT"}},
        tracks={
            "t": {
                "references": {"f1": {"metrics": ["a"], "reference": {k: v for k, v in noted.items() if k != "note"}}}
            }
        },
    )
    entries = {"methods": ["knn", "pca"], "datasets": [], "embeddings": []}
    same = works_and_gaps(Cited("r", entries, planned=False), registries)[0]
    assert same[0].reference == noted  # both methods give the same note: kept
    both = works_and_gaps(Cited("r", entries, planned=False, metrics={"t": ["a"]}), registries)[0]
    assert "note" not in both[0].reference and both[0].cited_for == ("method knn", "method pca", "t metrics f1 (a)")


def test_the_tracks_schema_reads_references_as_the_other_registries_do():
    entry = {"definition": "lab.track:TRACK", "description": "ours"}
    work = {"authors": ["Us"], "title": "t", "venue": "v", "year": 2024, "url": "https://ours.org"}
    apply_schema(
        {"lab_track": entry | {"references": {"ours": {"metrics": ["ours_*"], "reference": work}}}}, "tracks", "l"
    )
    apply_schema(
        {"lab_track": entry | {"references": {"ours": {"metrics": ["x"], "reference": "Us. 2024."}}}}, "tracks", "l"
    )
    for bad in (
        {"ours": {"reference": work}},  # which metrics: required
        {"ours": {"metrics": [], "reference": work}},
        {"ours": {"metrics": ["x"], "reference": work | {"doi": "https://doi.org/10.1/x"}}},
        {"Ours": {"metrics": ["x"], "reference": work}},
        {"ours": {"metrics": ["x"], "reference": work, "extra": 1}},
    ):
        with pytest.raises(ConfigError):
            apply_schema({"lab_track": copy.deepcopy(entry) | {"references": bad}}, "tracks", "lab/tracks.yaml")
