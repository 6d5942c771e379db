"""Readable leaderboard tables (celldag.report.leaderboard: ``group_layout``, ``Detail``) and the rank note's rough
guide to the seeds that would separate a table's pairs (celldag.results.leaderboard.seeds_to_separate_half): no
table of at most 14 columns and 10 metric columns, no column named with its procedure's prefix, every value where
the wide table had it, the rest folded in index.html."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from conftest import TRACKS

from celldag.annotation.track import HEADLINE, PROCEDURES, RULES, SET_METRICS
from celldag.document import Heading, Table
from celldag.report import html
from celldag.report import leaderboard as view
from celldag.report.leaderboard import (
    MAX_METRIC_COLUMNS,
    PROCEDURE,
    ROW_PREFIXES,
    Detail,
    leaderboard_blocks,
    leaderboard_markdown,
    seeds_guide,
    split_metric,
)
from celldag.results import leaderboard

TRACK = TRACKS["annotation"]
# three classifiers × embeddings ranked, CellTypist (the only one with its best and prob match rules), one control
RUNS = (
    ("knn", "pca/default"),
    ("logistic", "pca/default"),
    ("logistic", "scilama/text"),
    ("celltypist", "expression/default"),
    ("permuted_labels", "pca/default"),
)
KINDS = {"permuted_labels/pca/default": "control"}
METRICS = list(TRACK.metrics)


def value(run: int, metric: str, seed: int) -> float:
    """Seeds 0, 1, 2 at base, base + 0.01, base + 0.02: mean base + 0.01, sd 0.010 in every cell."""
    return 0.3 + 0.1 * run + 0.0001 * METRICS.index(metric) + 0.01 * seed


def annotation_scores() -> pd.DataFrame:
    rows = [
        {
            "dataset": "pbmc",
            "track": "annotation",
            "method": method,
            "variant": variant,
            "seed": seed,
            "metric": metric,
            "value": value(run, metric, seed),
            "higher_is_better": TRACK.higher_is_better(metric),
            "status": "ok",
        }
        for run, (method, variant) in enumerate(RUNS)
        for metric in METRICS
        if method == "celltypist" or not metric.startswith(("best_match_", "prob_match_"))
        for seed in range(3)
    ]
    return pd.DataFrame(rows)


def cell(run: int, metric: str) -> str:
    return f"{value(run, metric, 1):.3f} ± 0.010"


def tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(the heading above, header, rows) of every Markdown table of ``text``."""
    found, heading, lines = [], "", text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("#"):
            heading = line
        if line.startswith("| ") and index + 1 < len(lines) and lines[index + 1].startswith("|---"):
            rows = []
            for row in lines[index + 2 :]:
                if not row.startswith("| "):
                    break
                rows.append(row[2:-2].split(" | "))
            found.append((heading, line[2:-2].split(" | "), rows))
    return found


@pytest.fixture(scope="module")
def board() -> str:
    return leaderboard_markdown(annotation_scores(), TRACKS, kinds=KINDS)


def test_every_table_has_at_most_14_columns_of_which_10_metrics(board, monkeypatch):
    found = tables(board)
    assert len(found) == 2 * len(TRACK.metric_groups)  # ranked and controls, per group
    for heading, header, _ in found:
        metrics = [c for c in header if c not in ("rank", "classifier", "embedding", PROCEDURE, "seeds ok")]
        assert len(header) <= 14 and len(metrics) + (PROCEDURE in header) <= MAX_METRIC_COLUMNS, (heading, header)
    monkeypatch.setattr(view, "ROW_PREFIXES", {})  # the tables as they were: every group's metrics as columns
    wide = tables(leaderboard_markdown(annotation_scores(), TRACKS, kinds=KINDS))
    assert max(len(header) for _, header, _ in wide) == 34  # the rules' table: 30 metrics


def test_the_headers_name_metrics_without_their_procedure(board):
    found = {(heading, header[0]): header for heading, header, _ in tables(board)}
    main = found["## pbmc (annotation)", "rank"]
    assert " | ".join(main) == (
        "rank | classifier | embedding | accuracy ↑ | macro_f1 ↑ | coverage ↑ | worst_batch ↑ | worst_type ↑ | "
        "worst_batch_type ↑ | max_shortfall ↓ | set_size ↓ | singletons ↑ | empty ↓ | seeds ok"
    )
    lac = found["### split conformal, LAC", "rank"]
    assert lac == ["rank", "classifier", "embedding", *main[5:]]  # each procedure: the main table's set columns
    new_batch = next(header for (heading, first), header in found.items() if heading.startswith("### new batch"))
    assert " | ".join(new_batch) == (
        "rank | classifier | embedding | accuracy_new_batch ↑ | macro_f1_new_batch ↑ | procedure | "
        "new_batch_coverage ↑ | new_batch_worst ↑ | new_batch_set_size ↓ | seeds ok"
    )
    rules = next(header for (heading, first), header in found.items() if heading.startswith("### each classifier"))
    assert " | ".join(rules) == (
        "rank | classifier | embedding | procedure | coverage ↑ | set_size ↓ | unassigned ↓ | singletons ↑ | "
        "singleton_errors ↓ | seeds ok"
    )
    prefixes = tuple(f"{prefix}_" for prefix in ROW_PREFIXES["annotation"])
    assert not [c for _, header, _ in tables(board) for c in header if c.startswith(prefixes)]


def test_a_row_per_run_and_procedure_holds_the_wide_tables_values(board):
    found = {heading: rows for heading, header, rows in tables(board) if header[0] == "rank"}
    new_batch = next(rows for heading, rows in found.items() if heading.startswith("### new batch"))
    knn = RUNS.index(("knn", "pca/default"))
    of_knn = [row for row in new_batch if row[1:3] == ["knn", "pca/default"]]
    assert [row[5] for row in of_knn] == list(PROCEDURES)  # in the track's order, the headline first
    first, lac = of_knn[0], of_knn[list(PROCEDURES).index("split_lac")]
    assert first[3:5] == [cell(knn, "accuracy_new_batch"), cell(knn, "macro_f1_new_batch")]
    assert first[0] != "" and first[-1] == "3/3"  # the rank and seeds ok on the run's first row only
    assert lac[:5] == ["", "knn", "pca/default", "", ""] and lac[-1] == ""
    assert lac[6:9] == [
        cell(knn, f"split_lac_{name}") for name in ("new_batch_coverage", "new_batch_worst", "new_batch_set_size")
    ]
    lac_section = found["### split conformal, LAC"]
    row = next(row for row in lac_section if row[1:3] == ["knn", "pca/default"])
    assert row[3:11] == [cell(knn, f"split_lac_{name}") for name in SET_METRICS[:8]]
    rules = next(rows for heading, rows in found.items() if heading.startswith("### each classifier"))
    celltypist = RUNS.index(("celltypist", "expression/default"))
    assert [row[3] for row in rules if row[1] == "celltypist"] == [
        f"{rule}{scenario}" for rule in RULES for scenario in ("", "_label_free")
    ]
    assert [row[3] for row in rules if row[1] == "knn"] == ["confident", "confident_label_free"]  # no rows, no line
    prob = next(row for row in rules if row[3] == "prob_match_label_free")
    assert prob[4] == cell(celltypist, "prob_match_label_free_coverage")
    controls = [rows for heading, header, rows in tables(board) if heading.startswith("### new batch")][1]
    assert len(controls) == len(PROCEDURES) and {row[0] for row in controls} == {"permuted_labels"}


def test_the_metrics_not_shown_are_named_and_folded_in_the_html_not_the_markdown(board):
    hidden = [f"split_lac_{name}" for name in SET_METRICS[8:]]
    assert hidden == ["split_lac_singleton_errors"]
    shown_where = "index.html folds the full table under this one; every seed's value in `scores.parquet`"
    assert f"Not shown here ({shown_where}): `{hidden[0]}`." in board
    assert f"{hidden[0]} ↓" not in board and "<details>" not in board
    blocks = leaderboard_blocks(annotation_scores(), TRACKS, kinds=KINDS)
    folded = [block for block in blocks if isinstance(block, Detail)]
    assert len(folded) == 2 * 9  # ranked and controls, the main table and each procedure's section
    every = (*SET_METRICS, "dropped_groups", "unverified")
    assert folded[0].header == (
        "rank",
        "classifier",
        "embedding",
        "accuracy ↑",
        "macro_f1 ↑",
        *(
            f"kandinsky_augmented_{name} {'↑' if TRACK.higher_is_better(f'{HEADLINE}_{name}') else '↓'}"
            for name in every
        ),
        "seeds ok",
    )
    assert folded[0].summary == "Full table: all 13 metrics, as `scores.parquet` names them"
    page = "".join(html.render(blocks, KINDS))
    assert page.count("<details><summary>Full table: all ") == 18
    lac = page.index("<th>split_lac_coverage ↑</th>")
    assert page.rindex("<details>", 0, lac) > page.rindex("</details>", 0, lac)  # inside a details element
    assert f"<th>{hidden[0]} ↓</th>" in page[lac:]


def test_the_row_prefixes_are_the_tracks_procedures_and_rules():
    assert ROW_PREFIXES["annotation"] == (
        *PROCEDURES,
        *(f"{rule}{scenario}" for rule in RULES for scenario in ("", "_label_free")),
    )
    assert next(iter(PROCEDURES)) == HEADLINE
    own = {metric for metric in METRICS if split_metric(metric, ROW_PREFIXES["annotation"])[0] == ""}
    assert own == {
        "accuracy",
        "macro_f1",
        "accuracy_new_batch",
        "macro_f1_new_batch",
        "new_batch_shifted",
        "label_free_shifted",
        "unknown_type_detection",
        "unknown_type_false_flags",
        "permuted_coverage",
        "permuted_set_size",
    }
    assert split_metric("kandinsky_augmented_unrandomised_coverage", ROW_PREFIXES["annotation"]) == (
        "kandinsky_augmented_unrandomised",
        "coverage",
    )
    assert split_metric("class_conditional_pooled_pooled_types", ROW_PREFIXES["annotation"]) == (
        "class_conditional_pooled",
        "pooled_types",
    )


# ---------------------------------------------------------------- seeds to separate


def test_the_seeds_to_separate_a_pair_are_the_paired_t_tests_sample_size():
    """Per-seed differences of mean 0.1 and sd 0.1 (effect 1), two-sided 5 %, 80 % power. The normal form gives
    ((z_0.975 + z_0.8) / 1)² = (1.95996 + 0.84162)² = 7.85; with t's quantiles: n = 9 needs t_8(0.975) + t_8(0.8)
    = 2.30600 + 0.88889 = 3.19489 > √9 = 3, n = 10 needs t_9(0.975) + t_9(0.8) = 2.26216 + 0.88340 = 3.14556 ≤ √10
    = 3.16228: 10 seeds (G*Power's exact paired t test gives 10 too, at power 0.803)."""
    assert leaderboard.seeds_to_separate(0.1, 0.1, 0.05) == 10
    assert leaderboard.seeds_to_separate(-0.1, 0.1, 0.05) == 10  # either sign
    # effect 0.1: the normal form's 784.9, and t's quantiles at ~785 degrees of freedom add two seeds
    assert leaderboard.seeds_to_separate(0.01, 0.1, 0.05) == 787
    for difference, sd in ((0.0, 0.1), (0.1, 0.0), (0.1, math.nan)):
        assert leaderboard.seeds_to_separate(difference, sd, 0.05) == math.inf  # more of the same never separates


def test_half_of_the_pairs_at_their_holm_steps():
    """Rows a = (0.5, 0.5, 0.5), b = a + (0, 0.1, 0.2), c = (0.8, 0.8, 0.9) over three seeds. The pairs, farthest
    apart for their sd first: c − a (mean 0.333, sd 0.0577: effect 5.77) at Holm's first step, 5 %/3; c − b (0.233,
    0.0577: 4.04) at its second, 5 %/2; b − a (effect 1) last. Half of 3 pairs is 2: c − a needs 3 seeds
    (t_2(1 − 0.05/6) + t_2(0.8) = 7.649 + 1.061 = 8.71 ≤ 5.77 √3 = 10.0; at 2 seeds t_1's 38.2 alone is too much),
    c − b needs 4 (at 3: t_2(1 − 0.025/2) + t_2(0.8) = 6.205 + 1.061 = 7.27 > 4.04 √3 = 7.00; at 4: 4.177 + 0.978
    = 5.15 ≤ 4.04 √4 = 8.08): 4 seeds."""
    ranking = leaderboard.rank(
        {"a": {0: 0.5, 1: 0.5, 2: 0.5}, "b": {0: 0.5, 1: 0.6, 2: 0.7}, "c": {0: 0.8, 1: 0.8, 2: 0.9}},
        higher_is_better=True,
    )
    sds = {frozenset(test.rows): test.sd for test in ranking.pairs}
    assert math.isclose(sds[frozenset("ab")], 0.1) and math.isclose(sds[frozenset("ac")], 0.1 / math.sqrt(3))
    assert leaderboard.seeds_to_separate_half(ranking) == 4
    assert seeds_guide(ranking) == (
        "Seeds to separate: about 4 seeds would separate half of the 3 pairs, the 2 farthest apart for their sd "
        "(rough guide: each pair's paired t test at its Holm step's level, 5 %/3 for the farthest apart, with 80 % "
        "power, their mean differences and sds over these seeds taken as the truth)."
    )
    # a deterministic method beside others on fixed data: constant differences, no spread (rank keeps them tied)
    flat = leaderboard.rank({"a": {0: 1.0, 1: 2.0}, "b": {0: 1.0, 1: 2.0}, "c": {0: 0.5, 1: 1.5}}, True)
    assert leaderboard.seeds_to_separate_half(flat) == math.inf
    assert "more seeds would not separate half of the 3 pairs" in seeds_guide(flat)


def test_the_rank_note_gives_the_guide_where_the_seeds_leave_pairs_tied():
    rows = [
        {
            "dataset": "bm",
            "track": "lineage",
            "method": method,
            "variant": "default",
            "seed": seed,
            "metric": "rf",
            "value": base + difference,
            "higher_is_better": False,
            "status": "ok",
        }
        for method, base in (("nj_raw", 0.5), ("nj_pca", 0.6))
        for seed, difference in enumerate((0.0, 0.1, 0.2) if method == "nj_pca" else (0.0, 0.0, 0.0))
    ]
    text = leaderboard_markdown(pd.DataFrame(rows), TRACKS)
    assert "The seeds order none of these 2 methods: every rank is 1–2, the rows are by mean." in text
    # nj_pca − nj_raw: 0.1, 0.2, 0.3 — mean 0.2, sd 0.1, effect 2: 5 seeds (t_3(0.975) + t_3(0.8) = 3.182 + 0.978
    # = 4.16 > 2 √4 = 4; t_4: 2.776 + 0.941 = 3.72 ≤ 2 √5 = 4.47)
    assert (
        "Seeds to separate: about 5 seeds would separate the pair (rough guide: a paired t test at 5 %, with 80 % "
        "power, its mean difference and sd over these seeds taken as the truth)."
    ) in text
    apart = [row | {"value": row["value"] + (row["method"] == "nj_pca")} for row in rows]
    assert "Seeds to separate" not in leaderboard_markdown(pd.DataFrame(apart), TRACKS)  # every pair separated?


def cells_of(blocks) -> dict[tuple[str, str, str, str], str]:
    """(group heading, classifier, embedding, metric as scores.parquet names it) → cell, over every table of
    ``blocks``, shown or folded: a procedure's row names its metrics' prefix, a table of one procedure its section."""
    found, heading = {}, ""
    for block in blocks:
        if isinstance(block, Heading):
            heading = block.text
            continue
        if not isinstance(block, Table):
            continue
        header = [name.rsplit(" ", 1)[0] for name in block.header]
        labels = header.index("classifier")
        for row in block.rows:
            procedure = row[header.index(PROCEDURE)] if PROCEDURE in header else None
            for name, text in zip(header, row, strict=True):
                if name in ("rank", "classifier", "embedding", PROCEDURE, "seeds") or text == "":
                    continue
                prefix = procedure if procedure and header.index(name) > header.index(PROCEDURE) else ""
                found.setdefault((heading, row[labels], row[labels + 1], f"{prefix}_{name}" if prefix else name), text)
    return found


def test_every_value_of_the_wide_tables_is_shown_or_folded(monkeypatch):
    new = cells_of(leaderboard_blocks(annotation_scores(), TRACKS, kinds=KINDS))
    monkeypatch.setattr(view, "ROW_PREFIXES", {})
    wide = cells_of(leaderboard_blocks(annotation_scores(), TRACKS, kinds=KINDS))
    assert len(wide) == len(RUNS) * len(METRICS)  # every run × metric, "–" where a run has none
    scored = {key: text for key, text in wide.items() if text != "–"}
    celltypist_only = [metric for metric in METRICS if metric.startswith(("best_match_", "prob_match_"))]
    assert len(scored) == len(wide) - (len(RUNS) - 1) * len(celltypist_only)
    assert {key: new.get(key) for key in scored} == scored  # a rule a run has no score of has no row
    assert wide["split conformal, LAC", "knn", "pca/default", "split_lac_singleton_errors"] == cell(
        RUNS.index(("knn", "pca/default")), "split_lac_singleton_errors"
    )
