"""``celldag annotate`` with its defaults on real cells as a lab runs it (issue 51): CellBench's cell lines
(genotype-verified labels, ../shared/realdata), reference and query each a plain h5ad of raw counts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from celldag.commands.annotate import Request, annotate
from celldag.data.cellbench import BATCH_KEY, COUNT, LABEL_KEY, METADATA, singlets

MIXOLOGY = "raw.githubusercontent.com/LuyiTian/sc_mixology/7d00ffb0bd043467f365a9358d7312f294f13c9f/data/csv"
ALPHA = 0.1


def plates(realdata, tmp_path, thinned: str | None = None):
    """(reference: plates 1 and 2, with cell line ``thinned`` cut to 24 cells; query: plate 3), as plain h5ads."""
    paths = []
    for name, experiments in (
        ("reference", ("sc_celseq2_5cl_p1", "sc_celseq2_5cl_p2")),
        ("query", ("sc_celseq2_5cl_p3",)),
    ):
        files = {
            f"{e}{suffix}": str(realdata / MIXOLOGY / f"{e}{suffix}")
            for e in experiments
            for suffix in (COUNT, METADATA)
        }
        data, _ = singlets(files)
        if thinned is not None and name == "reference":
            of_line = np.flatnonzero(data.obs[LABEL_KEY].to_numpy() == thinned)
            data = data[~np.isin(np.arange(data.n_obs), of_line[24:])].copy()
        data.write_h5ad(tmp_path / f"{name}.h5ad")
        paths.append(str(tmp_path / f"{name}.h5ad"))
    return paths


def run(reference, query, out, registries, **options):
    folder = annotate(
        Request(
            reference,
            query,
            str(out),
            batch_key=BATCH_KEY,
            label_key=LABEL_KEY,
            reference_label_key=LABEL_KEY,
            reference_batch_key=BATCH_KEY,
            **options,
        ),
        registries.methods,
    )
    return pd.read_csv(folder / "batches.tsv", sep="\t").iloc[0], (folder / "report.md").read_text()


def test_the_default_keeps_its_promise_on_a_real_plate_it_never_saw(realdata, tmp_path, registries, monkeypatch):
    monkeypatch.setenv("CELLDAG_CACHE", str(tmp_path / "cache"))
    reference, query = plates(realdata, tmp_path)
    batch, report = run(reference, query, tmp_path / "out", registries)
    assert batch["verdict"].startswith("no shift detected")
    se = np.sqrt(ALPHA * (1 - ALPHA) / batch["cells"])
    assert batch["labelled_coverage"] >= 1 - ALPHA - 2 * se, batch
    assert batch["mean_set_size"] <= 1.2  # five cell lines that separate: about one label a cell
    assert "sets by label_shift" in report and "Every type has enough calibration cells" in report


def test_a_rare_type_is_listed_and_kept_out_of_every_set_by_the_default(realdata, tmp_path, registries, monkeypatch):
    """A cell line cut to 24 reference cells has about 6 calibration cells (< ⌈(1 − α)/α⌉ = 9): report.md and
    batches.tsv name it; class_conditional puts it in every set, the default and the pooled procedure do not."""
    monkeypatch.setenv("CELLDAG_CACHE", str(tmp_path / "cache"))
    reference, query = plates(realdata, tmp_path, thinned="H838")
    found = {
        procedure: run(reference, query, tmp_path / procedure, registries, procedure=procedure)
        for procedure in ("label_shift", "class_conditional", "class_conditional_pooled")
    }
    for procedure, (batch, report) in found.items():
        assert (
            batch["rare_types"] == "H838"
            and "Rare types (fewer than ⌈(1 − α)/α⌉ = 9 calibration cells): H838" in report
        )
    assert found["class_conditional"][0]["rare_in_set_share"] == 1.0
    assert found["label_shift"][0]["rare_in_set_share"] < 0.5
    assert found["class_conditional_pooled"][0]["rare_in_set_share"] < 0.5
    assert found["label_shift"][0]["mean_set_size"] < found["class_conditional"][0]["mean_set_size"] - 0.5
