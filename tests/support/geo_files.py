"""GSE126954's three supplementary files in GEO's text formats, small and hand-checkable, and the ``geo`` fixture
that serves them from 127.0.0.1 (tests/conftest.py registers it for every test: test_packer2019, test_e2e_download)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from celldag.data.packer2019 import CELL_ANNOTATION, GENE_ANNOTATION, MATRIX


def geo_files() -> dict[str, bytes]:
    """The three GSE126954 supplementary files, gzip-compressed, in the GEO text formats."""
    counts = counts_matrix()
    genes, cells = np.nonzero(counts)
    matrix = ["%%MatrixMarket matrix coordinate integer general", f"{counts.shape[0]} {counts.shape[1]} {genes.size}"]
    # MatrixMarket is 1-based; GEO's file is sorted by cell, then gene
    matrix += [f"{g + 1} {c + 1} {counts[g, c]}" for c, g in sorted(zip(cells.tolist(), genes.tolist()))]
    # R's write.csv: an unnamed row-name column, quoted strings, NA and TRUE/FALSE bare
    header = (
        '"","cell","n.umi","time.point","batch","Size_Factor","cell.type","cell.subtype","plot.cell.type",'
        '"raw.embryo.time","embryo.time","embryo.time.bin","raw.embryo.time.bin","lineage",'
        '"passed_initial_QC_or_later_whitelisted"'
    )
    rows = [header]
    for cell, lineage in enumerate(LINEAGES):
        barcode = f'"AAACCTGAGAC{cell:05d}-300.1.1"'
        quoted = lineage if lineage in ('""', "NA") else f'"{lineage}"'
        qc = "FALSE" if cell in QC_FAILED else "TRUE"
        rows.append(
            f'{barcode},{barcode},{int(counts[:, cell].sum())},"300_minutes","Waterston_300_minutes",'
            f'1.02,NA,NA,NA,330,350,"330-390","330-390",{quoted},{qc}'
        )
    gene_rows = ['"","id","gene_short_name"'] + [f'"{gid}","{gid}","{name}"' for gid, name in GENES]
    texts = {MATRIX: matrix, CELL_ANNOTATION: rows, GENE_ANNOTATION: gene_rows}
    return {name: gzip.compress(("\n".join(lines) + "\n").encode()) for name, lines in texts.items()}


@pytest.fixture
def geo(tmp_path):
    """Serve the GEO files from 127.0.0.1; yields (url of the suppl/ folder, {file: sha256})."""
    suppl = tmp_path / "geo" / "suppl"
    suppl.mkdir(parents=True)
    checksums = {}
    for name, data in geo_files().items():
        (suppl / name).write_bytes(data)
        checksums[name] = hashlib.sha256(data).hexdigest()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(suppl)))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", checksums, suppl
    httpd.shutdown()
    httpd.server_close()


LINEAGES = [
    "ABalaa",
    "ABalaa",
    "ABalaa",
    "ABalap",
    "ABalap",
    "ABala",
    "MSaa",
    "MSa",
    "MSxa",
    "MSaa",
    "Ea",
    "Ea/Dp",
    "Ep",
    "Ep",
    "Ex",
    "Cpa",
    "ABalaa/Cpa",
    "28_cell_or_earlier",
    "Dxa",
    "Dpa",
    '""',
    "NA",
    "ABalaa",
]


QC_FAILED = {19, 22}


GENES = [
    ("WBGene00000001", "lin-1"),
    ("WBGene00000002", "low-1"),
    ("WBGene00000003", "flat-1"),
    ("WBGene00000004", "spl-1"),
    ("WBGene00000005", "lin-1"),
]


def counts_matrix() -> np.ndarray:
    counts = np.zeros((len(GENES), len(LINEAGES)), dtype=np.int64)
    for cell, leaf in LEAF_OF_CELL.items():
        for gene, values in LEAF_CONSTANT.items():
            counts[gene, cell] = values[leaf]
        counts[2, cell] = 2
        counts[3, cell] = 5
    counts[1, [0, 1, 2]] = 3
    counts[1, 22] = 50
    counts[3, 10], counts[3, 11] = 0, 4
    counts[0, 15] = 100  # the dropped 1-cell leaf Cpa must not reach any pseudo-bulk
    return counts


LEAF_OF_CELL = {
    **dict.fromkeys([0, 1, 2], "ABalaa"),
    3: "ABalap",
    4: "ABalap",
    **dict.fromkeys([6, 7, 8, 9], "MSaa"),
    10: "Ea",
    11: "Ea",
    12: "Ep",
    13: "Ep",
}


LEAF_CONSTANT = {  # gene → value in each used cell of a leaf
    0: {"ABalaa": 3, "ABalap": 0, "Ea": 1, "Ep": 1, "MSaa": 7},
    4: {"ABalaa": 1, "ABalap": 1, "Ea": 0, "Ep": 0, "MSaa": 10},
}
