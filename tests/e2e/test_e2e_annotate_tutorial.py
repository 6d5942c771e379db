"""End to end, docs/annotate.md as a reader follows it, on the real data of ../shared/realdata: in a copy of the
workflow with a strict mirror of the published files, every block of the page in its order — the files it lists
(offline.yaml, lab/make_batches.py) written as they stand, its Python snippet and its commands run as they stand
(`.venv/bin/` is this interpreter's folder) — then the numbers the page states, read from what the run wrote.

The two commands that need internet (the prefetch that fills the mirror, the snakemake without offline.yaml) are
left out; the mirror is built from ../shared/realdata as test_e2e_real.py does.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import anndata
import pandas as pd
import pytest
from conftest import REPO, copy_workflow

pytestmark = pytest.mark.e2e

PAGE = REPO / "docs/annotate.md"
BIN = Path(sys.executable).parent  # what the page's `.venv/bin/` stands for
# The page's numbers were measured on an AMD EPYC (the reference's vendor): there they hold to the page's rounding;
# on another vendor's BLAS and kernels the verdicts and the flagged lines hold, the numbers within a margin.
PAGE_VENDOR = "AuthenticAMD" in Path("/proc/cpuinfo").read_text()


def about(value: float, stated: float, margin: float) -> bool:
    return abs(value - stated) <= margin


def p_value(verdict: str) -> float:
    return float(re.search(r"p = ([0-9.e+-]+)", verdict).group(1))


BLOCK = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", flags=re.M | re.S)  # indent, language, body
LISTING = re.compile(r"# ([\w.-]+(?:/[\w.-]+)*\.\w+)(?::|\s|$)")  # the first line of a file the page has written
PLATE3 = "sc_celseq2_5cl_p3"
NEW_LINES = ("A549", "H838")  # plate 3's lines the reference lacks
UNKNOWN, EMPTY, AMBIGUOUS = "unknown type", "no type", "ambiguous"
OUTPUTS = ("report.md", "batches.tsv", "cells.tsv", "annotated.h5ad", "run.json")  # the page's five files


def online(words: list[str]) -> bool:
    """The page's commands for a machine with internet: the prefetch, and snakemake without offline.yaml."""
    return "prefetch" in words or (words[0].endswith("snakemake") and "offline.yaml" not in words)


def run(words: list[str], workdir: Path, env: dict[str, str]) -> None:
    if words[0].startswith(".venv/bin/"):
        words = [str(BIN / words[0].removeprefix(".venv/bin/")), *words[1:]]
    result = subprocess.run(words, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise AssertionError(f"{shlex.join(words)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def follow_page(workdir: Path, env: dict[str, str]) -> tuple[list[list[str]], list[list[str]]]:
    """Every block of the page in its order: a listing written to the file its first line names, another Python
    block run, each command of a bash block run unless it is online; (the commands run, those left out)."""
    ran, left_out = [], []
    for _, language, body in BLOCK.findall(PAGE.read_text()):
        body = textwrap.dedent(body)
        listing = LISTING.match(body.splitlines()[0]) if language != "bash" else None
        if listing:
            (workdir / listing[1]).parent.mkdir(parents=True, exist_ok=True)
            (workdir / listing[1]).write_text(body)
        elif language == "python":
            run([sys.executable, "-c", body], workdir, env)
        elif language == "bash":
            for words in (shlex.split(line) for line in body.splitlines() if line.strip() and line[0] != "#"):
                if online(words):
                    left_out.append(words)
                else:
                    ran.append(words)
                    run(words, workdir, env)
    return ran, left_out


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory, realdata) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("tutorial"))
    shutil.copytree(realdata / "raw.githubusercontent.com", workdir / "mirror/raw.githubusercontent.com")
    env = os.environ | {"CELLDAG_CACHE": str(tmp_path_factory.mktemp("cache"))}  # the plain reference's cache
    ran, left_out = follow_page(workdir, env)
    assert [words[1] for words in left_out] == ["prefetch", "--configfile"]  # the two online commands alone
    run_tools = [(Path(words[0]).name, words[1]) for words in ran]
    assert run_tools.count(("snakemake", "--configfile")) == 1 and run_tools.count(("celldag", "annotate")) == 4
    return workdir


def outcome(workdir: Path, name: str) -> tuple[pd.Series, pd.DataFrame, str]:
    """A `celldag annotate` folder of the page's: its one batch's row of batches.tsv, cells.tsv and report.md."""
    out = workdir / "results" / name
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    (batch,) = pd.read_csv(out / "batches.tsv", sep="\t").to_dict("records")
    cells = pd.read_csv(out / "cells.tsv", sep="\t", index_col="cell", keep_default_na=False)
    return pd.Series(batch), cells, (out / "report.md").read_text()


def plate3_lines(workdir: Path) -> pd.Series:
    """Each plate-3 cell's line (demuxlet's genotype), by the name make_batches.py gives it (`<plate>:<cell id>`)."""
    (metadata,) = (workdir / "mirror").rglob(f"{PLATE3}.metadata.csv.gz")
    lines = pd.read_csv(metadata, index_col=0)["cell_line_demuxlet"]
    return lines.set_axis(PLATE3 + ":" + lines.index)


def test_the_reference_is_prepared_from_the_mirror(tutorial):
    (prepared,) = (tutorial / "results/data/cellbench_protocols").glob("*/seed0.h5ad")
    obs = anndata.read_h5ad(prepared, backed="r").obs
    assert len(obs) == 450 and obs["batch"].nunique() == 2
    assert set(obs["label"]) == {"H1975", "H2228", "HCC827"}


def test_the_lab_batch_is_plate3_and_the_plain_reference_plates_1_and_2(tutorial):
    batch = anndata.read_h5ad(tutorial / "lab/plate3.h5ad")
    line = plate3_lines(tutorial).loc[batch.obs_names]
    assert Counter(line) == {"A549": 101, "H838": 64, "H2228": 34, "H1975": 28, "HCC827": 25}
    known = batch.obs["known_line"]
    assert known.isna().sum() == 165 and (known.dropna() == line[known.notna()]).all()
    assert set(line[known.isna()]) == set(NEW_LINES)
    plates = anndata.read_h5ad(tutorial / "lab/plates12.h5ad", backed="r").obs
    assert set(plates["experiment"]) == {"sc_celseq2_5cl_p1", "sc_celseq2_5cl_p2"}
    assert set(plates["cell_line_demuxlet"]) == {*NEW_LINES, "H1975", "H2228", "HCC827"}


def test_the_batch_is_shifted_and_both_missing_lines_are_flagged_unknown(tutorial):
    batch, cells, report = outcome(tutorial, "plate3")
    assert batch["cells"] == 252 and batch["verdict"].startswith("shifted") and batch["test"] == "label-free"
    assert p_value(batch["verdict"]) < 1e-20
    line = plate3_lines(tutorial).loc[cells.index]
    new = line.isin(NEW_LINES)
    assert new.sum() == 165 and cells.loc[new, "unknown_type"].all()
    assert set(cells.loc[new, "unknown_by"]) == {"doubt"}
    assert about(batch["mean_set_size"], 0.19, 0.05) and about(batch["unknown_share"], 0.762, 0.03)
    if PAGE_VENDOR:
        assert "coverage 0.912 (promised ≥ 0.90)" in report and "flagged unknown type 0.053" in report
        (row,) = [line for line in report.splitlines() if line.startswith(f"| {PLATE3} |")]
        assert row in PAGE.read_text()  # the page's table is the report's row
        assert batch["verdict"] == "shifted (p = 1.6e-36)"
        assert f"{batch['mean_set_size']:.2f}" == "0.19" and f"{batch['unknown_share']:.3f}" == "0.762"
        assert Counter(cells["call"]) == {UNKNOWN: 192, "H1975": 20, EMPTY: 16, "H2228": 14, "HCC827": 10}
        assert (cells["unknown_type"] & ~new).sum() == 27  # the flagged cells of known lines


def test_without_the_flagged_cells_the_batch_is_still_shifted(tutorial):
    batch, _, _ = outcome(tutorial, "plate3_known")
    assert batch["cells"] == 60 and batch["verdict"].startswith("shifted") and p_value(batch["verdict"]) < 1e-3
    if PAGE_VENDOR:
        assert batch["verdict"] == "shifted (p = 6.3e-05)"


def test_the_labelled_test_is_shifted_with_a_labelled_coverage_far_below_the_promise(tutorial):
    batch, _, _ = outcome(tutorial, "plate3_labelled")
    assert batch["verdict"].startswith("shifted") and batch["test"] == "labelled"
    assert about(batch["labelled_coverage"], 0.540, 0.03)
    if PAGE_VENDOR:
        assert batch["verdict"] == "shifted (p = 7.5e-10)" and f"{batch['labelled_coverage']:.3f}" == "0.540"


def test_plates_1_and_2_as_the_reference_detect_no_shift_and_call_every_line(tutorial):
    batch, cells, report = outcome(tutorial, "plate3_from_plates")
    assert batch["verdict"].startswith("no shift detected") and about(batch["mean_set_size"], 0.90, 0.05)
    line = plate3_lines(tutorial).loc[cells.index]
    assert (cells["call"] == line)[~cells["call"].isin([UNKNOWN, EMPTY, AMBIGUOUS])].all()  # no line called wrong
    if PAGE_VENDOR:
        assert batch["verdict"] == "no shift detected (p = 0.99)" and f"{batch['mean_set_size']:.2f}" == "0.90"
        assert "coverage 0.927 (promised ≥ 0.90)" in report and "flagged unknown type 0.098" in report
        calls = {"A549": 101, "H838": 62, UNKNOWN: 25, "H2228": 20, "HCC827": 18, "H1975": 17, EMPTY: 9}
        assert Counter(cells["call"]) == calls
        assert ((cells["call"] == line) & line.isin(NEW_LINES)).sum() == 101 + 62


def test_no_set_holds_two_lines_in_any_run(tutorial):
    for name in ("plate3", "plate3_known", "plate3_labelled", "plate3_from_plates"):
        batch, cells, _ = outcome(tutorial, name)
        assert batch["ambiguous_share"] == 0 and (cells["set_size"] <= 1).all(), name
