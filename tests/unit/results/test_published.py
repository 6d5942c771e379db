"""The papers' published tables (config/published/, celldag.results.published): the format's one-line errors, the
verdicts on a small table of the test's own, every row of the transcription encoded, the report's section
for the paper preset and `celldag compare --published`.

The transcription: tests/data/published/published_tables.csv (one row per published number; its README).
"""

from __future__ import annotations

import copy
import csv
import re
import shutil
from collections import Counter

import pandas as pd
import pytest
import yaml
from conftest import REPO, TRACKS, copy_workflow, run_snakemake

from celldag.cli import compare_published
from celldag.errors import InputError
from celldag.plan import make_plan
from celldag.registry import apply_schema, load_workflow_config
from celldag.report import html
from celldag.results import published

TRANSCRIPTION = REPO / "tests/data/published/published_tables.csv"
T_975_2 = 4.302652729749462  # Student's t, 97.5 % quantile, 2 degrees of freedom (three seeds)

# A paper of the test's own: a lineage table on bm_default and a representation one on pbmc68k_batched
SMALL = {
    "paper": "Tiny",
    "citation": "A. Author. A tiny paper. 2025.",
    "url": "https://example.org/tiny",
    "tables": {
        "Table A": {
            "source": "the test",
            "dataset": "BM default",
            "setting": "supervised",
            "reading": "exact",
            "spread_kind": "s.d. over 3 seeds",
            "columns": {"RF": "lower_is_better", "dRF": "higher_is_better"},
            "rows": [
                {"method": "NJ", "values": {"RF": {"value": 0.30, "spread": 0.05}}},
                {"method": "UPGMA", "values": {"RF": {"value": 0.60, "spread": 0.01}, "dRF": 0.1}},
            ],
            "mapping": {
                "dataset": {"celldag": "bm_default"},
                "methods": {"NJ": {"celldag": "nj_raw/default"}, "UPGMA": {"celldag": "upgma_raw/default"}},
                "metrics": {"RF": {"celldag": "rf"}, "dRF": {"celldag": "delta_rf", "baseline": "nj_raw"}},
            },
        },
        "Table B": {
            "source": "the test",
            "dataset": "PBMC",
            "setting": "integration",
            "reading": "exact",
            "columns": {"ARI": "higher_is_better"},
            "rows": [
                {"method": "PCA", "values": {"ARI": 0.55}},
                {"method": "Harmony", "values": {"ARI": 0.5}},
                {"method": "scGPT", "values": {"ARI": 0.4}},
            ],
            "mapping": {
                "dataset": {"celldag": "pbmc68k_batched"},
                "methods": {
                    "PCA": {"celldag": "pca/default"},
                    "Harmony": {"celldag": "harmony/default"},
                    "scGPT": {"celldag": None, "reason": "not a celldag method"},
                },
                "metrics": {"ARI": {"celldag": "ari_leiden"}},
            },
        },
    },
}


def write_paper(folder, data, name="tiny.yaml"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return folder / name


def score_rows(dataset, track, method, metric, values, higher_is_better, status="ok"):
    return [
        {
            "dataset": dataset,
            "track": track,
            "method": method,
            "variant": "default",
            "seed": seed,
            "metric": metric,
            "value": value,
            "higher_is_better": higher_is_better,
            "status": status,
        }
        for seed, value in enumerate(values)
    ]


SCORES = pd.DataFrame(
    [
        *score_rows("bm_default", "lineage", "nj_raw", "rf", [0.32, 0.34, 0.36], False),  # mean 0.34: |Δ| 0.04 ≤ 0.05
        *score_rows(
            "bm_default", "lineage", "upgma_raw", "rf", [0.40, 0.42, 0.44], False
        ),  # 0.42: 0.18 off, 0.60 outside
        *score_rows(
            "pbmc68k_batched", "representation", "pca", "ari_leiden", [0.50, 0.52, 0.54], True
        ),  # [0.470, 0.570]
    ]
)


def small_verdicts(tmp_path, registries, **evaluation):
    config = apply_schema(
        {
            "datasets": ["bm_default", "pbmc68k_batched"],
            "methods": ["nj_raw", "upgma_raw", "pca"],
            "evaluation": evaluation,
        },
        "config",
        "config.yaml",
    )
    tables = published.load_published(write_paper(tmp_path / "published", SMALL).parent, registries)
    context = published.context_of(config, make_plan(config, registries), registries)
    return {(v.table.table, v.number.method, v.number.metric): v for v in published.verdicts(tables, SCORES, context)}


def test_verdicts_hold_celldag_means_and_intervals_against_the_published_numbers(tmp_path, registries):
    found = small_verdicts(tmp_path, registries)
    inside = found["Table A", "NJ", "RF"]
    assert inside.verdict == published.INSIDE_SPREAD
    assert (inside.mean, inside.n) == (pytest.approx(0.34), 3)
    half = T_975_2 * 0.02 / 3**0.5  # sd 0.02 over three seeds
    assert (inside.low, inside.high) == (pytest.approx(0.34 - half), pytest.approx(0.34 + half))
    outside = found["Table A", "UPGMA", "RF"]
    assert outside.verdict == published.NEITHER and outside.mean == pytest.approx(0.42)
    assert outside.high == pytest.approx(0.42 + half) and outside.high < 0.60
    interval = found["Table B", "PCA", "ARI"]  # no published spread: 0.55 inside [0.470, 0.570]
    assert interval.verdict == published.INSIDE_INTERVAL
    assert (interval.mean, interval.low, interval.high) == (
        pytest.approx(0.52),
        pytest.approx(0.52 - half),
        pytest.approx(0.52 + half),
    )
    unmapped = found["Table B", "scGPT", "ARI"]
    assert unmapped.text == "not comparable (not a celldag method)" and unmapped.n == 0
    not_run = found["Table B", "Harmony", "ARI"]
    assert not_run.text == "not computed (harmony/default is not run by this config)"
    no_delta = found["Table A", "UPGMA", "dRF"]  # the Δ compares (baseline nj_raw), but these scores hold no Δ row
    assert no_delta.text == "not computed (its runs have no delta_rf score)"


def test_a_delta_against_another_baseline_is_not_comparable(tmp_path, registries):
    found = small_verdicts(tmp_path, registries, delta_baseline="upgma_raw")
    assert found["Table A", "UPGMA", "dRF"].text == (
        "not comparable (Δ against upgma_raw here (evaluation.delta_baseline), against nj_raw in the paper)"
    )


def test_one_seed_gives_no_interval_and_a_figure_reading_widens_the_spread(tmp_path, registries):
    one_seed = SCORES[SCORES["seed"] == 0]  # nj_raw rf 0.32: |Δ| 0.02; pca ari 0.50: 0.05 below 0.55
    config = apply_schema(
        {"datasets": ["bm_default", "pbmc68k_batched"], "methods": ["nj_raw", "upgma_raw", "pca"]},
        "config",
        "config.yaml",
    )
    context = published.context_of(config, make_plan(config, registries), registries)
    tables = published.load_published(write_paper(tmp_path / "exact", SMALL).parent, registries)
    found = {(v.number.method, v.number.metric): v for v in published.verdicts(tables, one_seed, context)}
    assert found["PCA", "ARI"].verdict == published.NEITHER  # no spread, no interval
    assert published.celldag_cell(found["PCA", "ARI"]) == "0.500 (1 seed: no interval)"
    read = copy.deepcopy(SMALL)
    read["tables"]["Table A"] |= {"reading": "figure-approx", "precision": 0.01}
    read["tables"]["Table A"]["rows"][1]["values"]["RF"] = {"value": 0.35, "spread": 0.01}  # upgma 0.40: 0.05 off
    tables = published.load_published(write_paper(tmp_path / "read", read).parent, registries)
    table = tables[0]
    assert table.tolerance(table.numbers[1]) == pytest.approx(0.03)  # 0.01 + 0.01 on the value + 0.01 on the spread
    found = {(v.number.method, v.number.metric): v for v in published.verdicts(tables, one_seed, context)}
    assert found["UPGMA", "RF"].verdict == published.NEITHER  # 0.05 > 0.03
    read["tables"]["Table A"]["rows"][1]["values"]["RF"] = {"value": 0.38, "spread": 0.0}  # 0.02 off: within 2 × 0.01
    tables = published.load_published(write_paper(tmp_path / "read", read).parent, registries)
    found = {(v.number.method, v.number.metric): v for v in published.verdicts(tables, one_seed, context)}
    assert found["UPGMA", "RF"].verdict == published.INSIDE_SPREAD


def broken(edit):
    data = copy.deepcopy(SMALL)
    edit(data["tables"]["Table A"])
    return data


def set_in(path, value):
    def edit(table):
        *parents, last = path
        node = table
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


BAD = {
    "unknown dataset": (
        set_in(["mapping", "dataset", "celldag"], "bm_nope"),
        "tables.Table A.mapping.dataset: unknown dataset id 'bm_nope'",
    ),
    "unknown variant": (
        set_in(["mapping", "methods", "NJ", "celldag"], "nj_raw/fast"),
        "tables.Table A.mapping.methods.NJ: 'nj_raw/fast': name a variant of nj_raw as method/variant",
    ),
    "no variant": (
        set_in(["mapping", "methods", "NJ", "celldag"], "nj_raw"),
        "tables.Table A.mapping.methods.NJ: 'nj_raw': name a variant of nj_raw as method/variant",
    ),
    "unknown method": (
        set_in(["mapping", "methods", "NJ", "celldag"], "fastme/default"),
        "tables.Table A.mapping.methods.NJ: unknown method id 'fastme'",
    ),
    "another track's method": (
        set_in(["mapping", "methods", "NJ", "celldag"], "pca/default"),
        "tables.Table A.mapping.methods.NJ: pca is a representation method, the dataset a lineage one",
    ),
    "unknown metric": (
        set_in(["mapping", "metrics", "RF", "celldag"], "ari_leiden"),
        "tables.Table A.mapping.metrics.RF: unknown metric 'ari_leiden' of the lineage track",
    ),
    "direction": (
        set_in(["columns", "RF"], "higher_is_better"),
        "tables.Table A.mapping.metrics.RF: rf is lower_is_better, the column higher_is_better",
    ),
    "Δ without baseline": (
        set_in(["mapping", "metrics", "dRF"], {"celldag": "delta_rf"}),
        "tables.Table A.mapping.metrics.dRF: delta_rf is a Δ: name the method the paper's Δ is against",
    ),
    "unmapped method": (
        lambda table: table["mapping"]["methods"].pop("NJ"),
        "tables.Table A.mapping.methods: no mapping for the method 'NJ'",
    ),
    "mapping typo": (
        set_in(["mapping", "metrics", "dRFF"], {"celldag": None, "reason": "typo"}),
        "tables.Table A.mapping.metrics.dRFF: no column of the table is called 'dRFF'",
    ),
    "undeclared column": (
        set_in(["rows", 0, "values", "QDist"], 0.2),
        "tables.Table A.rows.0.values.QDist: not a column of the table (columns: RF, dRF)",
    ),
    "row twice": (
        lambda table: table["rows"].append(copy.deepcopy(table["rows"][0])),
        "tables.Table A.rows.2: NJ has a row already",
    ),
    "row settings unmapped": (
        set_in(["rows", 0, "setting"], "level 1"),
        "tables.Table A.mapping.settings: no mapping for the row setting 'level 1'",
    ),
    "none without a reason": (
        set_in(["mapping", "methods", "NJ"], {"celldag": None}),
        "tables.Table A.mapping.methods.NJ: 'reason' is a required property",
    ),
    "not comparable without a reason": (
        set_in(["mapping", "metrics", "RF"], {"celldag": "rf", "comparable": False}),
        "tables.Table A.mapping.metrics.RF: 'reason' is a required property",
    ),
    "figure reading without precision": (
        set_in(["reading"], "figure-approx"),
        "tables.Table A: 'precision' is a required property",
    ),
    "negative spread": (
        set_in(["rows", 0, "values", "RF"], {"value": 0.3, "spread": -0.1}),
        "tables.Table A.rows.0.values.RF.spread: -0.1 is less than the minimum of 0",
    ),
    "a value as text": (
        set_in(["rows", 0, "values", "RF"], "0.3"),
        "tables.Table A.rows.0.values.RF: '0.3' is not of type 'number', 'object'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_table_gets_one_line_naming_the_file_and_the_field(case, tmp_path, registries):
    edit, expected = BAD[case]
    path = write_paper(tmp_path, broken(edit))
    with pytest.raises(InputError) as error:
        published.load_published(tmp_path, registries)
    message = str(error.value)
    assert message.startswith(f"{path}: {expected}") and "\n" not in message


def test_a_table_defined_in_two_files_is_refused(tmp_path, registries):
    write_paper(tmp_path, SMALL, "a.yaml")
    second = write_paper(tmp_path, SMALL, "b.yaml")
    with pytest.raises(InputError, match=f"^{re.escape(str(second))}: tables.Table A: Tiny Table A is defined twice"):
        published.load_published(tmp_path, registries)


def test_the_docs_example_is_a_valid_table(tmp_path, registries):
    example = re.search(r"```yaml\n(.*?)```", (REPO / "docs/published.md").read_text(), re.S).group(1)
    (tmp_path / "mine.yaml").write_text(example.replace("mymethod/default", "pca/default"))  # a method of the registry
    (table,) = published.load_published(tmp_path, registries)
    assert [(n.method, n.setting, n.metric, n.spread) for n in table.numbers][-1] == ("MyMethod", "K=20", "ARI", None)
    assert table.numbers[-1].in_setting.why_not == "celldag's mymethod runs K=40"


# ---------------------------------------------------------------- the shipped tables against the transcription


@pytest.fixture(scope="module")
def shipped():
    _, registries = load_workflow_config(str(REPO / "config/presets/paper.yaml"), str(REPO))
    return published.load_published(REPO / "config/published", registries)


def test_every_row_of_the_transcription_is_encoded_with_its_value_and_provenance(shipped):
    with open(TRANSCRIPTION, newline="") as handle:
        rows = list(csv.DictReader(handle))
    numbers = {(t.paper, t.table, n.method, n.setting, n.metric): (t, n) for t in shipped for n in t.numbers}
    assert len(rows) == 315 and len(numbers) == sum(len(t.numbers) for t in shipped)  # no number twice
    label = {row["table"]: row["table"].split(" (")[0] for row in rows}  # "Table S9 (caption missing …)" → "Table S9"
    assert Counter((row["paper"], label[row["table"]]) for row in rows) == Counter(
        {(t.paper, t.table): len(t.numbers) for t in shipped}
    )
    for row in rows:
        table, number = numbers[row["paper"], label[row["table"]], row["method"], row["setting"], row["metric"]]
        assert number.value == float(row["value"]), row
        assert number.spread == (float(row["spread"]) if row["spread"] else None), row
        assert number.higher_is_better == (row["higher_is_better"] == "yes")
        assert (table.source, table.dataset) == (row["source"], row["dataset"])
        assert (table.spread_kind or "", table.n_runs or "") == (row["spread_kind"], row["n_runs"])
        assert table.reading == "exact" if row["reading"] == "exact" else f"±{table.precision:g}" in row["reading"]
        assert not table.offline_reproducible and row["offline_reproducible"].startswith("no")
        for note in filter(None, [row["notes"], row["table"][len(label[row["table"]]) + 2 : -1]]):
            assert note in table.notes, (row["table"], note)


def test_the_pancreas_tables_map_to_tran2020_and_each_mapping_says_why_not(shipped):
    by_table = {(t.paper, t.table): t for t in shipped}
    assert {key for key, t in by_table.items() if t.dataset_id == "tran2020_pancreas"} == {
        ("sciLaMA", name) for name in ("Table 1", "Table 2", "Table S4", "Table S5")
    }
    context = published.Context((), (), "nj_raw")
    comparable = Counter(t.table for t in shipped for n in t.numbers if not published.incomparable(t, n, context))
    # Table 1: s.i., scVI-batch, scVI-raw × 5 metrics; S4: GenePT, s.i. × 5; S5: the same 4 methods' cLISI;
    # S7: GenePT, s.i. × DB, CH (GenePT-w: another gene table; the figure's dataset is unnamed)
    assert comparable == {"Table 1": 15, "Table S4": 10, "Table S5": 4, "Table S7": 4}
    for table in shipped:
        for number in table.numbers:
            assert number.run.celldag or number.run.reason and number.score.celldag or number.score.reason


# ---------------------------------------------------------------- the report and `celldag compare --published`


def test_the_paper_presets_index_page_lists_every_mapped_number_of_its_datasets(shipped, monkeypatch):
    monkeypatch.chdir(REPO)
    config, registries = load_workflow_config("config/presets/paper.yaml", ".")
    plan = make_plan(config, registries)
    mapped = [t for t in shipped if t.dataset_id in config["datasets"]]
    assert mapped, "the paper preset lists the datasets of sciLaMA's Tables 1, 2, S4, S5"
    metrics = {n.score.celldag for t in mapped for n in t.numbers if n.score.celldag}
    scores = pd.DataFrame(
        [
            {
                "dataset": run.dataset,
                "track": "representation",
                "method": run.method,
                "variant": run.variant,
                "seed": run.seed,
                "metric": metric,
                "value": 0.5 + 0.01 * run.seed,
                "higher_is_better": True,
                "status": "failed" if run.method == "scvi" and run.variant == "no_batch" else "ok",
            }
            for run in plan.runs
            if run.dataset == "tran2020_pancreas"
            for metric in sorted(metrics)
        ]
    )
    context = published.context_of(config, plan, registries, check_downloads=False)
    runs = pd.DataFrame(columns=["dataset", "method", "variant", "seed", "status", "status_reason", "record"])
    page = html.index_page(
        scores=scores,
        runs=runs,
        tracks=TRACKS,
        figures=[],
        index_path="results/paper/index.html",
        kinds={},
        published=published.report_blocks(mapped, scores, context),
    )
    section = page[page.index('<h2 id="published">') : page.index('id="not-ok"')]
    assert '<a href="#published">published vs reproduced</a>' in page
    assert section.count("<tr><td>") == sum(len(t.numbers) for t in mapped) == 40 + 3 + 35 + 13
    assert [f"<h3>sciLaMA {t.table}</h3>" in section for t in mapped] == [True] * len(mapped)
    assert "Table S7" not in section and "CellTreeQM" not in section  # datasets not in the preset: compare lists them
    si = "<tr><td>sciLaMA (s.i.)</td><td>ARI ↑</td><td>0.436</td><td>scilama/self_informed · ari_leiden</td>"
    assert f"{si}<td>0.520 [0.500, 0.540] (5 seeds)</td><td>+0.084</td><td>neither</td></tr>" in section
    assert "<td>not computed (no ok runs: 5 failed)</td>" in section  # scVI-raw
    assert "<td>not comparable (not a celldag method)</td>" in section  # scGPT
    assert "not comparable (celldag&#39;s genept_w averages the go_text vectors" in section


def test_compare_published_writes_every_table_and_exits_1_on_a_number_that_does_not_reproduce(
    tmp_path, monkeypatch, capsys
):
    workflow = tmp_path / "workflow"
    shutil.copytree(REPO / "config", workflow / "config")
    write_paper(workflow / "config/published", SMALL)  # a lab's own table beside the shipped ones
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text(
        yaml.safe_dump(
            {"name": "tiny", "datasets": ["bm_default", "pbmc68k_batched"], "methods": ["nj_raw", "upgma_raw", "pca"]}
        )
    )
    with pytest.raises(InputError, match=r"^results/tiny/scores.parquet: no scores table"):
        compare_published(None, "run.yaml", str(workflow), None, None)
    (tmp_path / "results/tiny").mkdir(parents=True)
    SCORES.to_parquet(tmp_path / "results/tiny/scores.parquet")
    assert compare_published(None, "run.yaml", str(workflow), None, None) == 1  # UPGMA's RF: neither
    printed = capsys.readouterr().out
    # 315 shipped + 6 of the lab's; 33 shipped comparable ones on tran2020_pancreas and pbmc3k, not in this config
    assert printed.splitlines()[:4] == [
        "321 published numbers: 1 inside the published spread, 1 inside celldag's interval, 1 neither, "
        "283 not comparable, 35 not computed",
        "not computed, dataset not in this config: 33",
        "not computed, its runs have no delta_rf score: 1",
        "not computed, harmony/default is not run by this config: 1",
    ]
    text = (tmp_path / "results/tiny/published.md").read_text()
    assert "## Tiny Table A" in text and "## CellTreeQM project-page figure results_1.png" in text
    assert (
        "| UPGMA | RF ↓ | 0.6 ± 0.01 | upgma_raw/default · rf | 0.420 [0.370, 0.470] (3 seeds) | -0.180 | neither |"
        in text
    )
    assert "<h2>sciLaMA Table 1</h2>" in (tmp_path / "results/tiny/published.html").read_text()


@pytest.mark.e2e
def test_a_run_shows_a_labs_table_and_an_edit_of_it_rebuilds_the_page(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    lab = {**SMALL, "tables": {"Table A": copy.deepcopy(SMALL["tables"]["Table A"])}}
    lab["tables"]["Table A"]["rows"].pop()  # NJ's RF only
    lab["tables"]["Table A"]["mapping"]["methods"].pop("UPGMA")
    paper = write_paper(workdir / "config/published", lab)
    (workdir / "tiny.yaml").write_text("name: tiny\ndatasets: [bm_default]\nmethods: [nj_raw]\nseeds: [0]\n")
    run_snakemake(workdir, "--configfile", "tiny.yaml")
    page = (workdir / "results/tiny/index.html").read_text()
    section = page[page.index('<h2 id="published">') : page.index('id="not-ok"')]
    assert "<h3>Tiny Table A</h3>" in section and "sciLaMA" not in section  # the shipped tables map no dataset of it
    scores = pd.read_parquet(workdir / "results/tiny/scores.parquet")
    rf = scores.loc[(scores["method"] == "nj_raw") & (scores["metric"] == "rf"), "value"].item()
    assert f"<td>nj_raw/default · rf</td><td>{rf:.3f} (1 seed: no interval)</td><td>{rf - 0.3:+.3f}</td>" in section
    paper.write_text(paper.read_text().replace("value: 0.3", "value: 0.31"))
    listed = run_snakemake(workdir, "-n", "--configfile", "tiny.yaml").stdout
    job = listed[listed.index("rule report_html:") :]
    assert f"reason: Updated input files: {paper}" in job
    assert "rule aggregate:" not in listed  # only the page


# ---------------------------------------------------------------- a lab's copy of a shipped dataset (stands_for)

DIFFERS = "700 cells of our own, labels from our annotation"


def with_copy(registries, stands_for=None):
    """The registries with lab_pbmc, a lab's entry standing for pbmc68k_batched unless told otherwise."""
    registries.datasets["lab_pbmc"] = copy.deepcopy(registries.datasets["pbmc68k_batched"]) | {
        "stands_for": stands_for or {"dataset": "pbmc68k_batched", "differs": DIFFERS}
    }
    return registries


def test_a_labs_copy_is_held_against_the_tables_of_the_dataset_it_stands_for(tmp_path, registries):
    with_copy(registries)
    config = apply_schema(
        {"datasets": ["bm_default", "lab_pbmc"], "methods": ["nj_raw", "upgma_raw", "pca"]}, "config", "config.yaml"
    )
    tables = published.load_published(write_paper(tmp_path / "published", SMALL).parent, registries)
    context = published.context_of(config, make_plan(config, registries), registries)
    scores = SCORES.replace({"dataset": {"pbmc68k_batched": "lab_pbmc"}})
    found = {(v.table.table, v.number.method): v for v in published.verdicts(tables, scores, context)}
    copy_line = f"on lab_pbmc, a lab's copy of pbmc68k_batched: {DIFFERS}"
    pca = found["Table B", "PCA"]
    assert pca.verdict == published.INSIDE_INTERVAL and pca.mean == pytest.approx(0.52)
    assert pca.text == f"inside celldag's interval; {copy_line}"
    assert found["Table B", "Harmony"].text == f"not computed (harmony/default is not run by this config); {copy_line}"
    assert found["Table A", "NJ"].text == published.INSIDE_SPREAD  # the shipped dataset itself: no copy line
    assert published.summary(list(found.values()))[-1] == f"held {copy_line}"
    # the report's section shows the copy's tables; the shipped dataset itself, where a config has it, comes first
    assert any(
        getattr(block, "text", "") == "Tiny Table B" for block in published.report_blocks(tables, scores, context)
    )
    both = published.Context(("pbmc68k_batched", "lab_pbmc"), (), "nj_raw", (), context.stand_ins)
    assert both.scored_as("pbmc68k_batched") == ("pbmc68k_batched", "")


def test_two_copies_of_one_dataset_in_a_config_are_refused(registries):
    with_copy(registries)
    registries.datasets["lab_pbmc_2"] = copy.deepcopy(registries.datasets["lab_pbmc"])
    config = apply_schema({"datasets": ["lab_pbmc", "lab_pbmc_2"], "methods": ["pca"]}, "config", "config.yaml")
    with pytest.raises(
        InputError, match="^datasets lab_pbmc and lab_pbmc_2 of the config both stand for pbmc68k_batched"
    ):
        published.context_of(config, make_plan(config, registries), registries)


@pytest.mark.parametrize(
    ("stands_for", "message"),
    [
        ({"dataset": "pbmc3k_typo", "differs": "x"}, "lab_pbmc.stands_for.dataset: unknown dataset id 'pbmc3k_typo'"),
        ({"dataset": "lab_pbmc", "differs": "x"}, "lab_pbmc.stands_for.dataset: a dataset cannot stand for itself"),
        ({"dataset": "bm_default", "differs": "x"}, "bm_default is a lineage dataset, this one a representation one"),
    ],
)
def test_a_copy_must_stand_for_a_dataset_of_its_track(stands_for, message, registries):
    from celldag.registry import ConfigError, check_consistency

    with pytest.raises(ConfigError, match=re.escape(message)):
        check_consistency(with_copy(registries, stands_for))


def test_standing_for_a_dataset_changes_no_prepared_file_of_the_copy(registries):
    from celldag.plan import data_key

    entry = registries.datasets["pbmc68k_batched"]
    assert data_key(with_copy(registries).datasets["lab_pbmc"]) == data_key(entry)


@pytest.mark.e2e
def test_a_local_copy_of_pbmc3k_gets_verdicts_for_its_published_rows_with_what_differs(tmp_path, monkeypatch, capsys):
    """A lab's local h5ad declared as standing for pbmc3k (made up here from scanpy's bundled pbmc68k cells), run with
    scilama/self_informed: `celldag compare --published` holds Table S7's self-informed row against it."""
    import scanpy as sc

    from celldag.cli import main

    workdir = copy_workflow(tmp_path / "wf")
    cells = sc.datasets.pbmc68k_reduced().raw.to_adata()  # log-normalised, 765 genes, bulk_labels
    cells.write_h5ad(workdir / "our_pbmc.h5ad")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    differs = "700 cells and 765 genes of pbmc68k, its bulk_labels, log-normalised values (no counts)"
    datasets["our_pbmc3k"] = {
        "track": "representation",
        "source": "local",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "description": "our copy",
        "license": "internal",
        "files": [{"name": "our_pbmc.h5ad", "path": "our_pbmc.h5ad"}],
        "params": {
            "file": "our_pbmc.h5ad",
            "label_key": "bulk_labels",
            "batch_key": None,
            "counts_layer": None,
            "lognorm_layer": "X",
            "n_top_genes": 500,
        },
        "markers": datasets["pbmc3k"]["markers"],
        "stands_for": {"dataset": "pbmc3k", "differs": differs},
    }
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    (workdir / "ours.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "ours",
                "datasets": ["our_pbmc3k"],
                "methods": ["scilama/self_informed"],
                "seeds": [0, 1],
                "method_params": {
                    "scilama": {
                        "hidden_dims": [32, 16],
                        "gene_hidden_dims": [32, 16],
                        "latent_dim": 8,
                        "max_epochs": 6,
                        "kl_warmup_epochs": 2,
                        "kl_ramp_epochs": 2,
                        "patience": 3,
                    }
                },
            }
        )
    )
    run_snakemake(workdir, "--configfile", "ours.yaml")
    monkeypatch.chdir(workdir)
    main(["compare", "--published", "--configfile", "ours.yaml"])
    printed = capsys.readouterr().out
    assert f"held on our_pbmc3k, a lab's copy of pbmc3k: {differs}" in printed.splitlines()
    text = (workdir / "results/ours/published.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| sciLaMA (s.i.) | DaviesBouldin ↓ | 0.977 |"))
    assert "scilama/self_informed · marker_db" in row and "(2 seeds)" in row
    assert row.rstrip(" |").endswith(f"; on our_pbmc3k, a lab's copy of pbmc3k: {differs}")
    assert any(verdict in row for verdict in (published.INSIDE_SPREAD, published.INSIDE_INTERVAL, published.NEITHER))
