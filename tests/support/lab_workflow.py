"""A lab's own Snakemake workflow that uses celldag as a module, written into a folder for the e2e tests.

The folder holds only what a lab would write: an outer Snakefile (`module celldag` + `use rule *`, and
a rule of its own that builds h5ad files from CSV tables), its config with celldag's part under
`celldag:`, its registry files `lab/datasets.yaml` and `lab/methods.yaml`, a small package `labpkg`
with one lineage method (found through PYTHONPATH), and the CSV inputs. Nothing of celldag is copied.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[2]
N_LEAVES, CELLS_PER_LEAF, N_GENES = 16, 4, 40

OUTER_SNAKEFILE = """\
configfile: "config/config.yaml"


module celldag:
    snakefile:
        {snakefile!r}
    config:
        config["celldag"]


use rule * from celldag as celldag_*


# the lab's own step: h5ad files (and the true tree as Newick) from its CSV tables
rule lab_h5ad:
    input:
        lineage_counts="data/lineage_counts.csv",
        lineage_cells="data/lineage_cells.csv",
        lineage_edges="data/lineage_edges.csv",
        rna_counts="data/rna_counts.csv",
        rna_cells="data/rna_cells.csv",
    output:
        lineage="build/lineage.h5ad",
        tree="build/tree.nwk",
        rna="build/rna.h5ad",
    log:
        "logs/lab_h5ad.log",
    conda:
        "envs/lab.yaml"
    localrule: True
    script:
        "scripts/lab_h5ad.py"
"""

BUILD_SCRIPT = '''\
"""The lab's CSV tables → the h5ad files and Newick tree its celldag registry entries name."""
import anndata
import pandas as pd


def newick(edges: pd.DataFrame) -> str:
    children = edges.groupby("parent")["child"].apply(list).to_dict()
    root = (set(edges["parent"]) - set(edges["child"])).pop()

    def subtree(node):
        return f"({','.join(subtree(child) for child in children[node])})" if node in children else node

    return subtree(root) + ";"


def cells(counts_csv, cells_csv) -> anndata.AnnData:
    counts = pd.read_csv(counts_csv, index_col="cell")
    obs = pd.read_csv(cells_csv, index_col="cell", keep_default_na=False, na_values=[""]).loc[counts.index]
    return anndata.AnnData(X=counts.to_numpy(dtype="float64"), obs=obs, var=pd.DataFrame(index=counts.columns))


inputs, outputs = snakemake.input, snakemake.output
cells(inputs.lineage_counts, inputs.lineage_cells).write_h5ad(outputs.lineage)
with open(outputs.tree, "w") as handle:
    handle.write(newick(pd.read_csv(inputs.lineage_edges)) + "\\n")
cells(inputs.rna_counts, inputs.rna_cells).write_h5ad(outputs.rna)
'''

LAB_METHOD = '''\
"""A lab's lineage method: a tree from correlation distances of the leaf profiles."""
import numpy as np

from celldag.lineage.reconstruct import reconstruct
from celldag.lineage.tree import to_newick
from celldag.methods import MethodResult


def run(inputs, params, seed):
    profiles = inputs.features
    distances = np.clip(1.0 - np.corrcoef(profiles), 0.0, None)
    np.fill_diagonal(distances, 0.0)
    tree = reconstruct((distances + distances.T) / 2, inputs.names, params["reconstruction"])
    return MethodResult(embedding=profiles, tree_newick=to_newick(tree))


run.accepted_params = ("reconstruction",)
'''

LAB_DATASETS = {
    "lab_lineage": {
        "track": "lineage",
        "source": "local",
        "loader": "celldag.data.h5ad:prepare_lineage_h5ad",
        "description": "the lab's lineage-traced cells, pseudo-bulked per leaf",
        "license": "lab-internal",
        "files": [
            {"name": "lineage.h5ad", "path": "build/lineage.h5ad"},
            {"name": "tree.nwk", "path": "build/tree.nwk"},
        ],
        "params": {"file": "lineage.h5ad", "leaf_key": "leaf", "newick": "tree.nwk", "replicates": True},
    },
    "lab_rna": {
        "track": "representation",
        "source": "local",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "description": "the lab's scRNA-seq counts over two batches",
        "license": "lab-internal",
        "files": [{"name": "rna.h5ad", "path": "build/rna.h5ad"}],
        "params": {"file": "rna.h5ad", "label_key": "cell_type", "batch_key": "batch", "counts_layer": "X"},
    },
}
LAB_METHODS = {
    "lab_corr_nj": {
        "track": "lineage",
        "run": "labpkg.trees:run",
        "kind": "method",
        "description": "the lab's own: NJ on correlation distances",
        "params": {"reconstruction": "nj"},
    },
}
CELLDAG_CONFIG = {
    "name": "lab",
    "datasets": ["lab_lineage", "lab_rna"],
    "methods": ["nj_raw", "upgma_raw", "lab_corr_nj", "pca"],
    "seeds": [0],
    "registries": {"datasets": ["lab/datasets.yaml"], "methods": ["lab/methods.yaml"]},
}


LAB_ENV = {
    "channels": ["conda-forge", "nodefaults"],
    "dependencies": ["python=3.11", "pandas=2.3.3", "anndata=0.12.19"],
}


def write_lab_workflow(folder: Path, snakefile: str | None = None) -> Path:
    """The lab's workflow folder; ``snakefile``: celldag's module (default: this checkout's, by a relative
    path as a lab with celldag beside its pipeline would write it; or a URL of a remote source)."""
    for sub in ("config", "lab", "labpkg_root/labpkg", "scripts", "data", "envs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    snakefile = snakefile or os.path.relpath(REPO / "workflow/Snakefile", folder)
    (folder / "Snakefile").write_text(OUTER_SNAKEFILE.format(snakefile=snakefile))
    (folder / "envs/lab.yaml").write_text(yaml.safe_dump(LAB_ENV))
    (folder / "config/config.yaml").write_text(
        yaml.safe_dump({"lab_contact": "lab@example.org", "celldag": CELLDAG_CONFIG})
    )
    (folder / "lab/datasets.yaml").write_text(yaml.safe_dump(LAB_DATASETS, sort_keys=False))
    (folder / "lab/methods.yaml").write_text(yaml.safe_dump(LAB_METHODS, sort_keys=False))
    (folder / "labpkg_root/labpkg/__init__.py").write_text("")
    (folder / "labpkg_root/labpkg/trees.py").write_text(LAB_METHOD)
    (folder / "scripts/lab_h5ad.py").write_text(BUILD_SCRIPT)
    write_csv_tables(folder / "data")
    return folder


def write_csv_tables(data: Path, seed: int = 0) -> None:
    """Counts of cells on a balanced 16-leaf tree (expression drifting along it) and of 3 cell types × 2 batches."""
    rng = np.random.default_rng(seed)
    edges, log_rate = [], {"n0": rng.normal(1.0, 0.3, N_GENES)}
    for node in range(N_LEAVES - 1):  # heap order: node i has children 2i+1 and 2i+2
        for child in (2 * node + 1, 2 * node + 2):
            name = f"n{child}" if child < N_LEAVES - 1 else f"leaf{child - N_LEAVES + 1:02d}"
            edges.append((f"n{node}", name))
            log_rate[name] = log_rate[f"n{node}"] + rng.normal(0.0, 0.2, N_GENES)
    leaves = sorted(name for name in log_rate if name.startswith("leaf"))
    pd.DataFrame(edges, columns=["parent", "child"]).to_csv(data / "lineage_edges.csv", index=False)
    cell_leaf = np.repeat(leaves, CELLS_PER_LEAF)
    counts = rng.poisson(np.exp(np.array([log_rate[leaf] for leaf in cell_leaf])))
    names = [f"c{i:03d}" for i in range(len(cell_leaf))]
    genes = [f"g{j:02d}" for j in range(N_GENES)]
    pd.DataFrame(counts, index=pd.Index(names, name="cell"), columns=genes).to_csv(data / "lineage_counts.csv")
    pd.DataFrame({"cell": names, "leaf": cell_leaf}).to_csv(data / "lineage_cells.csv", index=False)

    types, batches, per_group, n_genes = ["T", "B", "NK"], ["b1", "b2"], 40, 60
    type_means = rng.gamma(2.0, 2.0, (len(types), n_genes))
    rows, meta = [], []
    for b, batch in enumerate(batches):
        for t, cell_type in enumerate(types):
            rows.append(rng.poisson(type_means[t] * (1.0 + 0.5 * b), (per_group, n_genes)))
            meta += [(cell_type, batch)] * per_group
    cells = [f"r{i:03d}" for i in range(len(meta))]
    rna = pd.DataFrame(
        np.vstack(rows), index=pd.Index(cells, name="cell"), columns=[f"GENE{j:02d}" for j in range(n_genes)]
    )
    rna.to_csv(data / "rna_counts.csv")
    pd.DataFrame(meta, index=pd.Index(cells, name="cell"), columns=["cell_type", "batch"]).to_csv(
        data / "rna_cells.csv"
    )


def lab_env(folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the lab's runs: its package on PYTHONPATH (jobs inherit it)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder / "labpkg_root"), env.get("PYTHONPATH")]))
    return env


def snakemake_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", *args]
