"""tran2020_pancreas: Tran et al. 2020's two text files, downloaded from 127.0.0.1, read, filtered as the paper.

The synthetic pair has the real layout (gzip, tab-separated, R's write.table header, five batches named as
the real ones) and is built so that the filter's outcome can be read off its design: two cells detect 299
genes (dropped by min_genes 300), one exactly 300 (kept), and of the rare genes only the one detected in
10 kept cells survives min_cells 10 — RARE9 is in 11 cells of the file, but two of them are the dropped ones.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import logging

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, check_prepared, copy_workflow, ok, run_snakemake

from celldag.contracts import ContractError
from celldag.data.tran2020 import MATRIX, SAMPLES, header_cells, prepare_tran2020
from celldag.errors import InputError
from celldag.jobs.download import DownloadError, fetch_registry_file
from celldag.registry import read_yaml

BATCHES = ("Baron_b1", "Mutaro_b2", "Segerstolpe_b3", "Wang_b4", "Xin_b5")
TYPES = ("alpha", "beta", "ductal")
CELLS = [f"{batch}_{i:02d}" for batch in BATCHES for i in range(20)]  # the matrix header's order
LABEL = {cell: TYPES[i % 3] for batch in BATCHES for i, cell in enumerate(c for c in CELLS if c.startswith(batch))}
LOW = ("Wang_b4_00", "Xin_b5_00")  # 298 common genes + RARE9 = 299 detected: dropped
EDGE = "Baron_b1_00"  # exactly 300 detected genes: kept
COMMON = [f"G{g:03d}" for g in range(310)]
RARE = {"RARE10": 10, "RARE9": 9, "RARE5": 5, "ZERO": 0}  # detected in this many cells that pass min_genes
SAMPLE_ORDER = CELLS[::-1]  # the sample table lists the cells in another order than the matrix header
KEPT_CELLS = [cell for cell in SAMPLE_ORDER if cell not in LOW]
KEPT_GENES = [*COMMON, "RARE10"]
ENTRY = read_yaml(REPO / "config/datasets.yaml")["tran2020_pancreas"]


def counts_table() -> pd.DataFrame:
    """Genes × cells counts: three cell types marked by 20 genes each, rare genes in normal cells only."""
    rng = np.random.default_rng(0)
    table = pd.DataFrame(0, index=[*COMMON, *RARE], columns=CELLS)
    for j, cell in enumerate(CELLS):
        detected = 300 if cell == EDGE else 298 if cell in LOW else len(COMMON)
        table.iloc[:detected, j] = rng.integers(1, 6, detected)
        marked = 20 * TYPES.index(LABEL[cell])
        table.iloc[marked : marked + 20, j] += 10
    normal = [cell for cell in CELLS if cell not in LOW and cell != EDGE]
    for gene, n in RARE.items():
        table.loc[gene, normal[:n]] = rng.integers(1, 6, n)
    table.loc["RARE9", list(LOW)] = 1
    return table


def matrix_text(table: pd.DataFrame, gene_column: str | None = None) -> str:
    """R's write.table(sep = "\\t", quote = F): the header names the cells only, or (col.names = NA) the gene
    column first."""
    header = [gene_column] if gene_column is not None else []
    lines = ["\t".join([*header, *table.columns])]
    lines += [
        f"{gene}\t" + "\t".join(f"{value:g}" for value in row) for gene, row in zip(table.index, table.to_numpy())
    ]
    return "\n".join(lines) + "\n"


def samples_text(
    columns: tuple[str, str] = ("batchlb", "celltype"),
    order: list[str] = SAMPLE_ORDER,
    renamed: dict[str, str] | None = None,
) -> str:
    """The sample table as R writes it (no name for the id column); ``renamed``: ids written differently."""
    batch, label = columns
    lines = ["\t".join(["batch", batch, label, "ncount_rna"])]
    lines += [
        f"{(renamed or {}).get(cell, cell)}\t{BATCHES.index(cell[:-3]) + 1}\t{cell[:-3]}\t{LABEL[cell]}\t1000"
        for cell in order
    ]
    return "\n".join(lines) + "\n"


def write_pair(folder, matrix: str | None = None, samples: str | None = None) -> dict[str, str]:
    paths = {MATRIX: folder / MATRIX, SAMPLES: folder / SAMPLES}
    paths[MATRIX].write_bytes(gzip.compress((matrix or matrix_text(counts_table())).encode()))
    paths[SAMPLES].write_bytes(gzip.compress((samples or samples_text()).encode()))
    return {name: str(path) for name, path in paths.items()}


def test_the_entry_pins_the_lfs_objects_and_the_papers_filter():
    files = {file["name"]: file for file in ENTRY["files"]}
    assert files[MATRIX]["sha256"] == "68ac90f36dbad771a7489d199c4de7c90edf5587742f254311d866ad9f50e5ba"
    assert files[SAMPLES]["sha256"] == "f163b77b5b218da375fa6c1e6a4ac09bc8061132ce0f22d383983f7e3417cb2c"
    lfs = "https://media.githubusercontent.com/media/JinmiaoChenLab/Batch-effect-removal-benchmarking/master/Data/dataset4/"
    assert {name: file["url"] for name, file in files.items()} == {name: lfs + name for name in (MATRIX, SAMPLES)}
    params = ENTRY["params"]
    assert (params["min_genes"], params["min_cells"], params["expected_cells"]) == (300, 10, 14767)
    assert (params["label_key"], params["batch_key"]) == ("celltype", "batchlb")


def test_download_verifies_both_checksums(server, tmp_path):
    bodies = {name: open(path, "rb").read() for name, path in write_pair(tmp_path).items()}
    for name, body in bodies.items():
        server.routes[f"/{name}"] = ok(body)
    entries = {
        file["name"]: file
        | {"url": server.url(f"/{file['name']}"), "sha256": hashlib.sha256(bodies[file["name"]]).hexdigest()}
        for file in ENTRY["files"]
    }
    pins = tmp_path / "resources/checksums.json"
    for name, entry in entries.items():
        target = tmp_path / "resources" / name
        assert fetch_registry_file(entry, target, pin_file=pins) == entry["sha256"]
        assert target.read_bytes() == bodies[name]
    assert not pins.exists()  # real digests: nothing pinned on first fetch

    server.routes[f"/{SAMPLES}"] = ok(bodies[SAMPLES][:-1] + b"\n")  # the served file changed
    target = tmp_path / "again" / SAMPLES
    with pytest.raises(DownloadError, match=f"checksum mismatch .* expected sha256 {entries[SAMPLES]['sha256']}"):
        fetch_registry_file(entries[SAMPLES], target, pin_file=pins)
    assert not target.exists()


def test_filtering_keeps_the_hand_computed_cells_and_genes(tmp_path):
    prepared = prepare_tran2020("tran2020_pancreas", ENTRY["params"], 0, write_pair(tmp_path))
    assert list(prepared.obs_names) == KEPT_CELLS  # the sample table's order, the two 299-gene cells dropped
    assert list(prepared.var_names) == KEPT_GENES
    assert prepared.obs["label"].tolist() == [LABEL[cell] for cell in KEPT_CELLS]
    assert prepared.obs["batch"].tolist() == [cell[:-3] for cell in KEPT_CELLS]
    counts = counts_table().loc[KEPT_GENES, KEPT_CELLS].T.to_numpy()
    np.testing.assert_array_equal(prepared.layers["counts"].toarray(), counts)
    lognorm = np.log1p(
        counts / counts.sum(axis=1, keepdims=True) * 1e4
    )  # over the QC-passed genes, as any count source
    np.testing.assert_allclose(prepared.layers["lognorm"].toarray(), lognorm, rtol=1e-5)
    assert prepared.uns["tran2020"] == {
        "cells_in_file": 100,
        "cells_in_file_per_batch": dict.fromkeys(BATCHES, 20),
        "cells": 98,
        "cells_per_batch": {"Baron_b1": 20, "Mutaro_b2": 20, "Segerstolpe_b3": 20, "Wang_b4": 19, "Xin_b5": 19},
        "values": "counts",
        "non_integer_values": 0,
    }
    record = prepared.uns["preprocess"]
    assert (record["min_genes"], record["min_cells"], record["cells_after_qc"], record["genes_after_qc"]) == (
        300,
        10,
        98,
        311,
    )
    assert (prepared.uns["label_key"], prepared.uns["batch_key"]) == ("celltype", "batchlb")
    prepared.uns |= {"dataset_id": "tran2020_pancreas", "track": "representation"}
    check_prepared(prepared, "prepared.h5ad")


@pytest.mark.parametrize("gene_column", [None, "", "gene"])
def test_either_header_layout_names_the_cells(tmp_path, gene_column):
    text = matrix_text(counts_table().iloc[:2], gene_column)
    header, first = text.splitlines(keepends=True)[:2]
    assert header_cells(header, first, "m.txt.gz").tolist() == CELLS


def test_a_count_other_than_the_papers_is_warned_with_both_numbers(tmp_path, caplog):
    files = write_pair(tmp_path)
    with caplog.at_level(logging.WARNING, logger="celldag.data.tran2020"):
        prepare_tran2020("tran2020_pancreas", ENTRY["params"], 0, files)
    assert caplog.messages == [
        "tran2020_pancreas: 98 cells after filtering (min_genes 300, min_cells 10), but the paper "
        "reports 14767; uns['tran2020'] has the cells per batch"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="celldag.data.tran2020"):
        prepare_tran2020("tran2020_pancreas", ENTRY["params"] | {"expected_cells": 98}, 0, files)
    assert caplog.messages == []


@pytest.mark.parametrize("expected", ["14767", 0, True])
def test_expected_cells_must_be_a_count(tmp_path, expected):
    with pytest.raises(
        InputError, match=f"^tran2020 params: expected_cells must be null or an integer >= 1, got {expected!r}$"
    ):
        prepare_tran2020("tran2020_pancreas", ENTRY["params"] | {"expected_cells": expected}, 0, write_pair(tmp_path))


def test_non_integer_values_are_log_normalised_without_counts(tmp_path, caplog):
    table = counts_table().astype(float)
    xin = [cell for cell in CELLS if cell.startswith("Xin_b5")]
    table[xin] *= 0.37  # RPKM-like values for one study
    with caplog.at_level(logging.WARNING, logger="celldag.data.tran2020"):
        prepared = prepare_tran2020("tran2020_pancreas", ENTRY["params"], 0, write_pair(tmp_path, matrix_text(table)))
    fractional = int((table[xin] % 1 != 0).to_numpy().sum())
    assert "counts" not in prepared.layers  # scVI: not_applicable
    assert (
        prepared.uns["tran2020"]["values"] == "lognorm" and prepared.uns["tran2020"]["non_integer_values"] == fractional
    )
    assert f"holds {fractional} non-integer values" in caplog.text
    assert list(prepared.obs_names) == KEPT_CELLS and list(prepared.var_names) == KEPT_GENES  # the same filter
    values = table.loc[:, KEPT_CELLS].to_numpy()  # totals over every gene of the file: normalised before the QC
    lognorm = np.log1p(values / values.sum(axis=0) * 1e4)[[table.index.get_loc(g) for g in KEPT_GENES]].T
    np.testing.assert_allclose(prepared.layers["lognorm"].toarray(), lognorm, rtol=1e-5)


def _edited(gene: str, edit) -> str:
    """The matrix text with the fields of ``gene``'s row (its name first) changed by ``edit``."""
    lines = matrix_text(counts_table()).splitlines()
    row = [*COMMON, *RARE].index(gene) + 1
    lines[row] = "\t".join(edit(lines[row].split("\t")))
    return "\n".join(lines) + "\n"


def _with_value(cell: str, value: str):
    return lambda fields: [value if i == CELLS.index(cell) + 1 else field for i, field in enumerate(fields)]


BAD_INPUTS = {
    "a label column under another name": (
        lambda: {"samples": samples_text(columns=("batchlb", "CellType"))},
        "{samples}: column 'celltype': not found (columns: ['batch', 'batchlb', 'CellType', 'ncount_rna'])",
    ),
    "a batch column under another name": (
        lambda: {"samples": samples_text(columns=("batch_label", "celltype"))},
        "{samples}: column 'batchlb': not found (columns: ['batch', 'batch_label', 'celltype', 'ncount_rna'])",
    ),
    "cell ids that differ between the files": (
        lambda: {"samples": samples_text(renamed={"Mutaro_b2_05": "Mutaro_b2_5"})},
        "{samples}: cell ids (first column): differ from the header of myData_pancreatic_5batches.txt.gz: 1 only "
        "here (first: ['Mutaro_b2_5']), 1 only there (first: ['Mutaro_b2_05'])",
    ),
    "a cell missing from the sample table": (
        lambda: {"samples": samples_text(order=SAMPLE_ORDER[1:])},
        "{samples}: cell ids (first column): differ from the header of myData_pancreatic_5batches.txt.gz: 0 only "
        "here (first: []), 1 only there (first: ['Xin_b5_19'])",
    ),
    "a value that is not a number": (
        lambda: {"matrix": _edited("G005", _with_value("Mutaro_b2_03", "NA"))},
        "{matrix}: line 7 (gene 'G005'): 'NA' for cell 'Mutaro_b2_03' is not a number",
    ),
    "a negative value": (
        lambda: {"matrix": _edited("RARE5", _with_value("Baron_b1_02", "-1"))},
        "{matrix}: line 314 (gene 'RARE5'): -1 for cell 'Baron_b1_02': values must be finite and >= 0",
    ),
    "a row one value short": (
        lambda: {"matrix": _edited("G100", lambda fields: fields[:-1])},
        "{matrix}: line 102 (gene 'G100'): 99 values, but the header names 100 cells",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_naming_the_file_and_field(tmp_path, case):
    make, expected = BAD_INPUTS[case]
    files = write_pair(tmp_path, **make())
    message = expected.format(samples=files[SAMPLES], matrix=files[MATRIX])
    with pytest.raises(ContractError) as raised:
        prepare_tran2020("tran2020_pancreas", ENTRY["params"], 0, files)
    assert str(raised.value) == message and "\n" not in message
    if "{samples}" in expected:  # `celldag validate` (and the validate_dataset job) finds it before any parsing
        assert prepare_tran2020.check_source(ENTRY["params"], files).problems == [message]


def test_an_uncompressed_matrix_is_named(tmp_path):
    files = write_pair(tmp_path)
    (tmp_path / MATRIX).write_text(matrix_text(counts_table()))
    with pytest.raises(ContractError, match=f"^{files[MATRIX]}: file: not gzip-compressed$"):
        prepare_tran2020("tran2020_pancreas", ENTRY["params"], 0, files)


def test_validate_reports_the_cells_per_batch(tmp_path):
    report = prepare_tran2020.check_source(ENTRY["params"], write_pair(tmp_path))
    assert report.problems == [] and dict(report.facts) == {
        "cells in file": "100",
        "batches in file": "Baron_b1 20, Mutaro_b2 20, Segerstolpe_b3 20, Wang_b4 20, Xin_b5 20",
    }


@pytest.mark.e2e
def test_end_to_end_download_prepare_and_score(server, tmp_path):
    files = write_pair(tmp_path)
    workdir = copy_workflow(tmp_path / "wf")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    for file in datasets["tran2020_pancreas"]["files"]:
        body = open(files[file["name"]], "rb").read()
        server.routes[f"/{file['name']}"] = ok(body)
        file |= {"url": server.url(f"/{file['name']}"), "sha256": hashlib.sha256(body).hexdigest()}
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    config = {"datasets": ["tran2020_pancreas"], "methods": ["pca"], "seeds": [0]}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "results/default/scores.parquet")  # the scores: figures and report have their own tests

    scores = pd.read_parquet(workdir / "results/default/scores.parquet")
    assert set(scores["dataset"]) == {"tran2020_pancreas"} and (scores["status"] == "ok").all()
    totals = scores.loc[scores["metric"] == "total", "value"]
    assert len(totals) == 1 and totals.between(0, 1).all()
    assert set(scores["metric"]) >= {"ilisi", "silhouette_batch", "nmi_kmeans"}  # five batches: batch metrics apply
    (log,) = glob.glob(str(workdir / "results/logs/prepare_dataset/tran2020_pancreas/*/seed0.log"))
    assert "98 cells after filtering (min_genes 300, min_cells 10), but the paper reports 14767" in open(log).read()
    (report,) = glob.glob(str(workdir / "results/data/tran2020_pancreas/*/validation.txt"))
    assert "Baron_b1 20, Mutaro_b2 20, Segerstolpe_b3 20, Wang_b4 20, Xin_b5 20" in open(report).read()
