"""README.md states the shipped reference's numbers as the reference gives them: its seeds (reference.yaml), its
scores (scores.tsv) and the shift a ``celldag check`` detects per method — the "median … sd … (range …)" of the
line it prints, computed here by the same calls on the same reference (``celldag.commands.check.judged``: the
per-method verdicts of the default run's scores, which on the reference's own machine are the reference's scores).

A remade reference with other numbers fails this test until README says them; a copy of the reference with other
seeds shows that it can fail."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, TRACKS

from celldag.results import method_verdicts
from celldag.results import reference as ref

REFERENCE = REPO / "reference/default"
README = REPO / "README.md"
SPELLED = {3: "three", 5: "five", 10: "ten", 15: "fifteen", 20: "twenty", 30: "thirty", 40: "forty", 50: "fifty"}

# README's sentences, whitespace collapsed: the number each states, as a group
STATED = {
    "seeds": re.compile(r"with three seeds against the reference's (\w+),"),
    "scores": re.compile(r"all ([\d,]+) scores of the default run come out identical"),
    "power": re.compile(
        r"a median ([\d.]+) sd of its most sensitive metric \(range ([\d.]+)–([\d.]+) over the methods\)"
    ),
}
# the line `celldag check` prints (method_verdicts.summary_line)
PRINTED_POWER = re.compile(r"a median (\S+) sd of its most sensitive metric \(range (\S+)–(\S+)\)")


def spelled(number: int) -> str:
    """A count as README writes it: in words where it has one here, else in digits."""
    return SPELLED.get(number, f"{number:,}")


def counted_numbers(folder: Path) -> dict[str, tuple[str, ...]]:
    """The reference's seeds (reference.yaml) and scores (the rows of scores.tsv), formatted as README writes them."""
    seeds = yaml.safe_load((folder / ref.META_FILE).read_text())["seeds"]
    scores = len(pd.read_csv(folder / ref.SCORES_FILE, sep="\t", usecols=["metric"]))
    return {"seeds": (spelled(len(seeds)),), "scores": (f"{scores:,}",)}


def power_numbers(folder: Path) -> dict[str, tuple[str, ...]]:
    """The median, smallest and largest shift (in sd) a check detects per method, from the line ``celldag check``
    prints: the per-method verdicts of the reference's own default-run scores, as ``celldag.commands.check.judged``
    calls them (the reference's means over its seeds, the shipped tracks, its family false-alarm level)."""
    reference = ref.read(folder)
    means = reference.noise[[*ref.GROUP, "mean", "seeds"]].rename(columns={"seeds": "n"})
    methods = method_verdicts.judge_methods(
        reference.noise,
        means,
        reference.scores,
        TRACKS,
        reference.meta["noise"]["family_false_alarm"],
        reference.regimes,
    )
    printed = PRINTED_POWER.search(method_verdicts.summary_line(methods))
    assert printed, method_verdicts.summary_line(methods)
    return {"power": printed.groups()}


def mismatches(readme: str, numbers: dict[str, tuple[str, ...]]) -> list[str]:
    """Where README does not state the reference's numbers: one line per number it states otherwise or not at all."""
    text = " ".join(readme.split())
    found = []
    for name, expected in numbers.items():
        stated = STATED[name].search(text)
        if stated is None:
            found.append(f"{name}: README no longer states it (the reference gives {', '.join(expected)})")
        elif stated.groups() != expected:
            found.append(f"{name}: README says {', '.join(stated.groups())}, the reference gives {', '.join(expected)}")
    return found


def test_readme_states_the_shipped_references_seeds_and_scores():
    numbers = counted_numbers(REFERENCE)
    assert mismatches(README.read_text(), numbers) == []
    # the power below is computed on noise.tsv's seeds: the same reference seeds README names
    noise = pd.read_csv(REFERENCE / ref.NOISE_FILE, sep="\t", usecols=["seeds"])
    assert spelled(int(noise["seeds"].max())) == numbers["seeds"][0]


@pytest.mark.slow  # the per-method verdicts' power simulation: about 7 s on two cores
def test_readme_states_the_shift_celldag_check_prints_for_the_shipped_reference():
    assert mismatches(README.read_text(), power_numbers(REFERENCE)) == []


def ten_seed_copy(tmp_path: Path) -> Path:
    """The shipped reference with ten seeds in place of its own, in reference.yaml and noise.tsv."""
    folder = tmp_path / "reference"
    shutil.copytree(REFERENCE, folder)
    meta = yaml.safe_load((folder / ref.META_FILE).read_text())
    assert len(meta["seeds"]) != 10, "the copy must change the seeds: pick another count"
    meta["seeds"] = list(range(10))
    (folder / ref.META_FILE).write_text(yaml.safe_dump(meta, sort_keys=False))
    noise = (folder / ref.NOISE_FILE).read_text().splitlines()
    column = noise[0].split("\t").index("seeds")
    rows = [row.split("\t") for row in noise[1:]]
    for row in rows:
        row[column] = str(min(int(row[column]), 10))
    (folder / ref.NOISE_FILE).write_text("\n".join([noise[0], *("\t".join(row) for row in rows)]) + "\n")
    return folder


def test_a_reference_with_other_seeds_disagrees_with_readme(tmp_path):
    folder = ten_seed_copy(tmp_path)
    shipped = counted_numbers(REFERENCE)["seeds"][0]
    assert mismatches(README.read_text(), counted_numbers(folder)) == [
        f"seeds: README says {shipped}, the reference gives ten"
    ]
    # fewer scores too
    scores = (folder / ref.SCORES_FILE).read_text().splitlines()
    (folder / ref.SCORES_FILE).write_text("\n".join(scores[:-1]) + "\n")
    assert [line.split(":")[0] for line in mismatches(README.read_text(), counted_numbers(folder))] == [
        "seeds",
        "scores",
    ]


def test_mismatches_names_a_number_readme_no_longer_states():
    numbers = {"seeds": ("twenty",), "scores": ("27,366",), "power": ("3.9", "3.4", "4.3")}
    assert mismatches("nothing about the reference", numbers) == [
        "seeds: README no longer states it (the reference gives twenty)",
        "scores: README no longer states it (the reference gives 27,366)",
        "power: README no longer states it (the reference gives 3.9, 3.4, 4.3)",
    ]


@pytest.mark.slow  # as above
def test_a_reference_with_other_seeds_detects_another_shift_than_readme_states(tmp_path):
    found = mismatches(README.read_text(), power_numbers(ten_seed_copy(tmp_path)))
    assert len(found) == 1 and found[0].startswith("power: README says "), found
