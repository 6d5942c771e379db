"""check.md, check.html and the terminal lines of ``celldag check`` (``celldag.results.reference``): one verdict for the
installation, the scores that are not identical with the rule and the margin each was judged by, the environment
that differs from the reference's, and this machine's cost per rule against the reference's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from celldag import artifacts
from celldag.document import Block, Heading, Paragraph, Table, markdown
from celldag.report.html import document_page
from celldag.results.method_verdicts import CHANGED, POWER
from celldag.results.method_verdicts import summary_line as methods_line
from celldag.results.reference import (
    BIT_FOR_BIT,
    IDENTICAL,
    PASSING,
    VERDICTS,
    Judgement,
    Reference,
    reproduces_release,
    score_counts,
    verdict_counts,
)
from celldag.results.tolerance import plural

SCORE_HEADER = (
    "verdict",
    "dataset",
    "track",
    "method",
    "variant",
    "seed",
    "metric",
    "kind",
    "reference",
    "this run",
    "Δ",
    "margin (smallest change detected)",
)
SHOWN_IN_TERMINAL = 5


def number(value: float | None) -> str:
    return "–" if value is None else repr(float(value))


def score_row(item: Judgement) -> tuple[str, ...]:
    dataset, track, method, variant, seed, metric = item.key
    delta = "–" if math.isnan(item.delta) else f"{item.delta:+.3g}"
    return (
        item.verdict,
        dataset,
        track,
        method,
        variant,
        str(seed),
        metric,
        item.kind or "–",
        number(item.reference),
        number(item.here),
        delta,
        f"{item.margin:.3g}",
    )


SHOWN_METHODS = 3  # changed methods named in the verdict line (all of them in check.md and below it)


def verdict_line(found: list[Judgement], methods: pd.DataFrame) -> str:
    """The check's first line: the verdict its exit status gives, per score and per method together."""
    failing = sum(item.verdict not in PASSING for item in found)
    changed = methods[methods["verdict"] == CHANGED]
    if reproduces_release(found, methods):
        return (
            f"reproduces the release: no score and no method changed beyond noise ({plural(len(found), 'score')}, "
            f"{plural(len(methods), 'method')})"
        )
    parts = [f"{plural(failing, 'score')} changed, changed status or on one side only"] if failing else []
    if len(changed):
        names = [f"{row.dataset}/{row.track}/{row.method}/{row.variant}" for row in changed.itertuples()]
        more = f" and {len(names) - SHOWN_METHODS} more" if len(names) > SHOWN_METHODS else ""
        parts.append(f"{plural(len(changed), 'method')} changed ({', '.join(names[:SHOWN_METHODS])}{more})")
    return "does not reproduce the release: " + "; ".join(parts)


def rule_line(rule: str, differences: dict[str, tuple[str, str]]) -> str:
    if rule == BIT_FOR_BIT:
        return (
            "rule: bit for bit — nothing that may change a number differs from the reference's environment (CPU "
            "model, instruction sets, BLAS, threads, kernels, C library, packages, lock file)"
        )
    return f"rule: noise-aware — the environment differs from the reference's in {plural(len(differences), 'field')}"


def detection_line(found: list[Judgement]) -> str:
    """How small a change the noise-aware verdicts could see: the margins of the scores judged by noise."""
    margins = pd.Series([item.margin for item in found if item.margin > 0])
    if margins.empty:
        return "smallest change detected: any change (no score has a noise margin)"
    return (
        f"smallest change detected, over the {len(margins):,} scores with a noise margin: median "
        f"{margins.median():.3g}, 90th percentile {margins.quantile(0.9):.3g}, largest {margins.max():.3g} "
        "(per score in check.md)"
    )


def environment_lines(differences: dict[str, tuple[str, str]]) -> list[str]:
    return [f"{name}: {a} → {b}" for name, (a, b) in differences.items()]


def cost_lines(ratios: pd.DataFrame) -> list[str]:
    lines = []
    for row in ratios.itertuples():
        if math.isnan(row.wall_ratio):
            lines.append(f"{row.rule}: not run here")
            continue
        lines.append(
            f"{row.rule}: wall {row.wall_s_here:.1f} s = {row.wall_ratio:.2f}× the reference's "
            f"{row.wall_s_reference:.1f} s; peak {row.peak_mb_here:.0f} MB = {row.peak_ratio:.2f}×"
        )
    return lines


METHOD_HEADER = (
    "verdict",
    "dataset",
    "track",
    "method",
    "variant",
    "metrics",
    "seeds here",
    "reference seeds",
    "p",
    "Holm level",
    "metric farthest out (z)",
    "its move",
    f"shift detected at {POWER:g} (sd)",
)


def method_row(row) -> tuple[str, ...]:
    return (
        row.verdict,
        row.dataset,
        row.track,
        row.method,
        row.variant,
        str(row.metrics),
        str(row.seeds_here),
        str(row.seeds_reference),
        f"{row.p:.3g}",
        f"{row.level:.3g}",
        f"{row.worst_metric} ({row.worst_z:+.2f})",
        f"{row.worst_delta:+.3g}",
        f"{row.detectable_sd:.2f}",
    )


def method_blocks(methods: pd.DataFrame, false_alarm: float) -> list[Block]:
    ordered = methods.sort_values(["p", "dataset", "track", "method", "variant"], kind="stable")
    return [
        Heading(2, "Verdicts per method"),
        Paragraph(
            (
                methods_line(methods) + ".",
                "Each method (dataset, track, method, variant) is judged as a whole: per metric, the mean over this "
                "run's seeds against the reference's mean over its seeds, standardised by the score's spread and "
                "the part of a machine's move that seeds do not average out; the method's p is its smallest "
                "metric p times its number of metrics (valid whatever the metrics' dependence), and Holm over the "
                f"methods keeps the chance that an unchanged installation has any method called changed under "
                f'{false_alarm:g} (docs/check.md, "Verdicts per method"). The last column is the shift of one '
                f"metric, in its sd, that the verdict sees with probability {POWER:g}: more seeds here narrow it.",
            )
        ),
        Table(METHOD_HEADER, tuple(method_row(row) for row in ordered.itertuples()))
        if len(methods)
        else Paragraph(("No method has scores with noise on both sides.",)),
    ]


def check_blocks(
    reference: Reference,
    found: list[Judgement],
    rule: str,
    differences: dict[str, tuple[str, str]],
    ratios: pd.DataFrame,
    methods: pd.DataFrame,
    results: Path,
    reference_folder: Path,
) -> list[Block]:
    counts = verdict_counts(found)
    made = reference.meta
    listed = [item for item in found if item.verdict != IDENTICAL]
    blocks: list[Block] = [
        Heading(1, "celldag check"),
        Paragraph(
            (
                f"`{results}` against the reference `{reference_folder}` (commit {made.get('commit', '?')}, made "
                f"{made.get('made_at', '?')} on {made['environment'].get('machine.cpu_model', '?')}).",
                verdict_line(found, methods),
                "scores: " + score_counts(found),
                "methods: " + methods_line(methods),
                rule_line(rule, differences),
                detection_line(found),
            )
        ),
        Paragraph(tuple(f"{verdict}: {counts[verdict]}" for verdict in VERDICTS), bullets=True),
        Paragraph(
            (
                "Verdicts (docs/check.md): identical — the same float64 bits; within numerical tolerance — a smooth "
                f"score moved by at most {reference.tolerance.abs:g} + {reference.tolerance.rel:g}·|reference| "
                "(calibrated on the reference's perturbed reruns); within seed noise — by no more than the score's "
                "margin, set from its spread over the reference's seeds and perturbed reruns so that an unchanged "
                f"installation is called changed with chance under {made['noise']['family_false_alarm']:g}; changed "
                "— by more.",
            )
        ),
        Heading(2, "Scores that are not identical"),
    ]
    blocks.append(
        Table(SCORE_HEADER, tuple(score_row(item) for item in listed))
        if listed
        else Paragraph(("Every score is identical to the reference's.",))
    )
    blocks += method_blocks(methods, made["noise"]["family_false_alarm"])
    blocks.append(Heading(2, "Environment that differs from the reference's"))
    blocks.append(
        Table(("field", "reference", "this run"), tuple((name, a, b) for name, (a, b) in differences.items()))
        if differences
        else Paragraph(("None of the fields that may change a number differs.",))
    )
    blocks.append(Heading(2, "Cost against the reference's"))
    rows = tuple(
        (
            row.rule,
            f"{row.wall_s_reference:.1f}",
            "–" if math.isnan(row.wall_s_here) else f"{row.wall_s_here:.1f}",
            f"{row.wall_ratio:.2f}",
            f"{row.peak_mb_reference:.0f}",
            "–" if math.isnan(row.peak_mb_here) else f"{row.peak_mb_here:.0f}",
            f"{row.peak_ratio:.2f}",
        )
        for row in ratios.itertuples()
    )
    blocks.append(
        Table(("rule", "reference wall s", "wall s here", "ratio", "reference peak MB", "peak MB here", "ratio"), rows)
    )
    return blocks


def write_check(blocks: list[Block], out: Path) -> tuple[Path, Path]:
    files = (out / "check.md", out / "check.html")
    with artifacts.atomic_path(files[0]) as tmp:
        tmp.write_text(markdown(blocks))
    with artifacts.atomic_path(files[1]) as tmp:
        tmp.write_text(document_page("celldag check", blocks))
    return files


def summary_lines(
    found: list[Judgement],
    rule: str,
    differences: dict[str, tuple[str, str]],
    ratios: pd.DataFrame,
    methods: pd.DataFrame,
    files: tuple[Path, Path],
) -> list[str]:
    failing = [item for item in found if item.verdict not in PASSING]
    changed = methods[methods["verdict"] == CHANGED]
    lines = [
        verdict_line(found, methods),
        "scores: " + score_counts(found),
        "methods: " + methods_line(methods),
        rule_line(rule, differences),
        detection_line(found),
    ]
    lines += [
        f"{item.verdict}: {'/'.join(map(str, item.key[:5]))} {item.key[5]} {number(item.reference)} → "
        f"{number(item.here)} (margin {item.margin:.3g})"
        for item in failing[:SHOWN_IN_TERMINAL]
    ]
    if len(failing) > SHOWN_IN_TERMINAL:
        lines.append(f"… and {len(failing) - SHOWN_IN_TERMINAL} more in {files[0]}")
    lines += [
        f"method changed: {row.dataset}/{row.track}/{row.method}/{row.variant} p = {row.p:.3g} (Holm level "
        f"{row.level:.3g}; largest |z| {row.worst_metric} {row.worst_z:+.2f}, move {row.worst_delta:+.3g})"
        for row in changed.itertuples()
    ]
    lines += [f"environment: {line}" for line in environment_lines(differences)]
    lines += [f"cost: {line}" for line in cost_lines(ratios)]
    if reproduces_release(found, methods):
        exit_line = "exit 0: nothing changed beyond noise"
    elif changed.empty:
        exit_line = f"exit 1: {plural(len(failing), 'score')} changed, changed status or on one side only"
    else:
        exit_line = (
            f"exit 1: {plural(len(failing), 'score')} changed, changed status or on one side only; "
            f"{plural(len(changed), 'method')} changed"
        )
    return lines + [f"written: {files[0]}, {files[1]}", exit_line]
