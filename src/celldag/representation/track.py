"""The representation track: cells × genes; methods return a cell embedding (and maybe a gene embedding).

Prepared dataset: X scaled log-normalised expression (z-scored, clipped), ``layers['lognorm']``,
optional integer ``layers['counts']``, ``obs`` label / batch / split (train, val). Scores: scIB
metrics of the cell embedding, and marker-gene clustering in gene-embedding space
(``celldag.representation.scoring``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from celldag.contracts import ContractError, require_finite_matrix
from celldag.embeddings.table import GeneTable
from celldag.tracks import COMMON_FIGURES, Figure, Metric, MetricGroup, Track

# the embedding's metrics are ranked against a Gaussian random embedding with PCA's dimension and per-dimension
# variance (the null: no information about cells) and one-hot cell types plus noise (the oracle); both mix batches
# completely, so a batch-correction score is read beside bio conservation (docs/report.md, "Floor cards").
# celldag.methods.control_embeddings. The gene-embedding metrics have no control: the controls embed no gene
CONTROLS = {"null": "null_embedding/random", "oracle": "oracle_embedding/default"}


def _higher(*names: str) -> tuple[Metric, ...]:
    return tuple(Metric(name, higher_is_better=True, **CONTROLS) for name in names)


TRACK = Track(
    x_dtype="float32",  # cells × genes runs to tens of thousands of each: float32, as the models train in
    check_prepared="celldag.representation.track:check_prepared",
    check_output="celldag.representation.track:check_output",
    method_input="celldag.representation.track:method_input",
    inputs={
        "counts": "raw integer counts (layers['counts'])",
        "batches": "two or more batches (obs['batch'])",
        "truth": "the cell-type labels (obs['label']), for an oracle control (kind: control only; the methods schema "
        "refuses it elsewhere): where a metric's best reachable score lies",
    },
    scorer="celldag.representation.scoring:score_seed",
    metric_groups=(
        # Benchmarker's aggregates (0.6 bio + 0.4 batch, no min-max scaling); nmi/ari_leiden and
        # silhouette_batch (the paper's batchASW) are reported beside them, not inside
        MetricGroup(
            "scIB",
            tuple(
                Metric(name, higher_is_better=True, core=True, derived=True, **CONTROLS)
                for name in ("total", "bio_conservation", "batch_correction")
            ),
        ),
        MetricGroup(
            "bio conservation",
            _higher(
                "nmi_kmeans", "ari_kmeans", "nmi_leiden", "ari_leiden", "silhouette_label", "clisi", "isolated_labels"
            ),
        ),
        MetricGroup(
            "batch correction",
            (
                *_higher("ilisi", "silhouette_batch", "bras", "kbet", "graph_connectivity"),
                # scib-metrics sets a negative score (batch variance explained rose after integration) to 0
                Metric("pcr_comparison", higher_is_better=True, clipped_at=0.0, **CONTROLS),
            ),
        ),
        MetricGroup(
            "marker genes (gene-embedding space)",
            (
                Metric("marker_db", higher_is_better=False),
                Metric("marker_db_static", higher_is_better=False),
                Metric("marker_ch", higher_is_better=True),
                Metric("marker_ch_static", higher_is_better=True),
                Metric(
                    "n_marker_genes", higher_is_better=True, count=True, role="diagnostic"
                ),  # how many markers the gene table holds
            ),
        ),
    ),
    dataset_facts="celldag.representation.track:dataset_facts",
    figures=(
        *COMMON_FIGURES,
        Figure("umap", "celldag.representation.figures:umap", "captions/umap.rst", needs=("outputs",)),
        Figure(
            "markers", "celldag.representation.figures:markers", "captions/markers.rst", needs=("outputs", "tables")
        ),
        Figure("paired", "celldag.representation.figures:paired", "captions/paired.rst", needs=("scores",)),
    ),
)
SPLITS = ("train", "val")


@dataclass(frozen=True)
class RepresentationInput:
    """What a representation method's ``run`` receives. Cell-type labels are given to no method: only to an oracle
    control that ``needs: [truth]`` (``PRIVILEGED``; the runner sets them to None for every other run).

    Attributes:
        names: Cell names, one per row.
        features: ``(n, p)`` scaled log-normalised expression (z-scored, clipped at 10).
        gene_names: ``(p,)`` column names of ``features``.
        batch: ``(n,)`` batch label per cell (strings).
        train_mask: ``(n,)`` bool: cells a method may fit on; the rest is validation.
        lognorm: ``(n, p)`` log-normalised expression before scaling (non-negative).
        counts: ``(n, p)`` raw integer counts (scipy sparse or ndarray), or None where the dataset has none;
            methods listing ``needs: [counts]`` always get them.
        gene_embedding: The static gene embeddings the method's params name (``embedding``).
        work_dir: The run's directory: checkpoints live here, so a killed job resumes.
        labels: ``(n,)`` str cell types: the truth the scores are computed on, oracles only.
    """

    PRIVILEGED: ClassVar[dict[str, tuple[str, ...]]] = {"labels": ("truth",)}

    names: tuple[str, ...]
    features: np.ndarray
    gene_names: tuple[str, ...]
    batch: np.ndarray
    train_mask: np.ndarray
    lognorm: np.ndarray
    counts: object | None
    gene_embedding: GeneTable | None = None
    work_dir: str | None = None
    labels: np.ndarray | None = None

    def unmet(self, need: str) -> str | None:
        if need == "truth" and self.labels is None:
            return "needs the cell-type labels; this dataset has none"
        if need == "counts" and self.counts is None:
            return "models raw counts; this dataset has none"
        if need == "batches" and len(np.unique(self.batch)) < 2:
            return "needs two or more batches; this dataset has one"
        return None


def dense(matrix) -> np.ndarray:
    return np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix, dtype=np.float32)


def method_input(prepared, work_dir: str | None, gene_table: GeneTable | None = None) -> RepresentationInput:
    return RepresentationInput(
        names=tuple(prepared.obs_names),
        features=dense(prepared.X),
        gene_names=tuple(prepared.var_names),
        batch=prepared.obs["batch"].astype(str).to_numpy(),
        train_mask=(prepared.obs["split"] == "train").to_numpy(),
        lognorm=dense(prepared.layers["lognorm"]),
        counts=prepared.layers["counts"] if "counts" in prepared.layers else None,
        gene_embedding=gene_table,
        work_dir=work_dir,
        labels=prepared.obs["label"].astype(str).to_numpy(),
    )


def check_prepared(adata, path: str) -> None:
    """Cells × genes: scaled X, log-normalised layer, optional integer counts, label / batch / split."""
    if not adata.var_names.is_unique:
        duplicated = adata.var_names[adata.var_names.duplicated()][:3].tolist()
        raise ContractError(path, "var_names", f"must be unique; duplicated: {duplicated}")
    if "lognorm" not in adata.layers:
        raise ContractError(path, "layers['lognorm']", "missing (log-normalised expression)")
    require_finite_matrix(adata.layers["lognorm"], path, "layers['lognorm']", adata.n_obs)
    if "counts" in adata.layers:
        counts = adata.layers["counts"]
        values = counts.data if hasattr(counts, "data") and hasattr(counts, "toarray") else np.asarray(counts)
        if values.size and (values.min() < 0 or not np.array_equal(values, np.round(values))):
            raise ContractError(path, "layers['counts']", "must hold non-negative integer counts")
    for column in ("label", "batch", "split"):
        if column not in adata.obs:
            raise ContractError(path, f"obs['{column}']", "missing")
        if adata.obs[column].isna().any():
            raise ContractError(path, f"obs['{column}']", f"{int(adata.obs[column].isna().sum())} missing values")
    present = set(adata.obs["split"].astype(str))
    if not present <= set(SPLITS) or "train" not in present:
        raise ContractError(path, "obs['split']", f"must hold 'train' (and 'val') only, got {sorted(present)}")


def check_output(adata, path: str) -> None:
    if "X_emb" not in adata.obsm:
        raise ContractError(path, "obsm['X_emb']", "missing (a representation method must return an embedding)")


def _counts(series) -> str:
    counts = series.value_counts()
    shown = ", ".join(f"{name} {count}" for name, count in counts.head(6).items())
    return f"{counts.size}: {shown}" + (", …" if counts.size > 6 else "")


def dataset_facts(prepared, entry: dict) -> list[tuple[str, str]]:
    split = prepared.obs["split"].value_counts()
    n_batches = prepared.obs["batch"].nunique()
    facts = [
        ("cells", f"{prepared.n_obs} (train {split.get('train', 0)}, val {split.get('val', 0)})"),
        ("genes", f"{prepared.n_vars} ({prepared.uns['preprocess']['genes_in']} in the source)"),
        ("labels", _counts(prepared.obs["label"])),
        ("batches", _counts(prepared.obs["batch"])),
        ("bio-conservation", "yes (scIB metrics on the labels)"),
        ("batch correction", "yes" if n_batches > 1 else "no: one batch (batch metrics are not computed)"),
    ]
    markers = entry.get("markers", {})
    if markers:
        wanted = {gene for genes in markers.values() for gene in genes}
        facts.append(("marker genes", f"{len(wanted & set(prepared.var_names))} of {len(wanted)} in the data"))
    return facts
