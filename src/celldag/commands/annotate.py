"""``celldag annotate``: a lab's unlabelled cells annotated from a labelled reference (docs/annotation.md).

The reference is a prepared dataset of the representation track (``results/data/<dataset>/<key>/seed<s>.h5ad``,
what the workflow's ``annotate`` rule hands over for a registry dataset, or a registry dataset id naming it), or any
labelled h5ad, prepared here as ``prepare_h5ad`` would and cached by content (``prepared_plain``); the query a lab's
h5ad of counts or log-normalised values with its batches named. The reference's cells are split by the annotation
task's rule (train / calibration / held out). On the genes both share, the query is log-normalised as the reference
was, both are scaled together and embedded by a representation method of the registry, fitted on the reference's
train cells alone — so the calibration and held-out cells are out of the fit as the query is (transductive methods
see every cell's features, never labels); a classifier of the annotation track trains on the same train cells and
conformal sets are calibrated on the calibration cells (``celldag.annotation.query``). Every input problem is found
before any compute and stops with one line naming the file and field; the outputs are written only when everything is
done.

Writes to ``OUT``: ``annotated.h5ad`` (the query with ``obs`` columns ``celldag_call``, ``celldag_set``,
``celldag_set_size``, ``celldag_unknown_type``, ``celldag_batch_shift``), ``cells.tsv`` (the same per cell),
``batches.tsv`` (the shift test per batch), ``report.md`` and ``run.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from celldag import artifacts, contracts
from celldag.annotation import celltypist as celltypist_model
from celldag.annotation import conformal, novelty, shift
from celldag.annotation import query as annotation_query
from celldag.annotation.task import principal_components, soft_groups, split_cells
from celldag.annotation.track import SCORING_DEFAULTS, TASK_DEFAULTS, AnnotationInput
from celldag.artifacts import sha256_file
from celldag.document import Heading, Paragraph, Table, markdown
from celldag.errors import InputError
from celldag.jobs.download import DownloadError, configured_mirror, expected_sha256, fetch_registry_file
from celldag.jobs.prepare import prepare_dataset
from celldag.jobs.runner import call_method, unmet_need
from celldag.plan import DOWNLOAD_PINS, MODEL_SOURCE, PREPARED, data_key, method_needs, method_params, model_file
from celldag.provenance import RunClock
from celldag.registry import Registries
from celldag.registry.params import split_method_selector
from celldag.release import package_digest
from celldag.representation import preprocess
from celldag.representation.track import TRACK as REPRESENTATION
from celldag.representation.track import RepresentationInput, check_prepared

QUERY_BATCH_PREFIX = "query:"  # the query's batches beside the reference's in the embedding, never mistaken for them
# the reference's calibration and held-out cells, each batch apart from its train cells in the embedding: a method
# that corrects batches (harmony, scVI) treats them as it treats the query's — a batch it was not fitted on — so the
# unknown-type distance is calibrated on cells placed as the query's are
HELD_OUT_BATCH_PREFIX = "held out:"
OUTPUTS = ("annotated.h5ad", "cells.tsv", "batches.tsv", "report.md", "run.json")
SNAKEMAKE_MARK = ".snakemake_timestamp"  # Snakemake's, in the folder the annotate_query rule made


@dataclass(frozen=True)
class Request:
    """What ``celldag annotate`` was asked: the files, the methods by registry id and the settings."""

    reference: str
    query: str
    out: str
    representation: str = "pca"
    classifier: str = "logistic"
    batch_key: str = "batch"
    label_key: str | None = None  # a query column of known labels (missing where unlabelled): the labelled test
    values: str = "auto"  # of the query's X: counts, lognorm, or auto (counts when every value is an integer)
    procedure: str = annotation_query.DEFAULT_PROCEDURE
    alpha: float = SCORING_DEFAULTS["alpha"]
    level: float = shift.LEVEL
    unknown_level: float | None = None  # of the unknown-type flag (None: alpha)
    no_empty_sets: bool = False  # the top label added to an empty set
    seed: int = 0
    threads: int = 1
    reference_label_key: str = "label"  # a plain labelled reference's columns (a prepared one has label and batch)
    reference_batch_key: str = "batch"
    model: str | None = None  # a trained CellTypist model file: the classifier, in place of one trained here
    label_map: str | None = None  # TSV model_type → label: how the model's types become the reference's labels
    probabilities: str | None = None  # another tool's scores per cell and type (TSV/CSV): in place of a classifier


def read_reference(request: Request):
    """The reference as a prepared dataset: a prepared file of a run as it is (held to its contract), or a plain
    labelled h5ad prepared as ``prepare_h5ad`` and ``preprocess`` would (``prepared_plain``, cached by content). A
    reference without labels is refused first."""
    path = request.reference
    adata = artifacts.read_h5ad(path)
    if not is_prepared(adata):
        adata = prepared_plain(request, adata)
    if "label" not in adata.obs or adata.obs["label"].isna().all():
        raise InputError(
            f"{path}: obs['label'] is missing or empty: a reference must be labelled (a prepared dataset "
            "of the representation track, or a labelled h5ad with --reference-label-key)"
        )
    check_prepared(adata, path)
    if adata.obs["label"].nunique() < 2:
        raise InputError(f"{path}: obs['label'] holds one type; annotation needs two or more")
    return adata


def is_prepared(adata) -> bool:
    """A prepared dataset of the representation track: its split and log-normalised layer are there."""
    return adata.uns.get("track") == "representation" and "lognorm" in adata.layers and "split" in adata.obs


def cache_folder() -> Path:
    """Where prepared plain references are kept: ``$CELLDAG_CACHE/references`` (default ~/.cache/celldag)."""
    return Path(os.environ.get("CELLDAG_CACHE") or Path.home() / ".cache" / "celldag") / "references"


def prepared_plain(request: Request, adata):
    """A plain labelled h5ad (``adata``, read from ``request.reference``) prepared as a registry dataset of loader
    ``prepare_h5ad`` would be — counts or log-normalised values in X (``preprocess.values_of``), cell types in
    ``--reference-label-key``, batches in ``--reference-batch-key`` — at the request's seed. Kept in
    ``cache_folder()`` under a key of the file's sha256, those settings and celldag's source digest: the same file
    is prepared once."""
    path = request.reference
    label_key, batch_key = request.reference_label_key, request.reference_batch_key
    for option, column in (("--reference-label-key", label_key), ("--reference-batch-key", batch_key)):
        if column not in adata.obs:
            raise InputError(
                f"{path}: obs['{column}'] ({option}) is missing: a plain reference must be labelled, its "
                f"batches named; columns: {list(adata.obs.columns)}"
            )
    digest = artifacts.sha256_file(path)
    try:
        values = preprocess.values_of(adata.X)
    except preprocess.AmbiguousValues as why:
        raise InputError(
            f"{path}: X is neither clearly counts nor clearly log-normalised: {why}; a reference holds raw "
            "counts or log1p-normalised values in X"
        ) from None
    settings = {
        "file": digest,
        "label_key": label_key,
        "batch_key": batch_key,
        "values": values,
        "seed": request.seed,
        "celldag": package_digest(),
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    cached = cache_folder() / f"{key}.h5ad"
    if cached.is_file():
        return artifacts.read_h5ad(cached)
    name = Path(path).name
    # one batch is a reference like any other here; the loader, made for benchmarks, calls it a dataset without
    # batches (its batch named by the dataset id): the batch's own name is given as that id
    batches = adata.obs[batch_key].astype(str).unique()
    dataset_id = str(batches[0]) if len(batches) == 1 else f"reference-{key}"
    entry = {
        "loader": PLAIN_LOADER,
        "track": "representation",
        "files": [{"name": name, "path": path}],
        "params": {
            "file": name,
            "label_key": label_key,
            "batch_key": batch_key if len(batches) > 1 else None,
            "counts_layer": "X" if values == "counts" else None,
            "lognorm_layer": "X" if values == "lognorm" else None,
        },
    }
    prepared = prepare_dataset(dataset_id, entry, REPRESENTATION, request.seed, {name: path})
    contracts.check_prepared_dataset(prepared, str(cached), "representation", REPRESENTATION)
    cached.parent.mkdir(parents=True, exist_ok=True)
    artifacts.write_h5ad(prepared, cached)
    return prepared


PLAIN_LOADER = "celldag.data.h5ad:prepare_h5ad"  # a plain reference is prepared as a lab's h5ad dataset is


def reference_path(reference: str, datasets: dict[str, dict], seed: int) -> str:
    """REFERENCE as ``celldag annotate`` takes it: a file path as given, or a registry dataset id of the
    representation track → its prepared file at ``seed`` (which the workflow makes: config ``annotate``)."""
    if Path(reference).suffix == ".h5ad" or Path(reference).exists():
        return reference
    entry = datasets.get(reference)
    if entry is None or entry["track"] != "representation":
        raise InputError(f"REFERENCE {reference!r}: neither an .h5ad file nor a dataset of the representation track")
    prepared = PREPARED.format(dataset=reference, data_key=data_key(entry), seed=seed)
    if not Path(prepared).is_file():
        raise InputError(
            f"REFERENCE {reference!r}: its prepared file {prepared} is not made yet: `snakemake --cores "
            f"all {prepared}` makes it (or name the dataset in config annotate)"
        )
    return prepared


def model_path(model: str, registries: Registries, downloads: dict | None) -> str:
    """--model as ``celldag annotate`` takes it: a .pkl file as given, or a pretrained model of the registry
    (config/models.yaml) → its file in resources/models/, downloaded through the mirror and verified against the
    registry's sha256 unless a copy with that digest is there (the workflow's download_file does the same)."""
    try:
        path = model_file(model, registries, "--model")
    except ValueError as error:
        raise InputError(str(error)) from None
    if path == model:
        return path
    entry = registries.models[model]["file"]
    pins = DOWNLOAD_PINS.format(source=MODEL_SOURCE)
    expected = expected_sha256(entry, pins, entry["name"])
    if not (Path(path).is_file() and expected and sha256_file(path) == expected):
        try:
            fetch_registry_file(entry, path, pin_file=pins, mirror=configured_mirror(downloads))
        except DownloadError as error:
            raise InputError(f"--model {model}: {error}") from error
    return path


def read_query(request: Request, reference_genes: pd.Index):
    """The query and its genes shared with the reference; every problem an ``InputError`` naming the field."""
    path = request.query
    adata = artifacts.read_h5ad(path)
    if adata.n_obs == 0:
        raise InputError(f"{path}: no cells")
    if request.batch_key not in adata.obs:
        raise InputError(
            f"{path}: obs['{request.batch_key}'] (--batch-key) is missing; columns: {list(adata.obs.columns)}"
        )
    batches = adata.obs[request.batch_key]
    if batches.isna().any():
        raise InputError(f"{path}: obs['{request.batch_key}'] is missing for {int(batches.isna().sum())} cells")
    if request.label_key is not None and request.label_key not in adata.obs:
        raise InputError(f"{path}: obs['{request.label_key}'] (--label-key) is missing")
    if not adata.var_names.is_unique:
        raise InputError(f"{path}: var_names are not unique ({int(adata.var_names.duplicated().sum())} repeated)")
    shared = reference_genes.intersection(adata.var_names, sort=False)
    if shared.empty:
        raise InputError(
            f"{path}: var_names share no gene with the reference's {len(reference_genes):,} (first "
            f"query genes {list(adata.var_names[:3])}, reference {list(reference_genes[:3])}): "
            "name genes alike in both"
        )
    return adata, shared


def request_of(settings: dict, reference: str, out: str) -> Request:
    """A query of config ``annotate`` (its settings) as a ``Request`` on the reference's prepared file."""
    return Request(
        reference=reference, out=out, **{key: value for key, value in settings.items() if key != "reference"}
    )


def check_request(request: Request, methods: dict[str, dict]) -> tuple[tuple[dict, str], tuple[dict, str]]:
    """((entry, variant) of the representation, of the classifier): methods of the registry named ``method`` or
    ``method/variant`` (default: its ``default`` variant, else its first); bad settings refused before any compute."""
    chosen = []
    for role, selector, track in (
        ("--representation", request.representation, "representation"),
        ("--classifier", request.classifier, "annotation"),
    ):
        method_id, variant = split_method_selector(selector)
        entry = methods.get(method_id)
        if entry is None or entry["track"] != track:
            choices = sorted(m for m, entry in methods.items() if entry["track"] == track)
            raise InputError(f"{role} {selector!r}: not a method of the {track} track ({', '.join(choices)})")
        variant = variant or ("default" if "default" in entry["variants"] else next(iter(entry["variants"])))
        if variant not in entry["variants"]:
            raise InputError(
                f"{role} {selector!r}: {method_id} has no variant {variant!r} ({', '.join(entry['variants'])})"
            )
        chosen.append((entry, variant))
    if request.procedure not in annotation_query.PROCEDURES:
        raise InputError(f"--procedure {request.procedure!r}: one of {', '.join(annotation_query.PROCEDURES)}")
    for option, value in (
        ("--alpha", request.alpha),
        ("--level", request.level),
        ("--unknown-level", request.alpha if request.unknown_level is None else request.unknown_level),
    ):
        if not 0 < value < 1:
            raise InputError(f"{option} {value}: must be in (0, 1)")
    if request.values not in ("auto", *preprocess.VALUES):
        raise InputError(f"--values {request.values!r}: auto, counts or lognorm")
    if request.label_map is not None and request.model is None:
        raise InputError("--label-map maps a model's types: it needs --model")
    if request.probabilities is not None and request.model is not None:
        raise InputError("--probabilities and --model each replace the classifier: give one")
    if request.model is not None and request.classifier not in ("logistic", CELLTYPIST):  # logistic: the default
        raise InputError(f"--model is a CellTypist model: it replaces --classifier {request.classifier!r}")
    return chosen[0], chosen[1]


CELLTYPIST = "celltypist"  # the classifier whose model files --model takes
HELD_OUT_PART = "held out"  # the reference's third part in a split file (the annotation task's "query")
IMPORTED_THRESHOLD = 0.5  # an imported tool's own rule: its top type where that type's probability reaches this


def imported_proba(
    request: Request, reference, query, split: np.ndarray, classes: tuple[str, ...]
) -> pd.DataFrame | None:
    """The scores of ``--probabilities`` for every reference cell then every query cell (None without it). The
    reference's train cells — the tool trained on them, and no set reads their scores — get uniform rows where the
    file lacks them; ``attrs``: the labels the file lacks."""
    if request.probabilities is None:
        return None
    reference_ids, query_ids = pd.Index(reference.obs_names.astype(str)), pd.Index(query.obs_names.astype(str))
    shared = reference_ids[split != "train"].intersection(query_ids)
    if len(shared):
        raise InputError(
            f"{request.probabilities}: cell id {shared[0]!r} names a reference cell and a query cell; "
            "give the query's cells ids of their own"
        )
    scores = read_probabilities(
        request.probabilities,
        classes,
        {
            "reference's calibration cells": reference_ids[split == "calibration"],
            "reference's held-out cells": reference_ids[split == "query"],
            "query cells": query_ids,
        },
    )
    uniform = pd.DataFrame(1.0 / len(classes), index=reference_ids[split == "train"], columns=list(classes))
    rows = pd.concat([scores.drop(index=uniform.index, errors="ignore"), uniform])
    ordered = pd.DataFrame(
        np.vstack([rows.loc[reference_ids].to_numpy(), scores.loc[query_ids].to_numpy()]), columns=list(classes)
    )
    ordered.attrs = scores.attrs
    return ordered


def split_table(request: Request) -> pd.DataFrame:
    """The reference's cells (prepared as ``annotate`` prepares them) and the part of each: train, calibration or held
    out, by the annotation task's rule and ``request.seed`` — what another tool trains on before its scores come back
    through ``--probabilities`` (``celldag split``)."""
    reference = read_reference(request)
    part = reference_split(reference, request.seed)
    return pd.DataFrame(
        {
            "label": reference.obs["label"].astype(str).to_numpy(),
            "batch": reference.obs["batch"].astype(str).to_numpy(),
            "part": np.where(part == "query", HELD_OUT_PART, part),
        },
        index=pd.Index(reference.obs_names.astype(str), name="cell"),
    )


def reference_split(reference, seed: int) -> np.ndarray:
    """Each reference cell's part — train, calibration or query (held out) — by the annotation task's rule."""
    labels, batch = (reference.obs[key].astype(str).to_numpy() for key in ("label", "batch"))
    return split_cells(labels, batch, tuple(TASK_DEFAULTS["split"]), seed)


def read_probabilities(path: str, classes: tuple[str, ...], needed: dict[str, pd.Index]) -> pd.DataFrame:
    """Another tool's scores (``--probabilities``): a TSV or CSV, cell ids in the first column, one column per
    reference label (a label it lacks: 0, ``attrs['labels_missing']``), non-negative, each row divided by its sum.
    ``needed``: {what: the cell ids it must hold}; a missing cell, an unknown column or a bad value is refused with
    one line naming the file."""
    try:
        table = pd.read_csv(path, sep="," if str(path).endswith(".csv") else "\t", index_col=0)
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a table of cell ids × types ({error})") from error
    table.index = table.index.astype(str)
    if table.index.has_duplicates:
        raise InputError(f"{path}: cell {table.index[table.index.duplicated()][0]!r} appears twice")
    unknown = [str(column) for column in table.columns if str(column) not in classes]
    if unknown:
        raise InputError(f"{path}: column {unknown[0]!r} is not a label of the reference ({', '.join(classes)})")
    for what, ids in needed.items():
        missing = ids[~ids.isin(table.index)]  # in the reference's (the query's) order
        if len(missing):
            raise InputError(
                f"{path}: {len(missing):,} of the {len(ids):,} {what} are missing (first: {missing[0]}); "
                "the file holds the tool's scores on the reference's calibration and held-out cells "
                "(`celldag split` lists them) and on every query cell"
            )
    values = table.reindex(columns=list(classes), fill_value=0.0).to_numpy(dtype=np.float64)
    if not np.isfinite(values).all() or (values < 0).any() or (values.sum(axis=1) <= 0).any():
        raise InputError(f"{path}: scores must be finite and non-negative, with a positive sum in every row")
    scores = pd.DataFrame(values / values.sum(axis=1, keepdims=True), index=table.index, columns=list(classes))
    scores.attrs["labels_missing"] = [label for label in classes if label not in table.columns]
    return scores


@dataclass(frozen=True)
class Pretrained:
    """A CellTypist model file and how its types map onto the reference's labels (``--model``, ``--label-map``)."""

    model: celltypist_model.Model
    mapped: celltypist_model.LabelMap


def read_pretrained(request: Request, classes: tuple[str, ...]) -> Pretrained | None:
    """The model of ``--model`` mapped onto the reference's labels, or None; a file that is not a model, a bad map or
    a map that reaches no reference label is refused with one line."""
    if request.model is None:
        return None
    try:
        model = celltypist_model.read_model(request.model)
        mapping = None if request.label_map is None else celltypist_model.read_label_map(request.label_map)
    except (OSError, ValueError) as error:
        raise InputError(str(error)) from error
    mapped = celltypist_model.label_map(model.types, classes, mapping)
    if len(mapped.labels_without_type) == len(classes):
        how = f"through {request.label_map}" if mapping is not None else "by name (give --label-map)"
        raise InputError(
            f"{request.model}: none of its {len(model.types)} types maps {how} onto a reference label "
            f"({', '.join(classes[:5])}{', …' if len(classes) > 5 else ''})"
        )
    return Pretrained(model=model, mapped=mapped)


def joint_expression(
    reference, query, shared: pd.Index, values: str, where: str
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(log-normalised, scaled, genes): expression of reference then query cells on the shared genes that vary — the
    log-normalised values sparse (CSR float32: a query of 10⁵ cells × every gene stays small), the scaled ones dense
    float32 (what an embedding fits)."""
    if values == "auto":
        try:
            values = preprocess.values_of(query.X)
        except preprocess.AmbiguousValues as why:
            raise InputError(
                f"{where}: X is neither clearly counts nor clearly log-normalised: {why}; say which with "
                "--values counts or --values lognorm"
            ) from None
    query_lognorm = preprocess.lognorm_of(query.X, values, where)[:, query.var_names.get_indexer(shared)]
    reference_lognorm = sparse.csr_matrix(reference[:, shared].layers["lognorm"], dtype=np.float32)
    lognorm = sparse.vstack([reference_lognorm, sparse.csr_matrix(query_lognorm, dtype=np.float32)], format="csr")
    scaled, varying = preprocess.jointly_scaled(lognorm)
    if not varying.any():
        raise InputError(f"{where}: no shared gene varies across the reference and query cells")
    kept = lognorm if varying.all() else lognorm[:, np.flatnonzero(varying)]
    return kept, scaled, tuple(shared[varying].astype(str))


def ran(method: tuple[dict, str], inputs, seed: int, threads: int, what: str):
    """The result of one (entry, variant); a method that cannot run or fails stops the command naming it (no other
    stands in)."""
    entry, variant = method
    unmet = unmet_need(inputs, method_needs(entry, variant))
    if unmet:
        raise InputError(f"{what} {unmet}")
    result, status, reason = call_method(entry["run"], inputs, method_params(entry, variant), seed, threads)
    if status != "ok":
        raise RuntimeError(f"{what} is {status}: {reason}")
    return result


def annotate(request: Request, methods: dict[str, dict]) -> Path:
    """Annotate the query (``Request``) with methods of the registry (id → entry); the folder written."""
    clock = RunClock()
    representation, classifier = check_request(request, methods)
    check_out(Path(request.out))
    with clock.stage("reference"):  # read, and prepared where it is a plain h5ad (cached)
        reference = read_reference(request)
        reference.X = None  # its own scaling, dense: the reference is scaled again with the query (joint_expression)
    with clock.stage("query"):
        query, shared = read_query(request, pd.Index(reference.var_names))
    n_reference = reference.n_obs
    reference_labels = reference.obs["label"].astype(str).to_numpy()
    classes = tuple(sorted(set(reference_labels)))
    pretrained = read_pretrained(request, classes)
    with clock.stage("genes and values"):
        lognorm, scaled, genes = joint_expression(reference, query, shared, request.values, request.query)
    reference_batch = reference.obs["batch"].astype(str).to_numpy()
    query_batch = query.obs[request.batch_key].astype(str).to_numpy()
    split = reference_split(reference, request.seed)
    imported = imported_proba(request, reference, query, split, classes)
    held_out_batch = np.char.add(HELD_OUT_BATCH_PREFIX, reference_batch)
    batch = np.concatenate(
        [np.where(split == "train", reference_batch, held_out_batch), np.char.add(QUERY_BATCH_PREFIX, query_batch)]
    )
    names = (*reference.obs_names.astype(str), *(f"query:{name}" for name in query.obs_names.astype(str)))
    # the embedding is fitted on the classifier's train cells alone: the calibration and held-out reference cells are
    # then out of its fit, as the lab's cells are, so the unknown-type distance is calibrated on cells like the query
    fit = np.concatenate([split == "train", np.zeros(query.n_obs, dtype=bool)])
    inputs = RepresentationInput(
        names=tuple(names),
        features=scaled,
        gene_names=tuple(shared),
        batch=batch,
        train_mask=fit,
        lognorm=lognorm,
        counts=None,
    )
    with clock.stage("embedding"):
        embedding = np.asarray(
            ran(
                representation, inputs, request.seed, request.threads, f"representation {request.representation}"
            ).embedding,
            dtype=np.float32,
        )
    with clock.stage("classifier"):
        if imported is not None:
            proba, sigmoid = imported.to_numpy(), None
        elif pretrained is None:
            classified = AnnotationInput(
                features=embedding,
                labels={"reference": reference_labels[split == "train"]},
                batch=batch,
                classes=classes,
                fits={"reference": fit},
                names=tuple(names),
                expression=lognorm,
                genes=genes,
            )
            result = ran(classifier, classified, request.seed, request.threads, f"classifier {request.classifier}")
            proba, sigmoid = result.obsm["proba_reference"], result.obsm.get("sigmoid_reference")
        else:
            decisions, _ = celltypist_model.decision(pretrained.model, lognorm, genes)
            sigmoid = celltypist_model.mapped_sigmoids(celltypist_model.sigmoids(decisions), pretrained.mapped)
            proba = celltypist_model.normalised(sigmoid)
    soft = None
    if request.procedure == "kandinsky_augmented":
        soft = soft_groups(principal_components(scaled, request.seed), int(TASK_DEFAULTS["soft_groups"]), request.seed)
    query_labels = None
    if request.label_key is not None:
        column = query.obs[request.label_key]
        query_labels = np.where(column.isna().to_numpy(), "", column.astype(str).to_numpy())
    with clock.stage("novelty distances"):  # each cell's 10th-nearest reference train cell in the embedding
        distances = novelty.novelty_distances(embedding, fit)
    with clock.stage("sets and tests"):  # the conformal sets, the unknown-type tests and the shift tests
        found = annotation_query.annotate_query(
            proba,
            reference_labels,
            split,
            query_batch,
            query_labels,
            classes,
            request.alpha,
            request.procedure,
            soft,
            request.level,
            request.unknown_level,
            distances,
            request.no_empty_sets,
        )
    cells = cell_table(query, found, classes, proba[n_reference:], query_batch)
    native = None
    if sigmoid is not None or imported is not None:
        native = native_rules(
            proba if sigmoid is None else sigmoid,
            classes,
            reference_labels[split == "query"],
            split == "query",
            query_batch,
            query_labels,
            imported=sigmoid is None,
        )
        cells = cells.assign(**native.cells)
    index = {name: i for i, name in enumerate(classes)}
    calibration_codes = np.array([index[label] for label in reference_labels[split == "calibration"]], dtype=int)
    rare_mask = conformal.rare_pooled_groups(calibration_codes, len(classes), request.alpha)[1]
    rare = [name for name, is_rare in zip(classes, rare_mask) if is_rare]
    holds_rare = found.sets[:, rare_mask].any(axis=1)  # each query cell's set holds a rare type
    batches = batch_table(found, cells, rare, holds_rare, None if native is None else native.batches)
    facts = {
        "genes_shared": len(shared),
        "genes_used": int(lognorm.shape[1]),
        "reference_genes": reference.n_vars,
        "reference_cells": n_reference,
        "calibration_cells": int((split == "calibration").sum()),
        "query_cells": query.n_obs,
        "classes": list(classes),
        "held_out_coverage": found.held_out_coverage,
        "held_out_set_size": found.held_out_set_size,
        "held_out_unknown": found.held_out_unknown,
        "held_out_flagged": found.held_out_flagged,
        "rare_types": rare,
        "rare_in_set_share": float(holds_rare.mean()),
        "training_conditional": conformal.training_conditional_risk(int((split == "calibration").sum()), request.alpha),
        "query_proportions": found.query_proportions,
        "native_rule": None if native is None else {"tool": native.tool, **native.held_out},
    }
    if imported is not None:
        facts["labels_missing_from_probabilities"] = imported.attrs["labels_missing"]
    if pretrained is not None:
        facts |= {
            "model_genes_used": int(np.isin(genes, pretrained.model.genes).sum()),
            "model_genes": int(pretrained.model.genes.size),
            "unmapped_model_types": list(pretrained.mapped.unmapped_types),
            "labels_without_model_type": list(pretrained.mapped.labels_without_type),
        }
    inputs = [
        path
        for path in (request.reference, request.query, request.model, request.label_map, request.probabilities)
        if path
    ]
    with clock.stage("checksums"):
        checksums = {path: artifacts.sha256_file(path) for path in inputs}
    record = clock.record(
        seed=request.seed,
        config=asdict(request),
        input_checksums=checksums,
        command="celldag annotate",
        facts=facts,
        stage_seconds={name: round(seconds, 3) for name, seconds in clock.stages.items()},
    )
    return write_outputs(request, query, cells, batches, record, report(request, facts, batches, cells))


def cell_table(
    query, found: annotation_query.QueryAnnotation, classes: tuple[str, ...], proba: np.ndarray, query_batch: np.ndarray
) -> pd.DataFrame:
    """One row per query cell: batch, call, set (types joined by '|'), set size, unknown, best type, its p."""
    names = np.asarray(classes, dtype=object)
    verdicts = {test.batch: test.verdict for test in found.tests}
    return pd.DataFrame(
        {
            "batch": query_batch,
            "call": found.calls,
            "set": ["|".join(names[row]) for row in found.sets],
            "set_size": found.sets.sum(axis=1),
            "unknown_type": found.unknown,
            "unknown_by": found.unknown_by,
            "best_type": names[proba.argmax(axis=1)],
            "best_probability": proba.max(axis=1),
            "batch_shift": [verdicts[b] for b in query_batch],
        },
        index=pd.Index(query.obs_names.astype(str), name="cell"),
    )


@dataclass(frozen=True)
class NativeRules:
    """The tool's own rule on its own scores, beside the sets (``native_rules``)."""

    tool: str  # "celltypist" or "tool" (imported probabilities): the prefix of its columns
    cells: dict[str, np.ndarray]  # cells.tsv columns, query cells in order
    batches: pd.DataFrame  # per query batch (index): unassigned share, set size, labelled coverage, top-type accuracy
    held_out: dict[str, float]  # the same on the reference's held-out cells (labels known)


def native_rules(
    scores: np.ndarray,
    classes: tuple[str, ...],
    held_out_labels: np.ndarray,
    held_out: np.ndarray,
    query_batch: np.ndarray,
    query_labels: np.ndarray | None,
    imported: bool = False,
) -> NativeRules:
    """The tool's own rule on ``scores`` (reference cells then query cells), scored on the reference's ``held_out``
    cells and on the query's labelled cells of each batch: CellTypist's prob match on its sigmoids (every type over
    0.5; none: Unassigned) and best match (the top type); for imported probabilities (``imported``) the top type
    where its probability reaches ``IMPORTED_THRESHOLD``, else Unassigned. Per group: the share Unassigned, the mean
    number of types answered, coverage (the label among them) and the top type's accuracy."""
    names = np.asarray(classes, dtype=object)
    n_reference = held_out.size
    top = scores.argmax(axis=1)
    if imported:
        matched = np.zeros(scores.shape, dtype=bool)
        matched[np.arange(top.size), top] = scores[np.arange(top.size), top] >= IMPORTED_THRESHOLD
    else:
        matched = celltypist_model.prob_match(scores)
    index = {name: j for j, name in enumerate(classes)}

    def scored(rows: np.ndarray, truth: np.ndarray) -> dict[str, float]:
        labelled = truth != ""
        hits = np.array(
            [
                matched[row, index[label]] if label in index else False
                for row, label in zip(rows[labelled], truth[labelled])
            ],
            dtype=bool,
        )
        return {
            "unassigned_share": float((~matched[rows].any(axis=1)).mean()),
            "set_size": float(matched[rows].sum(axis=1).mean()),
            "coverage": float(hits.mean()) if labelled.any() else np.nan,
            "top_accuracy": float((names[top[rows]][labelled] == truth[labelled]).mean()) if labelled.any() else np.nan,
        }

    query_rows = np.arange(n_reference, scores.shape[0])
    truth = np.full(query_rows.size, "", dtype=object) if query_labels is None else np.asarray(query_labels, object)
    batches = pd.DataFrame(
        {
            batch: scored(query_rows[query_batch == batch], truth[query_batch == batch])
            for batch in np.unique(query_batch)
        }
    ).T
    calls = np.array(["|".join(names[row]) or celltypist_model.UNASSIGNED for row in matched[query_rows]])
    tool = "tool" if imported else CELLTYPIST
    cells = (
        {"tool_call": calls}
        if imported
        else {"celltypist_best_match": names[top[query_rows]], "celltypist_prob_match": calls}
    )
    return NativeRules(
        tool=tool,
        cells=cells,
        batches=batches.add_prefix(f"{tool}_"),
        held_out=scored(np.flatnonzero(held_out), np.asarray(held_out_labels, dtype=object)),
    )


# what each procedure of ``celldag annotate`` does with a type of too few calibration cells (docs/annotation.md)
RARE_TYPE_RULE = {
    "class_conditional": "in every set (an infinite threshold)",
    "class_conditional_pooled": "calibrated together as one pooled group (promised ≥ 1 − α together, not each)",
    "split_lac": "calibrated with every other type (marginal coverage only)",
    "split_aps": "calibrated with every other type (marginal coverage only)",
    "label_shift": "calibrated with every other type, weighted by its estimated share of the query",
    "kandinsky_augmented": "its group dropped from the design when too light; covered through the groups kept",
}


def batch_table(
    found: annotation_query.QueryAnnotation,
    cells: pd.DataFrame,
    rare: list[str],
    holds_rare: np.ndarray,
    native: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per query batch: its shift test, mean set size, shares unknown and ambiguous, labelled coverage, the
    reference's rare types (fewer than ⌈(1 − α)/α⌉ calibration cells) and the share of its cells whose set holds one
    (``holds_rare``, per query cell); then CellTypist's own rules (``native``, per batch) for a CellTypist model."""
    rows = []
    for test in found.tests:
        in_batch = cells["batch"] == test.batch
        members = cells[in_batch]
        rows.append(
            {
                "batch": test.batch,
                "cells": len(members),
                "verdict": test.verdict,
                "test": test.test,
                "tested_cells": test.query_cells,
                "calibration_cells": test.calibration_cells,
                "effect": test.statistic,
                "p": test.p_value,
                "holm_p": test.adjusted_p,
                "mean_set_size": float(members["set_size"].mean()),
                "unknown_share": float(members["unknown_type"].mean()),
                "ambiguous_share": float((members["call"] == annotation_query.AMBIGUOUS).mean()),
                "labelled_coverage": found.query_labelled_coverage.get(test.batch, np.nan),
                "rare_types": "|".join(rare),
                "rare_in_set_share": float(holds_rare[in_batch.to_numpy()].mean()),
            }
        )
    table = pd.DataFrame(rows)
    return table if native is None else table.join(native, on="batch")


def report(request: Request, facts: dict, batches: pd.DataFrame, cells: pd.DataFrame) -> str:
    """The short report: what was done, the reference's own check, and per batch the verdict and the sets."""
    shifted = int(batches["verdict"].str.startswith("shifted").sum())
    blocks = [
        Heading(1, f"celldag annotate: {Path(request.query).name}"),
        Paragraph(
            (
                f"{facts['query_cells']:,} query cells in {len(batches)} batches annotated from "
                f"{Path(request.reference).name} ({facts['reference_cells']:,} cells, {len(facts['classes'])} types) "
                f"on {facts['genes_used']:,} shared genes: embedding {request.representation}, classifier "
                f"{classifier_name(request)}, sets by {request.procedure} at α = {request.alpha:g}, calibrated on "
                f"{facts['calibration_cells']:,} reference cells"
                + (
                    ", the top label added to an empty set (--no-empty-sets: coverage can only grow, the promise "
                    "is kept)"
                    if request.no_empty_sets
                    else ""
                )
                + f". Seed {request.seed}.",
            )
        ),
        Paragraph(
            (
                f"Reference check (held-out reference cells, labels known): coverage "
                f"{facts['held_out_coverage']:.3f} (promised ≥ {1 - request.alpha:.2f}), mean set size "
                f"{facts['held_out_set_size']:.2f}, flagged unknown type {facts['held_out_unknown']:.3f} (all are of "
                f"known types, out of the embedding's fit as the query is: at most {unknown_level(request):g} plus "
                f"binomial noise by design; by distance {facts['held_out_flagged']['distance']:.3f}, by doubt "
                f"{facts['held_out_flagged']['doubt']:.3f}, each at most {unknown_level(request) / 2:g}).",
            )
        ),
        Paragraph(
            (
                f"Shift test per batch (one-sided, Holm over batches at {request.level:g}): {shifted} of "
                f"{len(batches)} batches shifted. A shifted batch's cells conform less to the classifier than the "
                "calibration cells did: the sets' coverage promise is not supported there. 'No shift detected' is "
                "not a proof of exchangeability.",
            )
        ),
        Table(
            ("batch", "cells", "verdict", "test", "mean set size", "unknown type", "ambiguous", "labelled coverage"),
            tuple(
                (
                    row.batch,
                    f"{row.cells:,}",
                    row.verdict,
                    row.test,
                    f"{row.mean_set_size:.2f}",
                    f"{row.unknown_share:.3f}",
                    f"{row.ambiguous_share:.3f}",
                    "–" if np.isnan(row.labelled_coverage) else f"{row.labelled_coverage:.3f}",
                )
                for row in batches.itertuples()
            ),
        ),
        Paragraph(
            (
                "Calls: "
                + ", ".join(f"{call} {count:,}" for call, count in cells["call"].value_counts().items())
                + f". '{annotation_query.UNKNOWN}': farther from the reference's cells in the embedding, or doubted by "
                f"the classifier more, than all but {unknown_level(request) / 2:g} of its calibration cells (a type "
                "the reference lacks, damaged cells; on a shifted batch, also the shift; `unknown_by` in cells.tsv "
                f"says which); '{annotation_query.AMBIGUOUS}': several types fit.",
            )
        ),
    ]
    rare = facts["rare_types"]
    blocks.append(
        Paragraph(
            (
                (
                    "Rare types (fewer than ⌈(1 − α)/α⌉ = "
                    f"{conformal.min_calibration_cells(request.alpha)} calibration cells): "
                    f"{', '.join(rare)} — by {request.procedure}: {RARE_TYPE_RULE[request.procedure]}; in "
                    f"{facts['rare_in_set_share']:.1%} of the query's sets."
                    if rare
                    else "Every type has enough calibration cells to be calibrated on its own."
                )
                + f" Training-conditional coverage: the promise holds on average over calibration sets; with "
                f"{facts['calibration_cells']:,} calibration cells, the chance that this calibration set gives split "
                f"conformal a coverage below 1 − α − {conformal.TRAINING_CONDITIONAL_SLACK:g} is "
                f"{facts['training_conditional']:.1%} (Beta law; a group of fewer cells is calibrated less tightly).",
            )
        )
    )
    if facts["native_rule"] is not None:
        blocks.append(native_paragraph(facts, batches))
    if request.model is not None:
        blocks.append(
            Paragraph(
                (
                    f"Model {Path(request.model).name}: {facts['model_genes_used']:,} of its "
                    f"{facts['model_genes']:,} genes "
                    "are among the genes reference and query share (the others are left out of every decision, for the "
                    "calibration cells as for the query's). Its types that map onto no reference label, dropped: "
                    f"{', '.join(facts['unmapped_model_types']) or 'none'}. Reference labels no type maps to "
                    "(never in a set unless the threshold takes every label): "
                    f"{', '.join(facts['labels_without_model_type']) or 'none'}."
                    " A label takes the largest sigmoid of its types.",
                )
            )
        )
    if facts["query_proportions"]:
        blocks.append(
            Paragraph(
                (
                    "The query's type proportions, estimated from its unlabelled cells (label_shift; "
                    "P(X | Y) assumed unchanged): "
                    + ", ".join(f"{label} {share:.3f}" for label, share in facts["query_proportions"].items())
                    + ". With few calibration cells of a type its share is noisy, and the sets grow.",
                )
            )
        )
    return markdown(blocks)


def native_paragraph(facts: dict, batches: pd.DataFrame) -> Paragraph:
    """The tool's own rule beside the sets: on the held-out reference cells, and per batch with labelled cells."""
    held, tool = facts["native_rule"], facts["native_rule"]["tool"]
    rule = (
        "CellTypist's own rules on the same sigmoids (cells.tsv: celltypist_best_match, celltypist_prob_match): "
        "prob match (every type over 0.5)"
        if tool == CELLTYPIST
        else f"The tool's own rule on its probabilities (cells.tsv: tool_call): its top type where that type's "
        f"probability reaches {IMPORTED_THRESHOLD:g}"
    )
    top = "best match" if tool == CELLTYPIST else "its top type"
    labelled = batches.dropna(subset=[f"{tool}_coverage"])
    per_batch = "; ".join(
        f"{row['batch']}: the rule covers {row[f'{tool}_coverage']:.3f} at {row[f'{tool}_set_size']:.2f} "
        f"types, {top} right on {row[f'{tool}_top_accuracy']:.3f}"
        for _, row in labelled.iterrows()
    )
    missing = facts.get("labels_missing_from_probabilities") or []
    return Paragraph(
        (
            f"{rule}: on the held-out reference cells it covers {held['coverage']:.3f} at {held['set_size']:.2f} types "
            f"with {held['unassigned_share']:.1%} Unassigned, and {top} is right on {held['top_accuracy']:.3f} — "
            "without a promise, where the sets above promise ≥ 1 − α."
            + (f" Labelled query cells — {per_batch}." if per_batch else "")
            + (f" Labels the probability file lacks (scored 0): {', '.join(missing)}." if missing else ""),
        )
    )


def classifier_name(request: Request) -> str:
    if request.probabilities is not None:
        return f"the scores of {Path(request.probabilities).name}"
    return request.classifier if request.model is None else f"the CellTypist model {Path(request.model).name}"


def unknown_level(request: Request) -> float:
    return request.alpha if request.unknown_level is None else request.unknown_level


def write_outputs(request: Request, query, cells: pd.DataFrame, batches: pd.DataFrame, record: dict, text: str) -> Path:
    """Every output written into a fresh folder beside ``out``, which then takes its place: never half written."""
    out = Path(request.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_into(staging, query, cells, batches, record, text)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():  # a previous annotate's folder (check_out): replaced whole
        shutil.rmtree(out)
    staging.rename(out)
    return out


def write_into(folder: Path, query, cells: pd.DataFrame, batches: pd.DataFrame, record: dict, text: str) -> None:
    annotated = query.copy()
    for column in ("call", "set", "set_size", "unknown_type", "batch_shift"):
        annotated.obs[f"celldag_{column}"] = cells[column].to_numpy()
    annotated.uns["celldag_annotate"] = json.loads(
        json.dumps({"request": record["config"], **record["facts"]}, default=str)
    )
    annotated.write_h5ad(folder / "annotated.h5ad")
    cells.to_csv(folder / "cells.tsv", sep="\t")
    batches.to_csv(folder / "batches.tsv", sep="\t", index=False)
    (folder / "report.md").write_text(text)
    (folder / "run.json").write_text(json.dumps(record, indent=1, default=str) + "\n")


def check_out(out: Path) -> None:
    """``out`` may be new or a previous ``celldag annotate``'s folder, never a folder of other files."""
    if out.exists() and (not out.is_dir() or any(p.name not in (*OUTPUTS, SNAKEMAKE_MARK) for p in out.iterdir())):
        raise InputError(
            f"{out}: exists and holds other files than celldag annotate's ({', '.join(OUTPUTS)}); choose another --out"
        )
