"""``celldag validate``: check a registry dataset without running anything else, and say what it allows.

The report lists the dataset's size, labels and batches, what each track can do with it, and every
problem found at once: missing or unverified files, and (for the ``h5ad`` / ``lineage_h5ad`` loaders)
every problem of the source file. A dataset without problems is prepared once (seed 0) and held to
the prepared-dataset contract, exactly as the pipeline's first job would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from celldag import plan
from celldag.errors import InputError
from celldag.registry import Registries



@dataclass
class Report:
    dataset_id: str
    track: str
    facts: list[tuple[str, str]] = field(default_factory=list)  # (what, value), in print order
    problems: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"dataset {self.dataset_id} ({self.track} track)"]
        lines += [f"  {what + ':':<22} {value}" for what, value in self.facts]
        if self.problems:
            lines.append(f"  {len(self.problems)} problem{'s' if len(self.problems) > 1 else ''}:")
            lines += [f"    - {problem}" for problem in self.problems]
        else:
            lines.append("  no problems found")
        return "\n".join(lines)


def validate_dataset(dataset_id: str, registries: Registries) -> Report:
    """The report of one registry dataset; paths are relative to the working directory (the workflow's)."""
    from celldag.registry import SCHEMA_DIR, read_yaml

    id_pattern = read_yaml(SCHEMA_DIR / "datasets.schema.yaml")["propertyNames"]["pattern"]  # the registry's own rule
    if not re.match(id_pattern, dataset_id):
        raise InputError(f"{dataset_id!r} is not a dataset id: ids are lower-case letters, digits and '_', "
                         "never a path")  # fmt: skip
    if dataset_id not in registries.datasets:
        raise InputError(f"unknown dataset id {dataset_id!r}; known ids: {', '.join(sorted(registries.datasets))}")
    entry = registries.datasets[dataset_id]
    report = Report(dataset_id, entry["track"])
    files = plan.dataset_files(dataset_id, entry)
    report.problems += _file_problems(dataset_id, entry, files)
    if not report.problems and entry["loader"] in ("h5ad", "lineage_h5ad"):
        report.problems += _source_problems(entry, files)
    if report.problems:
        return report
    from celldag import contracts
    from celldag.prepare import prepare_dataset

    try:
        prepared = prepare_dataset(dataset_id, entry, 0, files)
        contracts.check_prepared_dataset(prepared, f"{dataset_id} (prepared, seed 0)")
    except (InputError, ValueError) as err:
        report.problems.append(str(err))
        return report
    track_facts = _lineage_facts if entry["track"] == "lineage" else _representation_facts
    report.facts += track_facts(prepared, dataset_id, entry, registries)
    return report


def _file_problems(dataset_id: str, entry: dict, files: dict[str, str]) -> list[str]:
    """Local files as preparation checks them; downloads present and matching their registry sha256 or pin."""
    from celldag.download import DownloadError, verify_pinned
    from celldag.io import sha256_file
    from celldag.prepare import local_file_problems
    from celldag.registry import PIN_ON_FIRST_FETCH

    problems = [str(problem) for problem in local_file_problems(entry)]
    for spec in entry.get("files", []):
        if "url" not in spec:
            continue
        path = files[spec["name"]]
        if not Path(path).is_file():
            problems.append(f"{path}: file: not found (downloaded by `snakemake {path}`)")
        elif spec["sha256"] != PIN_ON_FIRST_FETCH:
            digest = sha256_file(path)
            if digest != spec["sha256"]:
                problems.append(f"{path}: sha256: the registry gives {spec['sha256']}, the file has {digest}")
        else:
            try:
                verify_pinned(path, plan.DOWNLOAD_PINS.format(source=dataset_id))
            except DownloadError as err:
                problems.append(str(err))
    return problems


def _source_problems(entry: dict, files: dict[str, str]) -> list[str]:
    from celldag.data import h5ad

    own, rest, path = h5ad.source_params(entry["loader"], entry["params"], files)
    adata = h5ad.read_source(path)
    if entry["loader"] == "h5ad":
        return [str(problem) for problem in h5ad.representation_problems(adata, path, own, rest)]
    return [str(problem) for problem in h5ad.lineage_problems(adata, path, own, files)[0]]


def _lineage_facts(prepared, dataset_id: str, entry: dict, registries: Registries) -> list[tuple[str, str]]:
    replicates = "train" in prepared.layers
    return [
        ("leaves", f"{prepared.n_obs} (tree over the same leaves)"),
        ("features", str(prepared.n_vars)),
        ("replicate pair", "yes (train/test layers)" if replicates else "no (one profile per leaf)"),
        ("distance baselines", "nj_raw, nj_pca, upgma_raw: yes"),
        ("CellTreeQM settings", "all" if replicates else
         "high_level_partition, label_free (supervised / partially_labelled: not_applicable, no replicate pair)"),
    ]  # fmt: skip


def _representation_facts(prepared, dataset_id: str, entry: dict, registries: Registries) -> list[tuple[str, str]]:
    labels = prepared.obs["label"].value_counts()
    batches = prepared.obs["batch"].value_counts()
    split = prepared.obs["split"].value_counts()
    facts = [
        ("cells", f"{prepared.n_obs} (train {split.get('train', 0)}, val {split.get('val', 0)})"),
        ("genes", f"{prepared.n_vars} ({prepared.uns['preprocess']['genes_in']} in the source)"),
        ("labels", f"{labels.size}: " + ", ".join(f"{name} {count}" for name, count in labels.head(6).items())
         + (", …" if labels.size > 6 else "")),
        ("batches", f"{batches.size}: " + ", ".join(f"{name} {count}" for name, count in batches.head(6).items())
         + (", …" if batches.size > 6 else "")),
        ("bio-conservation", "yes (scIB metrics on the labels)"),
        ("batch correction", "yes" if batches.size > 1 else "no: one batch (batch metrics are not computed)"),
        ("count-based methods", "yes (raw counts)" if "counts" in prepared.layers
         else "no: no counts (scvi reports not_applicable)"),
    ]  # fmt: skip
    markers = entry.get("markers", {})
    if markers:
        wanted = {gene for genes in markers.values() for gene in genes}
        found = wanted & set(prepared.var_names)
        facts.append(("marker genes", f"{len(found)} of {len(wanted)} in the data"))
    facts += _gene_table_facts(prepared, dataset_id, registries)
    return facts


def _gene_table_facts(prepared, dataset_id: str, registries: Registries) -> list[tuple[str, str]]:
    """Gene overlap with every gene-embedding table already built for this dataset (built by embed_genes)."""
    from celldag.embeddings import match_genes, read_table

    facts = []
    for embedding in sorted(registries.embeddings):
        path = Path(plan.GENE_TABLE.format(embedding=embedding, dataset=dataset_id))
        if path.is_file():
            _, _, missing = match_genes(list(prepared.var_names), read_table(path))
            facts.append((f"genes in {embedding}", f"{prepared.n_vars - missing} of {prepared.n_vars}"))
    return facts
