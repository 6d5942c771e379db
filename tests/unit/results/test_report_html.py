"""The report's pages render their own text: Jinja2 templates over celldag.document's blocks (ids escaped), figure
captions through docutils, one inline-markup renderer for the blocks' text, scoring notes that list groups per
scenario as tables; every page parses as HTML without an error."""

from __future__ import annotations

import re

import html5lib
import pandas as pd
import pytest
from conftest import REPO, TRACKS

from celldag import contracts
from celldag.annotation.scoring import Settings, groups_note
from celldag.document import Heading, Paragraph, Table, markdown
from celldag.report import html
from celldag.report.leaderboard import leaderboard_blocks, leaderboard_markdown, note_parts

ODD = "a<b&c"  # a method id a lab may register: text on every page, never markup
KINDS = {f"{ODD}/default": "control", "nj_raw/default": "baseline"}


def parsed(page: str):
    """The page's tree; html5lib's strict parser raises on the first parse error (an unclosed or misnested tag,
    text outside the body, a bad character reference)."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)


def text_of(element) -> str:
    return "".join(element.itertext())


def lineage_scores(method: str = ODD, dataset: str = "bm") -> pd.DataFrame:
    rows = [
        {
            "dataset": dataset,
            "track": "lineage",
            "method": name,
            "variant": "default",
            "seed": seed,
            "metric": metric,
            "value": value + 0.1 * seed,
            "higher_is_better": False,
            "status": "ok",
        }
        for name, value in (("nj_raw", 0.4), ("upgma_raw", 0.5), (method, 0.6))
        for seed in (0, 1)
        for metric in ("rf", "quartet_dist")
    ]
    return pd.DataFrame(rows)


def runs_of(scores: pd.DataFrame) -> pd.DataFrame:
    runs = scores[["dataset", "method", "variant", "seed"]].drop_duplicates().assign(status="ok", status_reason="")
    runs = runs.assign(
        record=[f"results/runs/{r.dataset}/{r.method}/{r.variant}/k/seed{r.seed}/run.json" for r in runs.itertuples()]
    )
    failed = runs.iloc[[0]].assign(
        method=ODD,
        seed=7,
        status="failed",
        status_reason=f"ValueError: <{ODD}> `x`",
        record="results/runs/bm/x/default/k/seed7/run.json",
    )
    return pd.concat([runs, failed], ignore_index=True)


def shown_figures(dataset: str = "bm") -> list[html.ShownFigure]:
    """The lineage track's figures with their shipped captions, and the two every track shares."""
    return [
        html.ShownFigure(
            dataset, figure.name, f"results/x/figures/{dataset}/{figure.name}.png", figure.caption_path().read_text()
        )
        for figure in TRACKS["lineage"].figures
    ]


def test_the_index_escapes_every_id_and_parses_without_an_error():
    scores = lineage_scores()
    page = html.index_page(
        scores=scores,
        runs=runs_of(scores),
        tracks=TRACKS,
        figures=shown_figures(),
        index_path="results/x/index.html",
        kinds=KINDS,
        links=["results/x/scores.parquet"],
        notes=[f"Note on `{ODD}`: **read** it."],
    )
    assert ODD not in page and "a&lt;b&amp;c" in page
    tree = parsed(page)
    rows = [[text_of(cell) for cell in row.iter("td")] for row in tree.iter("tr")]
    assert [ODD, "default"] in [row[:2] for row in rows]  # the leaderboard's row of the control
    control = next(row for row in tree.iter("tr") if text_of(row).startswith(ODD))
    assert control.get("class") == "control"
    failed = next(row for row in rows if row and row[0] == "failed")
    assert failed[1:5] == ["bm", f"{ODD}/default", "7", f"ValueError: <{ODD}> x"]  # the reason's `x` is code
    notes = [item for item in tree.iter("li") if "Note on" in text_of(item)]
    assert [text_of(code) for code in notes[0].iter("code")] == [ODD]
    assert [text_of(strong) for strong in notes[0].iter("strong")] == ["read"]
    assert "<script" not in page and "**" not in page


def test_captions_render_through_docutils_with_their_bold_and_code():
    page = html.index_page(
        scores=lineage_scores(),
        runs=runs_of(lineage_scores()),
        tracks=TRACKS,
        figures=shown_figures(),
        index_path="results/x/index.html",
        kinds=KINDS,
    )
    tree = parsed(page)
    captions = {figure.get("id"): figure.find("figcaption") for figure in tree.iter("figure")}
    assert sorted(captions) == sorted(f"bm-{figure.name}" for figure in TRACKS["lineage"].figures)
    assert [text_of(strong) for strong in captions["bm-cost"].iter("strong")] == [
        "first seed's time includes importing the method's libraries"
    ]
    assert "run.json" in [text_of(code) for code in captions["bm-cost"].iter("code")]
    assert text_of(captions["bm-cost"].find("b")) == "cost."
    assert "**" not in page and "``" not in page


@pytest.mark.parametrize("caption", sorted(REPO.glob("src/celldag/*/captions/*.rst")), ids=lambda path: path.stem)
def test_every_shipped_caption_renders_without_raw_markup(caption):
    rendered = html.caption_html(caption.read_text())
    assert "**" not in rendered and "`" not in rendered  # every inline markup of the source understood
    assert "system-message" not in rendered and "problematic" not in rendered  # docutils found nothing wrong
    parsed(f"<!DOCTYPE html><html><head><title>t</title></head><body><figcaption>{rendered}</figcaption></body></html>")


def test_a_caption_cannot_insert_files_raw_html_or_script_links():
    source = (
        "Text <b>x</b> & y.\n\n.. raw:: html\n\n   <script>alert(1)</script>\n\n.. include:: /etc/passwd\n\n"
        "A `link <javascript:alert(1)>`_, a `good one <https://example.org/>`_ and ``code``.\n"
    )
    rendered = html.caption_html(source)
    assert "<script" not in rendered and "root:" not in rendered and "javascript:" not in rendered
    assert "Text &lt;b&gt;x&lt;/b&gt; &amp; y." in rendered
    assert '<a class="reference external" href="https://example.org/">good one</a>' in rendered
    assert "A link, a" in rendered and "<code>code</code>" in rendered


def test_inline_markup_is_code_and_strong_and_everything_else_is_text():
    assert html.inline("`a<b`, ``c&d`` and **bold `x`** *_relabelled 2*3") == (
        "<code>a&lt;b</code>, <code>c&amp;d</code> and <strong>bold <code>x</code></strong> *_relabelled 2*3"
    )
    assert html.inline("no ** markup **") == "no ** markup **"


def test_every_page_parses_without_an_error(tmp_path):
    scores = lineage_scores()
    runs = runs_of(scores)
    blocks = leaderboard_blocks(scores, TRACKS, kinds=KINDS, runs=runs)
    scores.to_parquet(tmp_path / "scores.parquet")
    runs.to_parquet(tmp_path / "runs.parquet")
    figures = shown_figures()
    for figure in figures:
        (tmp_path / f"{figure.name}.rst").write_text(figure.caption)
    html.write_index(
        scores_path=str(tmp_path / "scores.parquet"),
        runs_path=str(tmp_path / "runs.parquet"),
        figure_paths=[f.path for f in figures],
        figure_captions=[str(tmp_path / f"{f.name}.rst") for f in figures],
        figure_tracks=["" for _ in figures],
        index_path=str(tmp_path / "index.html"),
        leaderboard_path=str(tmp_path / "leaderboard.html"),
        tracks=TRACKS,
        kinds=KINDS,
    )
    pages = {
        "index.html": (tmp_path / "index.html").read_text(),
        "leaderboard.html": (tmp_path / "leaderboard.html").read_text(),
        "a page of parts": html.page("parts", html.render(blocks, KINDS)),  # celldag compare --published's
        "a page of every kind of block": html.document_page(
            f"<{ODD}>",
            [
                Heading(1, f"`{ODD}`"),
                Heading(2, "d", "d", "t", "d"),
                Paragraph(("a", "b")),
                Paragraph(("c",), bullets=True),
                Table(("x", "y"), ((ODD, "default"), ("1", ""))),
                Table(("empty",), ()),
            ],
            KINDS,
        ),
    }
    for name, page in pages.items():
        assert page.startswith("<!DOCTYPE html>"), name
        parsed(page)
    leaderboard = parsed(pages["leaderboard.html"])
    assert len(list(leaderboard.iter("table"))) == len([b for b in blocks if isinstance(b, Table)])
    assert text_of(parsed(pages["a page of every kind of block"]).find("head/title")) == f"<{ODD}>"


def test_a_dataset_id_with_markup_characters_escapes_in_anchors_links_and_figures():
    dataset = 'bm"<&'
    scores = lineage_scores(method="nj_pca", dataset=dataset)
    page = html.index_page(
        scores=scores,
        runs=runs_of(scores).assign(dataset=dataset),
        tracks=TRACKS,
        figures=shown_figures(dataset),
        index_path="results/x/index.html",
        kinds={},
    )
    tree = parsed(page)
    assert tree.find(".//nav/a").get("href") == f"#{dataset}"
    assert tree.find(".//h2").get("id") == dataset
    assert {figure.find("img").get("alt") for figure in tree.iter("figure")} == {
        f"{dataset}: {figure.name}" for figure in TRACKS["lineage"].figures
    }


# ---------------------------------------------------------------- scoring notes that list groups per scenario

BATCHES = ["lab_a", "lab_b", "lab_c", "lab_d"]
SCENARIOS = ["random split", *(f"new batch {batch}" for batch in BATCHES)]
TYPES = ["Platelet", "pDC", "HSPC", "Eryth", "ILC"]


def annotation_note(seed: int, failed: str = "") -> str:
    """groups_note as a 4-batch dataset's scoring writes it: small types per scenario, 20 dropped design groups
    with their weights (which the seed's calibration split moves), and a failure's line after them."""
    small = {
        scenario: {
            "class_conditional": ["type Platelet", "type pDC", *(["type HSPC"] if seed == 1 else [])],
            "mondrian_batch": [] if scenario == "random split" else ["lab_d"],
        }
        for scenario in SCENARIOS
    }
    dropped = {
        scenario: [
            f"{batch} × {kind} ({3.5 + i + seed / 10:.1f})"
            for i, (batch, kind) in enumerate((b, t) for b in BATCHES for t in TYPES)
            if i != seed
        ]
        for scenario in SCENARIOS
    }
    note = groups_note(small, dropped, Settings.of({"annotation": {"alpha": 0.1}}))
    return ". ".join(filter(None, [note, failed]))


def annotation_scores(notes: dict[int, str]) -> pd.DataFrame:
    rows = [
        {
            "dataset": "pbmc",
            "track": "annotation",
            "method": method,
            "variant": "pca/default",
            "seed": seed,
            "metric": "accuracy",
            "value": 0.9,
            "higher_is_better": True,
            "status": "ok",
            contracts.SCORE_NOTE: note,
        }
        for seed, note in notes.items()
        for method in ("knn", "logistic")
    ]
    return pd.DataFrame(rows)


def test_a_long_scoring_note_becomes_a_table_per_part_with_a_row_or_column_per_scenario():
    failure = "kandinsky failed: pbmc knn on pca/default seed 2, new batch lab_a: ValueError: no fit. None"
    notes = {0: annotation_note(0), 1: annotation_note(1), 2: annotation_note(2, failure)}
    assert min(map(len, notes.values())) > 2500  # the line per seed the leaderboard printed
    text = leaderboard_markdown(annotation_scores(notes), TRACKS)
    assert max(map(len, text.splitlines())) < 250
    assert text == leaderboard_markdown(annotation_scores(notes), TRACKS)  # deterministic: the audit rebuilds it
    assert f"- Seeds 2: {failure}" in text  # a line that lists no scenario stays a line
    small = text[text.index("Groups with less than 1/α − 1 = 9") :]
    assert "| scenario | seeds | groups |" in small
    assert "| random split | 0, 2 | class_conditional: type Platelet, type pDC |" in small
    assert "| random split | 1 | class_conditional: type Platelet, type pDC, type HSPC |" in small
    assert "| new batch lab_d | 0, 2 | class_conditional: type Platelet, type pDC; mondrian_batch: lab_d |" in small
    dropped = text[text.index("Dropped from the design of kandinsky_augmented, kandinsky") :]
    assert "Each cell gives the group's number in seeds 0, 1, 2 in turn" in dropped
    assert f"| group | {' | '.join(SCENARIOS)} |" in dropped
    # seed 0 lacks the first group and seed 1 the second; the others hold a weight in every seed
    assert "| group | random split |" in dropped and dropped.index("| lab_a × Platelet |") < dropped.index(
        "| lab_a × pDC |"
    )
    assert "| lab_a × Platelet | –, 3.6, 3.7 | –, 3.6, 3.7 |" in dropped
    assert "| lab_a × pDC | 4.5, –, 4.7 |" in dropped and "| lab_d × ILC | 22.5, 22.6, 22.7 |" in dropped
    page = "".join(html.render(leaderboard_blocks(annotation_scores(notes), TRACKS)))
    assert "<th>new batch lab_d</th>" in page and "<td>–, 3.6, 3.7</td>" in page


def test_notes_that_list_no_scenario_stay_one_line_per_distinct_note():
    note = "The reference tree is binary: a reconstruction such as a barcode tree, not the true lineage. Its scores"
    assert note_parts(note) == [note]
    scores = annotation_scores({0: note, 1: note, 2: "other"})
    assert markdown(leaderboard_blocks(scores, TRACKS)).count("\n- Seeds ") == 2
    assert f"- Seeds 0, 1: {note}" in leaderboard_markdown(scores, TRACKS)


def test_note_parts_split_a_note_at_its_lists():
    note = "x failed: a: b. what: s1 — g1, g2 | s2 — g3. tail. more: s — g (1.5)"
    assert note_parts(note) == [
        "x failed: a: b",
        ("what", (("s1", "g1, g2"), ("s2", "g3"))),
        "tail",
        ("more", (("s", "g (1.5)"),)),
    ]


def test_a_cell_holding_a_pipe_stays_one_cell_of_its_markdown_table():
    text = markdown([Table(("method", "largest |z|"), (("lab|method", "|z| = 3"),))])
    rows = [line for line in text.splitlines() if line.startswith("|")]
    # every row splits into the header's two cells at the pipes that are not escaped
    assert all(len(re.split(r"(?<!\\)\|", row)) == 4 for row in rows)
    assert rows[2] == "| lab\\|method | \\|z\\| = 3 |"
