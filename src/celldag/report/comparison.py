"""compare.md, compare.html and the terminal summary of ``celldag compare`` (``celldag.results.compare``).

One content, two formats, as the leaderboard: blocks rendered as Markdown (``leaderboard.markdown``)
and as a static page (``html.document_page``: the report's templates). Rows that moved, changed status or
are on one side only come first; identical rows are counted, listed only with ``--all``.
"""

from __future__ import annotations

import math
from pathlib import Path

from celldag import artifacts
from celldag.document import Block, Heading, Paragraph, Table, markdown
from celldag.report.html import document_page
from celldag.results.compare import IDENTICAL, MOVED, VERDICTS, Comparison, Judged, Ranking
from celldag.results.record_differences import shown
from celldag.results.tolerance import plural

SCORE_HEADER = (
    "verdict",
    "dataset",
    "track",
    "method",
    "variant",
    "seed",
    "metric",
    "A",
    "B",
    "Δ",
    "relative Δ",
    "rule",
    "what differs in the run",
)
SHOWN_IN_TERMINAL = 3  # moved scores, environment fields and swapped pairs named in the summary
SHOWN_IN_TABLE = 10  # values of a record field per side (a cluster's hosts: one per node)


def number(value: float | None, status: str | None = "ok") -> str:
    """A score as stored (repr: every digit that tells two float64 apart), with its status where not ok."""
    if value is None:
        return "–"
    return repr(float(value)) + ("" if status == "ok" else f" ({status})")


def signed(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:+.3g}"


def run_name(item: Judged) -> str:
    return "/".join(map(str, item.run))


def tolerance_line(comparison: Comparison) -> str:
    tolerance = comparison.tolerance
    bound = f"|Δ| ≤ {tolerance.abs:g} + {tolerance.rel:g}·|A|"
    if comparison.overridden:
        return f"Tolerance (--rtol/--atol): {bound} for every continuous metric; counts Δ = 0."
    return (
        f"Tolerance: the same bits where both runs ran on CPU (the same seed on a CPU gives the same scores); "
        f"else {bound} for continuous metrics (celldag audit's CUDA bound) and Δ = 0 for counts."
    )


def differences_of(comparison: Comparison, item: Judged) -> str:
    differences = comparison.run_differences.get(item.run, {})
    return "; ".join(f"{field} {a} → {b}" for field, (a, b) in differences.items()) or "–"


def score_row(comparison: Comparison, item: Judged) -> tuple[str, ...]:
    dataset, track, method, variant, seed, metric = item.key
    return (
        item.verdict,
        dataset,
        track,
        method,
        variant,
        str(seed),
        metric,
        number(item.a, item.statuses[0]),
        number(item.b, item.statuses[1]),
        signed(item.delta),
        signed(item.relative),
        str(item.rule or "–"),
        differences_of(comparison, item),
    )


def ranking_blocks(rankings: list[Ranking]) -> list[Block]:
    blocks: list[Block] = [
        Heading(2, "Rankings"),
        Paragraph(
            (
                "Each leaderboard's order of method/variant by its headline metric (the first metric of its first "
                "metric group, mean over ok seeds; controls are not ranked), and per track on several datasets the "
                "order by mean rank.",
            )
        ),
    ]
    unchanged = [ranking.scope for ranking in rankings if not ranking.changed]
    if unchanged:
        blocks.append(Paragraph((f"Order unchanged: {', '.join(unchanged)}.",)))
    for ranking in rankings:
        if not ranking.changed:
            continue
        places = range(max(len(ranking.a), len(ranking.b)))
        rows = tuple(
            (str(i + 1), *(order[i] if i < len(order) else "–" for order in (ranking.a, ranking.b))) for i in places
        )
        only = [f"Only in {side}: {', '.join(entries)}." for side in ("A", "B") if (entries := ranking.only_in(side))]
        blocks += [
            Heading(3, f"{ranking.scope}: order changed (by {ranking.metric})"),
            Table(("rank", "A", "B"), rows),
            Paragraph((f"Swapped pairs: {swapped_pairs(ranking) or 'none'}.", *only)),
        ]
    return blocks


def swapped_pairs(ranking: Ranking, most: int | None = None) -> str:
    return ", ".join(f"{x} ↔ {y}" for x, y in ranking.swapped()[:most])


def environment_blocks(comparison: Comparison) -> list[Block]:
    matched = len(set(comparison.a.records) & set(comparison.b.records))
    only = [
        f"{len(set(mine.records) - set(theirs.records))} only in {name}"
        for name, mine, theirs in (("A", comparison.a, comparison.b), ("B", comparison.b, comparison.a))
    ]
    blocks: list[Block] = [
        Heading(2, "Environment differences"),
        Paragraph(
            (
                f"Run records of the {matched} runs in both (runs.parquet: {', '.join(only)}): inputs, packages, "
                "device, host, threads, settings (config_hash, params), the machine (CPU model, ISA flags, BLAS/OpenMP "
                "libraries, thread settings, GPU) and CUDA_VISIBLE_DEVICES / SLURM.",
            )
        ),
    ]
    if comparison.different_inputs:
        runs = max(item.runs for item in comparison.different_inputs)
        blocks.append(
            Paragraph(
                (
                    f"Different inputs: {runs} matched runs did not read the same data (an input's sha256 "
                    "differs), which explains any difference of their scores.",
                )
            )
        )
    if not comparison.environment:
        return blocks + [Paragraph(("The records of the matched runs agree on every field compared.",))]
    rows = tuple(
        (item.field, f"{item.runs} of {item.of}", shown(item.a, SHOWN_IN_TABLE), shown(item.b, SHOWN_IN_TABLE))
        for item in comparison.environment
    )
    return blocks + [Table(("field", "runs that differ", "A", "B"), rows)]


def comparison_blocks(comparison: Comparison, show_all: bool = False) -> list[Block]:
    counts = comparison.counts
    listed = [item for item in comparison.scores if show_all or item.verdict != IDENTICAL]
    blocks: list[Block] = [
        Heading(1, "celldag compare"),
        Paragraph(
            (
                f"A: `{comparison.a.folder}`; B: `{comparison.b.folder}`. Score rows are matched by dataset, track, "
                "method, variant, seed and metric; Δ = B − A, relative Δ = Δ / |A|.",
                tolerance_line(comparison),
            )
        ),
        Paragraph(tuple(f"{verdict}: {counts[verdict]}" for verdict in VERDICTS), bullets=True),
        Paragraph((verdict_line(comparison),)),
        Heading(2, "Scores" if show_all else "Scores that differ"),
    ]
    if listed:
        blocks.append(Table(SCORE_HEADER, tuple(score_row(comparison, item) for item in listed)))
    if not show_all and counts[IDENTICAL]:
        blocks.append(Paragraph((f"{counts[IDENTICAL]} identical rows are counted, not listed (--all lists them).",)))
    return blocks + ranking_blocks(comparison.rankings) + environment_blocks(comparison)


def verdict_line(comparison: Comparison) -> str:
    if not comparison.failed:
        return "Result: the same — every score identical or within tolerance, every order unchanged (exit status 0)."
    return (
        "Result: different — scores moved, changed status or are on one side only, or an order changed (exit status 1)."
    )


def write_comparison(comparison: Comparison, out: Path, show_all: bool = False) -> tuple[Path, Path]:
    blocks = comparison_blocks(comparison, show_all)
    files = (out / "compare.md", out / "compare.html")
    with artifacts.atomic_path(files[0]) as tmp:
        tmp.write_text(markdown(blocks))
    with artifacts.atomic_path(files[1]) as tmp:
        tmp.write_text(document_page("celldag compare", blocks))
    return files


def summary_lines(comparison: Comparison, files: tuple[Path, Path]) -> list[str]:
    """The terminal's few lines: verdict counts, moved scores, orders, top environment differences, the files."""
    counts = comparison.counts
    lines = [
        f"compared {len(comparison.scores)} scores of A {comparison.a.folder} and B {comparison.b.folder}: "
        + ", ".join(f"{counts[verdict]} {verdict}" for verdict in VERDICTS),
        tolerance_line(comparison),
    ]
    moved = [item for item in comparison.scores if item.verdict == MOVED]
    lines += [
        f"moved: {run_name(item)} {item.key[-1]} {number(item.a)} → {number(item.b)} (Δ {signed(item.delta)})"
        for item in moved[:SHOWN_IN_TERMINAL]
    ]
    if len(moved) > SHOWN_IN_TERMINAL:
        lines.append(f"moved: … and {len(moved) - SHOWN_IN_TERMINAL} more")
    return lines + [
        ranking_line(comparison.rankings),
        environment_line(comparison),
        f"written: {files[0]}, {files[1]}",
        verdict_line(comparison),
    ]


def ranking_line(rankings: list[Ranking]) -> str:
    changed = [ranking for ranking in rankings if ranking.changed]
    if not changed:
        return f"ranking: order unchanged on {plural(len(rankings), 'leaderboard')}"
    return "ranking: order changed on " + "; ".join(
        f"{ranking.scope} ({swapped_pairs(ranking, SHOWN_IN_TERMINAL) or 'other entries'})" for ranking in changed
    )


def environment_line(comparison: Comparison) -> str:
    shown = comparison.environment[:SHOWN_IN_TERMINAL]
    if not shown:
        return "environment: the matched runs' records agree"
    more = len(comparison.environment) - len(shown)
    return "environment: " + "; ".join(map(str, shown)) + (f"; … {plural(more, 'more field')}" if more else "")
