"""What `make check`'s per-method verdicts can see and how often they cry wolf (issue 43; docs/check.md "Verdicts
per method"): the numbers docs/check.md quotes, from a reference and the runs it was made from.

  .venv/bin/python benchmarks/check_power.py [--reference reference/default] [--results FOLDER ...]
                                             [--degraded FOLDER ...] [--draws 2000]

- the kinds per metric: how many score groups are smooth, discontinuous, two-regime or counts;
- the power table: per method kind (track; trained = a method the registry marks `gpu: true`), lab seeds
  (3, 5, 10, 20) × reference seeds (5, 10, 20), the median shift of one metric (in its sd) a check detects with
  probability 0.9, and the share of metrics where 1 sd is detected so — simulated under the noise model
  (``celldag.results.method_verdicts.power_table``);
- the false-alarm rate of an unchanged installation simulated under the noise model, the metrics of a method
  independent, correlated at 0.5 or moving as one;
- injection into copies of real runs (``--results``, e.g. the held-out reruns): every judged metric of one method
  shifted by k of its sd on every seed, each method in turn, and the share of methods called changed, beside the
  share the simulation predicts (k at or above the method's detectable shift for one metric);
- degraded methods (``--degraded``: a results folder of the default run with one method made worse, e.g. CellTreeQM
  with a third of its training steps): the per-method verdicts and the per-score verdicts of that method.

Prints Markdown. Runs on the CPU in about a minute per results folder.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from celldag.annotation.track import PROCEDURES as ANNOTATION_PROCEDURES  # noqa: E402
from celldag.registry import read_yaml  # noqa: E402
from celldag.results import method_verdicts as mv  # noqa: E402
from celldag.results import reference as ref  # noqa: E402
from celldag.results.compare import read_side  # noqa: E402
from celldag.tracks import tracks_of  # noqa: E402

LAB_SEEDS = (3, 5, 10, 20)
REFERENCE_SEEDS = (5, 10, 20)
SHIFTS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)


def markdown(table: pd.DataFrame) -> str:
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    return "\n".join(
        [header, rule, *("| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False))]
    )


def method_kinds(noise: pd.DataFrame) -> dict[tuple, str]:
    trained = {
        name
        for name, entry in read_yaml(REPO / "config/methods.yaml").items()
        if isinstance(entry, dict) and entry.get("gpu")
    }
    return {
        tuple(row): f"{row[1]}, {'trained' if row[2] in trained else 'not trained'}"
        for row in noise[mv.FAMILY].drop_duplicates().itertuples(index=False)
    }


def power(reference: ref.Reference, tracks) -> str:
    table = mv.power_table(
        reference.noise,
        method_kinds(reference.noise),
        tracks,
        reference.meta["noise"]["family_false_alarm"],
        LAB_SEEDS,
        REFERENCE_SEEDS,
    )
    wide = table.pivot_table(
        index=["kind", "lab seeds"], columns="reference seeds", values="median shift detected (sd)"
    ).round(2)
    share = table.pivot_table(
        index=["kind", "lab seeds"], columns="reference seeds", values="share with 1 sd detected"
    ).round(2)
    wide.columns = [f"{seeds} reference seeds: median shift (sd)" for seeds in wide.columns]
    share.columns = [f"{seeds}: share with 1 sd" for seeds in share.columns]
    metrics = table.groupby("kind")["metrics"].first()
    out = pd.concat([wide, share], axis=1).reset_index()
    out.insert(1, "metrics", out["kind"].map(metrics))
    return markdown(out)


def false_alarms(reference: ref.Reference, tracks, draws: int) -> str:
    judged = mv.judged_metrics(reference.noise, tracks)
    rows = []
    for correlation in (0.0, 0.5, 1.0):
        rate = mv.null_false_alarm(judged, 3, reference.meta["noise"]["family_false_alarm"], correlation, draws)
        rows.append(
            {
                "metrics of a method": f"correlation {correlation:g}",
                "draws": draws,
                "any method called changed": f"{rate:.4f}",
            }
        )
    return markdown(pd.DataFrame(rows))


def reference_means(reference: ref.Reference) -> pd.DataFrame:
    return reference.noise[[*ref.GROUP, "mean", "seeds"]].rename(columns={"seeds": "n"})


def injected(reference: ref.Reference, tracks, folder: str) -> str:
    """Each method in turn shifted by k sd on every judged metric and seed: the share called changed (and of the
    others, the share called changed though untouched), beside the simulation's prediction."""
    side = read_side(folder)
    false_alarm = reference.meta["noise"]["family_false_alarm"]
    means = reference_means(reference)
    base = mv.judge_methods(reference.noise, means, side.scores, tracks, false_alarm)
    judged = mv.judged_metrics(reference.noise, tracks).set_index(mv.GROUP)["sd"]
    kinds = method_kinds(reference.noise)
    rows = []
    for shift in SHIFTS:
        hits, expected, others = Counter(), Counter(), Counter()
        totals = Counter()
        for family in base[mv.FAMILY].itertuples(index=False, name=None):
            scores = side.scores.copy()
            groups = pd.MultiIndex.from_frame(scores[mv.GROUP])
            sd = judged.reindex(groups).to_numpy()
            mine = (scores[mv.FAMILY].apply(tuple, axis=1) == family).to_numpy() & ~np.isnan(sd)
            scores.loc[mine, "value"] = scores.loc[mine, "value"] + shift * sd[mine]
            verdicts = mv.judge_methods(reference.noise, means, scores, tracks, false_alarm).set_index(mv.FAMILY)
            kind = kinds[family]
            totals[kind] += 1
            hits[kind] += verdicts.loc[family, "verdict"] == mv.CHANGED
            expected[kind] += base.set_index(mv.FAMILY).loc[family, "detectable_sd"] <= shift
            others[kind] += int((verdicts.drop(index=family)["verdict"] == mv.CHANGED).sum())
        for kind in sorted(totals):
            rows.append(
                {
                    "shift (sd, every judged metric)": shift,
                    "kind": kind,
                    "methods": totals[kind],
                    "called changed": f"{hits[kind] / totals[kind]:.2f}",
                    "predicted for one metric": f"{expected[kind] / totals[kind]:.2f}",
                    "untouched methods called changed": others[kind],
                }
            )
    head = f"Unshifted: {mv.summary_line(base)}."
    return head + "\n\n" + markdown(pd.DataFrame(rows))


def degraded(reference: ref.Reference, tracks, folder: str) -> str:
    side = read_side(folder)
    methods = mv.judge_methods(
        reference.noise, reference_means(reference), side.scores, tracks, reference.meta["noise"]["family_false_alarm"]
    )
    found = ref.judge(reference, side.scores, ref.NOISE_AWARE)
    counts = Counter((item.key[2], item.verdict) for item in found)
    shown = methods[methods["verdict"] == mv.CHANGED]
    lines = [f"{folder}: {mv.summary_line(methods)}; per score: {ref.summary_line(found)}"]
    for row in shown.itertuples():
        per_score = ", ".join(
            f"{count} {verdict}" for (method, verdict), count in sorted(counts.items()) if method == row.method
        )
        lines.append(
            f"- {row.dataset}/{row.method}/{row.variant}: p = {row.p:.3g}, largest |z| {row.worst_metric} "
            f"{row.worst_z:+.1f} (move {row.worst_delta:+.3g}); {row.method}'s scores: {per_score}"
        )
    return "\n".join(lines)


# the annotation track's conformal procedures (and the permuted control), the longest first so that
# kandinsky_augmented_unrandomised is not read as kandinsky_augmented
PROCEDURES = "^(" + "|".join(sorted([*ANNOTATION_PROCEDURES, "permuted"], key=len, reverse=True)) + ")_"


def kinds_per_metric(reference: ref.Reference) -> str:
    """How many score groups of each metric are smooth, discontinuous, two-regime or counts (annotation metrics by
    what they measure, over the conformal procedures)."""
    noise = reference.noise.assign(metric=reference.noise["metric"].str.replace(PROCEDURES, "<procedure>_", regex=True))
    table = noise.pivot_table(index=["track", "metric"], columns="kind", values="sd", aggfunc="count", fill_value=0)
    return markdown(table.reset_index())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=str(REPO / "reference/default"))
    parser.add_argument("--results", nargs="*", default=[])
    parser.add_argument("--degraded", nargs="*", default=[])
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args(argv)
    reference = ref.read(args.reference)
    tracks = tracks_of(read_yaml(REPO / "config/tracks.yaml"))
    print("## Kinds per metric\n")
    print(kinds_per_metric(reference))
    print("\n## Power: the shift of one metric detected with probability 0.9\n")
    print(power(reference, tracks))
    print("\n## False alarms simulated under the noise model (3 lab seeds)\n")
    print(false_alarms(reference, tracks, args.draws))
    for folder in args.results:
        print(f"\n## Injected into {folder}\n")
        print(injected(reference, tracks, folder))
    for folder in args.degraded:
        print("\n## Degraded\n")
        print(degraded(reference, tracks, folder))


if __name__ == "__main__":
    main()
