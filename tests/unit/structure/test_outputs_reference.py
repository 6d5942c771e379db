"""docs/outputs.md and docs/glossary.md say what the code declares: every path, column, figure and metric.

docs/outputs.md: every path pattern of ``celldag.plan`` (named below, and any new one: a constant of the module that
spells a path under results/ or resources/ fails until it is listed here and on the page), the checksum, gene-table
facts and benchmark files derived from them, every figure a track declares, the columns of the shipped contracts
(``contracts.SCORE_COLUMNS`` and the optional score columns, ``RUN_COLUMNS``, ``CARD_COLUMNS``, ``QC_COLUMNS``) in the
section of their file with the types the contracts give, the run record's fields and ``celldag annotate``'s files.
Every ``python`` block is two lines that parse, and reads a path of a documented pattern.

docs/glossary.md: every metric the three tracks declare (``load_track`` of config/tracks.yaml's definitions), and
every Δ and control-scaled row the aggregate adds, is matched by a row of a metric table (its name, or a pattern:
``<p>`` a procedure of ``celldag.annotation.track.PROCEDURES``, ``<r>`` a rule of ``RULES``, ``<m>`` any metric) in
its track's section, whose direction and role are the declaration's; the row, with the procedure's or rule's own row,
links every reference config/tracks.yaml gives for the metric, and the pages link no outside work that file does not
list. Every relative link of the two pages names a heading that exists.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest
from conftest import REPO

from celldag import contracts, plan, records
from celldag.annotation.track import PROCEDURES, RULES
from celldag.commands import annotate
from celldag.commands.check import DEFAULT_OUT as CHECK_OUT
from celldag.registry import read_yaml
from celldag.results.floor_cards import CARD_COLUMNS, NUMBERS
from celldag.results.leaderboard import RUN_COLUMNS
from celldag.results.qc import QC_COLUMNS
from celldag.tracks import DELTA_PREFIX, SCALED_PREFIX, load_track

DOCS = REPO / "docs"
OUTPUTS = DOCS / "outputs.md"
GLOSSARY = DOCS / "glossary.md"
TRACK_ENTRIES = read_yaml(REPO / "config/tracks.yaml")
TRACKS = {track_id: load_track(entry["definition"]) for track_id, entry in TRACK_ENTRIES.items()}

# celldag.plan's path patterns, by name: a configuration's files under results/{name}/ ...
CONFIGURATION_PATTERNS = (
    "SCORES",
    "DATASET_SCORES",
    "CHAINED_SCORES",
    "RUNS",
    "FLOOR_CARDS",
    "QC",
    "LEADERBOARD",
    "LEADERBOARD_HTML",
    "INDEX",
    "FIGURE",
    "ANNOTATED",
)
# ... what configurations share under results/ (prepared data, runs, chained runs, gene tables) ...
SHARED_PATTERNS = (
    "PREPARED",
    "VALIDATION",
    "DATASET_GENES",
    "GENE_TABLE",
    "CHAIN_TASK",
    "RUN_DIR",
    "RUN_OUTPUT",
    "RUN_RECORD",
    "CHAINED_DIR",
    "CHAINED_INPUT",
    "CHAINED_OUTPUT",
    "CHAINED_RECORD",
)
# ... every job's log and the benchmarks beside them ...
LOG_PATTERNS = (
    "DOWNLOAD_LOG",
    "VALIDATION_LOG",
    "PREPARE_LOG",
    "DATASET_GENES_LOG",
    "GENE_TABLE_LOG",
    "RUN_LOG",
    "EVALUATE_LOG",
    "CHAIN_TASK_LOG",
    "CHAINED_LOG",
    "CHAINED_EVALUATE_LOG",
    "FIGURE_LOG",
    "AGGREGATE_LOG",
    "REPORT_LOG",
    "ANNOTATE_LOG",
    "PREPARE_BENCHMARK",
    "EVALUATE_BENCHMARK",
)
# ... and the downloads under resources/
RESOURCE_PATTERNS = ("DOWNLOAD", "DOWNLOAD_PINS")
NAMED_PATTERNS = CONFIGURATION_PATTERNS + SHARED_PATTERNS + LOG_PATTERNS + RESOURCE_PATTERNS
# paths made from the patterns by functions or rules, not constants: the score tables' checksums
# (plan.checksums_path), the embed_genes rule's facts beside its table, run_method's benchmark in both job layouts
DERIVED_PATTERNS = (
    plan.checksums_path(plan.DATASET_SCORES),
    plan.checksums_path(plan.CHAINED_SCORES),
    plan.GENE_TABLE.replace(".parquet", ".json"),
    plan.run_benchmark({"compute": {"job_per_seed": False}}),
    plan.run_benchmark({"compute": {"job_per_seed": True}}),
)
ANNOTATE_FILES = tuple(f"{plan.ANNOTATED}/{name}" for name in annotate.OUTPUTS)
CHECK_FILES = (f"{CHECK_OUT}/check.md", f"{CHECK_OUT}/check.html")
# the files a reader is shown how to load, each by at least one python block of docs/outputs.md
LOADED = (
    plan.SCORES,
    plan.DATASET_SCORES,
    plan.CHAINED_SCORES,
    plan.checksums_path(plan.DATASET_SCORES),
    plan.RUNS,
    plan.FLOOR_CARDS,
    plan.QC,
    plan.LEADERBOARD,
    plan.INDEX,
    plan.FIGURE,
    *(path for path in ANNOTATE_FILES if path.endswith((".tsv", ".h5ad"))),
    plan.PREPARED,
    plan.VALIDATION,
    plan.DATASET_GENES,
    plan.CHAIN_TASK,
    plan.RUN_OUTPUT,
    plan.RUN_RECORD,
    plan.CHAINED_OUTPUT,
    plan.GENE_TABLE,
    plan.GENE_TABLE.replace(".parquet", ".json"),
    plan.EVALUATE_BENCHMARK,
    CHECK_FILES[0],
)
TYPE_OF_KIND = {"string": "`str`", "integer": "`int64`", "float": "`float64`", "bool": "`bool`"}
PLACEHOLDERS = {"<p>": tuple(PROCEDURES), "<r>": tuple(RULES)}  # and <m>: any metric (``glossary_rows``)
DIRECTION = {"higher": True, "lower": False}
METRIC_HEADER = ["name", "better", "role", "what it measures", "reference"]


# ---------------------------------------------------------------------------------------------- reading the pages


def sections(text: str, level: int) -> list[tuple[str, str]]:
    """(heading, body) of each heading of ``level`` (2: ``##``), the body running to the next one of that level or
    higher; outside fenced blocks."""
    found, heading, body, fenced = [], "", [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        marks = re.match(r"^(#+) ", line) if not fenced else None
        if marks and len(marks.group(1)) <= level:
            found.append((heading, "\n".join(body)))
            heading, body = (line[len(marks.group(0)) :] if len(marks.group(1)) == level else ""), []
        else:
            body.append(line)
    return [*found, (heading, "\n".join(body))]


def section(text: str, heading: str) -> str:
    """The body of the one level-3 section whose heading is ``heading``."""
    bodies = [body for title, body in sections(text, 3) if title == heading]
    assert len(bodies) == 1, f"docs/outputs.md: {len(bodies)} sections headed {heading!r}"
    return bodies[0]


def cells(line: str) -> list[str]:
    """A table row's cells (a ``\\|`` inside a cell is text)."""
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every Markdown table of ``text``."""
    lines, found = text.splitlines(), []
    for number, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[number + 1]):
            if number and lines[number - 1].startswith("|"):
                continue
            rows = []
            for row in lines[number + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append(cells(row))
            found.append((cells(line), rows))
    return found


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def first_cell_names(text: str) -> list[str]:
    """The code spans of the first cell of every table row of ``text``, in order."""
    return [name for _, rows in tables(text) for row in rows for name in code_spans(row[0])]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def links(text: str) -> list[str]:
    """The targets of the Markdown links of ``text`` (a URL may hold balanced parentheses: a DOI's ``(81)``)."""
    return re.findall(r"\]\(((?:[^()\s]|\([^()\s]*\))+)\)", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` removed, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"^#+ (.*)$", line) if not fenced else None
        if heading:
            base = slug(heading.group(1))
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return found


OUTPUTS_TEXT = OUTPUTS.read_text()
GLOSSARY_TEXT = GLOSSARY.read_text()


# ---------------------------------------------------------------------------------------------- docs/outputs.md


def test_every_path_pattern_of_the_plan_is_named_by_this_test():
    """A constant of celldag.plan that spells a path under results/ or resources/ is one this test checks."""
    spelled = {
        name
        for name, value in vars(plan).items()
        if name.isupper() and isinstance(value, str) and value.startswith(("results/", "resources/"))
    }
    assert spelled == set(NAMED_PATTERNS), sorted(spelled ^ set(NAMED_PATTERNS))
    assert {getattr(plan, name) for name in CONFIGURATION_PATTERNS} == {
        value for value in (getattr(plan, name) for name in NAMED_PATTERNS) if value.startswith("results/{name}/")
    }


@pytest.mark.parametrize("pattern", [*NAMED_PATTERNS, *DERIVED_PATTERNS])
def test_every_path_pattern_is_on_the_outputs_page(pattern):
    path = getattr(plan, pattern, pattern)
    assert f"`{path}`" in OUTPUTS_TEXT, f"docs/outputs.md does not name {pattern} ({path})"


def test_every_figure_a_track_declares_is_listed():
    figures = section(OUTPUTS_TEXT, "figures/")
    listed = {row[0].strip("`"): row[1] for _, rows in tables(figures) for row in rows}
    for track_id, track in TRACKS.items():
        for figure in track.figures:
            assert figure.name in listed and track_id in listed[figure.name], (track_id, figure.name)
    assert set(listed) == {figure.name for track in TRACKS.values() for figure in track.figures}


def column_types(heading: str) -> dict[str, str]:
    """First-cell column name → its type cell, for the tables of one section of docs/outputs.md."""
    return {
        name: row[1]
        for _, rows in tables(section(OUTPUTS_TEXT, heading))
        for row in rows
        for name in code_spans(row[0])
    }


def test_the_scores_section_names_every_column_of_the_contract_with_its_type():
    documented = column_types("scores.parquet")
    optional = {contracts.SCORE_NOTE: "string", contracts.SCORE_REASON: "string", **contracts.SCORE_FACTS}
    expected = {**contracts.SCORE_COLUMNS, **optional}
    assert set(documented) == set(expected)
    for column, kind in expected.items():
        assert TYPE_OF_KIND[kind] in documented[column], (column, kind, documented[column])


@pytest.mark.parametrize(
    ("heading", "columns"),
    [("runs.parquet", RUN_COLUMNS), ("floor_cards.parquet", CARD_COLUMNS), ("qc.parquet", QC_COLUMNS)],
)
def test_each_table_section_lists_the_contracts_columns_in_order(heading, columns):
    assert list(column_types(heading)) == list(columns)


def test_the_floor_card_types_are_the_contracts():
    documented = column_types("floor_cards.parquet")
    for column in CARD_COLUMNS:
        kind = "float" if column in NUMBERS else "bool" if column == "flagged" else "string"
        assert documented[column].startswith(TYPE_OF_KIND[kind]), (column, documented[column])


def test_the_run_record_section_names_every_field_a_reader_requires():
    named = set(code_spans(section(OUTPUTS_TEXT, "run.json")))
    assert set(records.AUDITED_FIELDS) <= named, sorted(set(records.AUDITED_FIELDS) - named)


def test_the_annotate_section_names_every_file_the_command_writes():
    named = set(code_spans(section(OUTPUTS_TEXT, "annotate/{query}/")))
    assert {*annotate.OUTPUTS, annotate.SNAKEMAKE_MARK} <= named


def documented_patterns() -> list[str]:
    return [
        *(getattr(plan, name) for name in NAMED_PATTERNS),
        *DERIVED_PATTERNS,
        *ANNOTATE_FILES,
        *CHECK_FILES,
    ]


def snippet_paths() -> list[str]:
    """The path literals of the python blocks of docs/outputs.md."""
    return [
        node.value
        for block in python_blocks(OUTPUTS_TEXT)
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("results/")
    ]


def test_every_python_block_is_two_lines_that_parse():
    blocks = python_blocks(OUTPUTS_TEXT)
    assert len(blocks) >= len(LOADED) - 3  # some blocks read files of two patterns
    for block in blocks:
        assert len(block.strip().splitlines()) == 2, block
        ast.parse(block)


def test_every_snippet_reads_a_documented_path_and_every_main_file_has_one():
    paths = snippet_paths()
    for path in paths:
        assert any(plan.parse(pattern, path) is not None for pattern in documented_patterns()), path
    for pattern in LOADED:
        assert any(plan.parse(pattern, path) is not None for path in paths), (
            f"no python block reads a file of {pattern}"
        )


# ---------------------------------------------------------------------------------------------- docs/glossary.md


def declared_metrics() -> dict[str, tuple[str, bool, str | None]]:
    """Every declared metric → (track, higher_is_better, role); with the aggregate's Δ and scaled rows (role None)."""
    metrics = {}
    for track_id, track in TRACKS.items():
        for name, metric in track.metrics.items():
            metrics[name] = (track_id, metric.higher_is_better, metric.role)
            if metric.delta:
                metrics[DELTA_PREFIX + name] = (track_id, True, None)
            if metric.null:
                metrics[SCALED_PREFIX + name] = (track_id, True, None)
    return metrics


METRICS = declared_metrics()


def pattern_regex(name: str) -> re.Pattern:
    """A glossary name as a regex over metric names: ``<p>``, ``<r>`` their values, ``<m>`` any metric, ``*`` any."""
    regex = re.escape(name).replace(r"\*", ".*")
    for placeholder, values in PLACEHOLDERS.items():
        regex = regex.replace(re.escape(placeholder), "(?:" + "|".join(map(re.escape, values)) + ")")
    regex = regex.replace(re.escape("<m>"), "(?:" + "|".join(map(re.escape, METRICS)) + ")")
    return re.compile(regex)


def glossary_rows() -> list[dict]:
    """Each row of the glossary's metric tables: its section (the ``##`` heading), names, direction, roles, links."""
    rows = []
    for heading, body in sections(GLOSSARY_TEXT, 2):
        for header, table_rows in tables(body):
            if [cell.lower() for cell in header] != METRIC_HEADER:
                continue
            for name_cell, better, role, _, reference in table_rows:
                names = code_spans(name_cell)
                assert names and better in (*DIRECTION, "—"), (heading, name_cell, better)
                rows.append(
                    {
                        "section": heading.lower(),
                        "names": names,
                        "regexes": [pattern_regex(name) for name in names],
                        "better": better,
                        "roles": set() if role == "—" else {part.strip() for part in role.split(",")},
                        "links": set(links(reference)),
                    }
                )
    return rows


ROWS = glossary_rows()


def matching(metric: str) -> list[dict]:
    return [row for row in ROWS if any(regex.fullmatch(metric) for regex in row["regexes"])]


def own_rows(header_start: str) -> dict[str, set[str]]:
    """The glossary's procedure (or rule) table: its id → the links of its row."""
    found = {}
    for header, table_rows in tables(GLOSSARY_TEXT):
        if header[0].lower().startswith(header_start):
            found |= {code_spans(row[0])[0]: set(links(row[-1])) for row in table_rows}
    return found


PROCEDURE_ROWS, RULE_ROWS = own_rows("procedure"), own_rows("rule")


def expected_references(track_id: str, metric: str) -> set[str]:
    """The DOI or URL of every work config/tracks.yaml lists for a family whose patterns match ``metric``."""
    urls = set()
    for family in TRACK_ENTRIES[track_id].get("references", {}).values():
        if any(fnmatch.fnmatchcase(metric, pattern) for pattern in family["metrics"]):
            works = family["reference"] if isinstance(family["reference"], list) else [family["reference"]]
            urls |= {f"https://doi.org/{work['doi']}" if "doi" in work else work["url"] for work in works}
    return urls


def test_the_glossary_has_metric_tables_for_every_track():
    assert {row["section"] for row in ROWS} >= {f"{track_id} track" for track_id in TRACKS}


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_every_metric_has_an_entry_with_its_direction_and_role(metric):
    track_id, higher, role = METRICS[metric]
    rows = matching(metric)
    assert rows, f"{metric}: no entry of docs/glossary.md matches it"
    for row in rows:
        if row["better"] != "—":
            assert DIRECTION[row["better"]] == higher, (metric, row["names"], row["better"])
        if row["roles"] and role is not None:
            assert role in row["roles"], (metric, row["names"], row["roles"])
    if role is not None:  # a declared metric: stated in its own track's section, direction and role both
        assert any(row["section"] == f"{track_id} track" and row["better"] != "—" and row["roles"] for row in rows), (
            f"{metric}: no row in the {track_id} track's section states its direction and role"
        )


def procedure_of(metric: str, ids: dict[str, set[str]]) -> str | None:
    """The longest procedure (or rule) id that ``metric`` begins with, followed by ``_``."""
    candidates = [name for name in ids if metric.startswith(name + "_")]
    return max(candidates, key=len, default=None)


@pytest.mark.parametrize("metric", sorted(name for name, (_, _, role) in METRICS.items() if role is not None))
def test_every_metric_links_the_works_config_tracks_yaml_gives_it(metric):
    track_id = METRICS[metric][0]
    linked = set().union(*(row["links"] for row in matching(metric)))
    for ids in (PROCEDURE_ROWS, RULE_ROWS):
        owner = procedure_of(metric, ids)
        linked |= ids[owner] if owner else set()
    expected = expected_references(track_id, metric)
    assert expected, f"{metric}: config/tracks.yaml holds it to no family"
    assert expected <= linked, (metric, sorted(expected - linked))


def test_every_procedure_and_rule_has_an_entry_with_its_references():
    assert set(PROCEDURE_ROWS) == set(PROCEDURES)
    assert set(RULE_ROWS) == set(RULES)
    assert all(PROCEDURE_ROWS.values()) and all(RULE_ROWS.values())


def test_no_entry_names_a_metric_no_track_declares():
    stale = [
        name
        for row in ROWS
        for name, regex in zip(row["names"], row["regexes"])
        if not any(regex.fullmatch(metric) for metric in METRICS)
    ]
    assert not stale, stale


def test_the_pages_link_no_work_config_tracks_yaml_does_not_list():
    listed = set().union(
        *(expected_references(track_id, metric) for track_id, track in TRACKS.items() for metric in track.metrics)
    )
    outside = {url for text in (GLOSSARY_TEXT, OUTPUTS_TEXT) for url in links(text) if url.startswith("http")}
    assert outside <= listed, sorted(outside - listed)


# ---------------------------------------------------------------------------------------------- both pages


@pytest.mark.parametrize("page", [OUTPUTS, GLOSSARY], ids=lambda page: page.name)
def test_every_relative_link_names_a_page_and_heading_that_exist(page):
    for target in links(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = page if not path else (page.parent / path)
        assert linked.is_file(), f"{page.name}: {target}: no such page"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: {target}: no such heading in {linked.name}"
