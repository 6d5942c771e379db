"""``celldag cite`` (issue 42): the entries with an ok run in a results folder, or the plan's, and their works as a
reference list or BibTeX (celldag.commands.cite, celldag.bibliography)."""

from __future__ import annotations

import pandas as pd
from conftest import REPO

from celldag import release
from celldag.bibliography import bibtex, bibtex_key, format_reference, reference_id
from celldag.cli import main
from celldag.commands.cite import Cited, works_and_gaps
from celldag.registry import Registries

KUANG = {
    "authors": ["Kuang, Da", "Qiu, Guanwen", "Kim, Junhyong"],
    "venue": "ICML, PMLR 267",
    "year": 2025,
    "title": "Reconstructing Cell Lineage Trees from Phenotypic Features with Metric Learning",
    "type": "inproceedings",
    "url": "https://proceedings.mlr.press/v267/kuang25b.html",
}
MANY = {
    "authors": ["Luecken, Malte D.", "Büttner, Maren", "others"],
    "title": "Benchmarking atlas-level data integration in single-cell genomics.",
    "venue": "Nature Methods",
    "year": 2022,
    "doi": "10.1038/s41592-021-01336-8",
    "note": "scIB",
}


def test_a_reference_line_has_initials_et_al_for_a_cut_list_and_the_doi_or_url():
    assert format_reference(KUANG) == (
        "Kuang D, Qiu G, Kim J. Reconstructing Cell Lineage Trees from Phenotypic Features with Metric Learning. "
        "ICML, PMLR 267 (2025). https://proceedings.mlr.press/v267/kuang25b.html"
    )
    assert format_reference(MANY) == (
        "Luecken MD, Büttner M, et al. Benchmarking atlas-level data integration in single-cell genomics. "
        "Nature Methods (2022). doi:10.1038/s41592-021-01336-8 [scIB]"
    )
    assert format_reference("Lab et al. Our atlas. 2024.") == "Lab et al. Our atlas. 2024."  # a lab's free text


def test_bibtex_entries_keep_the_title_capitals_and_get_distinct_ascii_keys():
    taken: set[str] = set()
    conde = {
        "authors": ["Domínguez Conde, C."],
        "title": "Cross-tissue immune cell analysis",
        "venue": "Science",
        "year": 2022,
    }
    keys = [bibtex_key(KUANG, taken), bibtex_key(KUANG, taken), bibtex_key(conde, taken)]
    assert keys == ["kuang2025reconstructing", "kuang2025reconstructinga", "dominguezconde2022cross"]
    assert bibtex(MANY, "luecken2022benchmarking") == (
        "@article{luecken2022benchmarking,\n  author = {Luecken, Malte D. and Büttner, Maren and others},\n"
        "  title = {{Benchmarking atlas-level data integration in single-cell genomics.}},\n"
        "  journal = {Nature Methods},\n  year = {2022},\n  doi = {10.1038/s41592-021-01336-8},\n  note = {scIB}\n}"
    )
    assert bibtex(KUANG, "k").splitlines()[0] == "@inproceedings{k," and "  booktitle = {ICML, PMLR 267}," in bibtex(
        KUANG, "k"
    )
    assert reference_id(dict(MANY, doi="10.1038/S41592-021-01336-8")) == reference_id(MANY)  # DOIs ignore case


def test_a_work_cited_by_several_entries_is_listed_once_and_an_entry_without_one_is_named():
    registries = Registries(
        datasets={"bm": {"reference": KUANG, "license": "CC0-1.0"}, "lab_atlas": {"license": "internal"}},
        methods={"celltreeqm": {"reference": [KUANG, MANY], "license": "MIT"}, "lab_net": {"reference": "Us. 2024."}},
        origins={"datasets": {"lab_atlas": "lab/datasets.yaml"}},
    )
    cited = Cited(
        "results/x",
        {"methods": ["celltreeqm", "lab_net", "gone"], "datasets": ["bm", "lab_atlas"], "embeddings": []},
        planned=False,
    )
    works, gaps, licenses = works_and_gaps(cited, registries)
    assert [(work.reference, work.cited_for) for work in works] == [
        (KUANG, ("method celltreeqm", "dataset bm")),
        (MANY, ("method celltreeqm",)),
        ("Us. 2024.", ("method lab_net",)),
    ]
    assert gaps == [
        "method gone: not in the registries this config loads",
        "dataset lab_atlas (lab/datasets.yaml): its entry has no `reference:`",
    ]
    assert licenses == [
        ("method celltreeqm", "MIT"),
        ("method lab_net", "not stated"),
        ("dataset bm", "CC0-1.0"),
        ("dataset lab_atlas", "internal"),
    ]


SCORE_ROW = {"dataset": "bm_default", "track": "lineage", "method": "nj_raw", "variant": "default", "seed": 0}


def write_results(folder, runs: list[tuple[str, str, str, str]], scores: list[dict] | None = None) -> None:
    """runs.parquet of ``runs`` (dataset, method, variant, status) and scores.parquet of ``scores`` (each a row's
    track, metric, value and status over ``SCORE_ROW``; default: one ok lineage rf)."""
    folder.mkdir(parents=True)
    rows = scores if scores is not None else [{"metric": "rf", "value": 0.1, "status": "ok"}]
    pd.DataFrame([SCORE_ROW | {"higher_is_better": False} | row for row in rows]).to_parquet(folder / "scores.parquet")
    pd.DataFrame(runs, columns=["dataset", "method", "variant", "status"]).assign(seed=0).to_parquet(
        folder / "runs.parquet"
    )


def test_cite_results_lists_exactly_the_entries_with_an_ok_run(tmp_path, monkeypatch, capsys):
    write_results(
        tmp_path / "results" / "default",
        [
            ("bm_default", "nj_raw", "default", "ok"),
            ("bm_default", "bonsai", "default", "failed"),  # no ok run: Bonsai's paper is not cited
            ("cengen_neurons", "celltreeqm", "supervised", "not_applicable"),  # nor CeNGEN's, nor CellTreeQM's method
            ("pbmc68k_batched", "scilama", "text", "ok"),  # reads go_text
            ("pbmc68k_batched", "knn", "scilama/text", "ok"),  # a chained run: its variant is its upstream
        ],
    )
    monkeypatch.chdir(REPO)
    assert main(["cite", str(tmp_path / "results" / "default")]) == 0
    out = capsys.readouterr().out
    named = {
        line.split(" | ")[0].lstrip("| ")
        for line in out.splitlines()
        if line.startswith("| ") and "license" not in line
    }
    assert named == {
        "method nj_raw",
        "method scilama",
        "method knn",
        "dataset bm_default",
        "dataset pbmc68k_batched",
        "gene embedding go_text",
    }
    assert f"1. The celldag developers ({release.RELEASE_DATE[:4]}). {release.TITLE}. Software, version " in out
    assert "(planned)" not in out
    assert "doi:10.1093/oxfordjournals.molbev.a040454 — for method nj_raw" in out  # Saitou & Nei
    # the one ok score, lineage's rf: Robinson & Foulds, for the family that covers it (and no quartet work)
    assert "doi:10.1016/0025-5564(81)90043-2 — for lineage metrics splits (rf, rf_unknown, split_recovery" in out
    assert "10.2307/2413326" not in out
    assert "— for dataset bm_default" in out  # CellTreeQM's paper, for its benchmark only
    assert "10.1038/s41587-026-03220-2" not in out and "10.1016/j.cell.2021.06.023" not in out
    assert "Without a reference" not in out  # every shipped entry has one


def test_cite_without_results_marks_what_the_plan_selects_planned_and_bibtex_holds_celldag_first(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert main(["cite", "--format", "bibtex"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("% the plan of config/config.yaml")
    assert out.index("@software{celldag,") < out.index("@article{") < out.index("@inproceedings{kuang2025")
    assert (
        "% for: method celltreeqm (planned), method quadruplet (planned), method triplet (planned), dataset "
        "bm_default (planned), lineage metrics celltreeqm (qdist_sampled, qdist_known*, k_qdist*, u_qdist*; planned)"
        "\n@inproceedings{kuang2025reconstructing," in out
    )
    assert "method bonsai (planned)" in out and "dataset cengen_neurons (planned)" in out


def test_cite_of_a_folder_without_runs_table_says_so(tmp_path, monkeypatch, capsys):
    (tmp_path / "r").mkdir()
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "r" / "scores.parquet")
    monkeypatch.chdir(REPO)
    assert main(["cite", str(tmp_path / "r")]) == 2
    assert "runs.parquet: not found" in capsys.readouterr().err
