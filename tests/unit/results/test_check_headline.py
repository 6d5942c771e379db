"""`celldag check`'s first line is the verdict its exit status gives, per score and per method together: a method
called changed while every score passes is "does not reproduce the release", never a line that reads as a pass."""

from __future__ import annotations

import pandas as pd

from celldag.report.check import verdict_line
from celldag.results import reference as ref


def judgement(metric: str, verdict: str) -> ref.Judgement:
    key = ("pbmc68k_batched", "representation", "harmony", "default", 0, metric)
    return ref.Judgement(key, verdict, 0.5, 0.5, ("ok", "ok"), "smooth", 0.01)


def methods(*verdicts: str) -> pd.DataFrame:
    names = ["harmony", "scvi", "pca", "scilama"][: len(verdicts)]
    return pd.DataFrame(
        {
            "dataset": "pbmc68k_batched",
            "track": "representation",
            "method": names,
            "variant": "default",
            "verdict": list(verdicts),
        }
    )


PASSING_SCORES = [judgement("ari", ref.IDENTICAL), judgement("nmi", ref.SEED_NOISE)]


def test_a_pass_reads_as_one_and_exits_0():
    found, judged = PASSING_SCORES, methods("unchanged", "unchanged")
    assert ref.reproduces_release(found, judged)
    assert verdict_line(found, judged) == (
        "reproduces the release: no score and no method changed beyond noise (2 scores, 2 methods)"
    )


def test_a_changed_method_with_passing_scores_is_the_headline():
    found, judged = PASSING_SCORES, methods("changed", "unchanged")
    assert ref.reproduces(found) and not ref.reproduces_release(found, judged)  # the scores alone would pass
    assert verdict_line(found, judged) == (
        "does not reproduce the release: 1 method changed (pbmc68k_batched/representation/harmony/default)"
    )


def test_changed_scores_and_methods_are_both_named_and_long_lists_cut():
    found = [*PASSING_SCORES, judgement("asw", ref.CHANGED), judgement("ilisi", ref.ONLY_HERE)]
    judged = methods("changed", "changed", "changed", "changed")
    line = verdict_line(found, judged)
    assert line.startswith("does not reproduce the release: 2 scores changed, changed status or on one side only; ")
    assert line.endswith(
        "4 methods changed (pbmc68k_batched/representation/harmony/default, "
        "pbmc68k_batched/representation/scvi/default, pbmc68k_batched/representation/pca/default "
        "and 1 more)"
    )
