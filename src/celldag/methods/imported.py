"""Outputs made elsewhere, scored like any run: one import method per track (docs/importing-outputs.md).

A lab that computed an embedding, a tree or class probabilities with a tool of its own (or took the
outputs a paper released) adds one registry entry naming one of these functions and where its files lie:

    our_scvi_v2:
      track: representation
      run: celldag.methods.imported:embedding
      description: Our lab's scVI fork, run on the cluster.
      params: {path: "lab/emb/{dataset}/seed{seed}.h5ad"}

``path`` is a file param (``run.file_params``): per run its pattern is filled in ({dataset}, {seed}, and a
chained run's {upstream}), the file is an input of the run's job, its sha256 goes into the run record
(``celldag.plan.method_files``, ``celldag.jobs.runner.run_method``), and the function gets the filled-in path.

Every check names the lab's file and the field (``ContractError``): the runner lets it stop the job with
that one line, so a bad file is never scored; rows are matched by id and put in the prepared order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from celldag import artifacts
from celldag.annotation.track import HELD_OUT_TYPE_FIT, check_output
from celldag.contracts import ContractError, require_finite_matrix
from celldag.errors import InputError
from celldag.lineage.reconstruct import RECONSTRUCTIONS, reconstruct
from celldag.lineage.tree import parse_newick, to_newick
from celldag.methods import MethodResult

if TYPE_CHECKING:  # the tracks' input types, for the signatures only (a job has loaded its own track)
    from celldag.annotation.track import AnnotationInput
    from celldag.lineage.track import LineageInput
    from celldag.representation.track import RepresentationInput

SHOWN_IDS = 3  # ids named in a message about rows that differ from the prepared dataset's
NEWICK_SUFFIXES = (".nwk", ".newick", ".tre")
MATRIX_SEPARATORS = {".tsv": "\t", ".csv": ","}  # a matrix given by `format: matrix` under another suffix: TSV
TREE_FORMATS = ("newick", "matrix")
SYMMETRY_RTOL = 1e-6  # of the largest distance: a matrix written with 6 significant digits still passes


def row_order(
    found: Sequence[str],
    expected: Sequence[str],
    path: str,
    field: str,
    noun: tuple[str, str],
    source: str = "the prepared dataset",
) -> np.ndarray:
    """Indices putting the file's rows (ids ``found``) in the order ``expected`` of ``source``: the same ids,
    each once, or a ContractError saying how many are missing or extra and naming the first few.
    ``noun``: (singular, plural), e.g. ("cell", "cells")."""
    import pandas as pd

    ids = pd.Index([str(name) for name in found])
    if not ids.is_unique:
        raise ContractError(path, field, f"ids must be unique; repeated: {ids[ids.duplicated()][:SHOWN_IDS].tolist()}")
    given, known = set(ids), set(expected)
    missing = [name for name in expected if name not in given]
    extra = [name for name in ids if name not in known]
    if missing or extra:
        problems = [f"{len(missing)} missing (first: {missing[:SHOWN_IDS]})"] if missing else []
        problems += [f"{len(extra)} not in {source} (first: {extra[:SHOWN_IDS]})"] if extra else []
        raise ContractError(
            path,
            field,
            f"{len(ids)} {noun[len(ids) != 1]} in the file, {len(expected)} in {source}: " + "; ".join(problems),
        )
    return ids.get_indexer(list(expected))


def dense(values) -> np.ndarray:
    return np.asarray(values.toarray() if hasattr(values, "toarray") else values)


# ---------------------------------------------------------------- representation: a cell embedding


def embedding(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    """``obsm['X_emb']`` of an h5ad whose obs_names are the prepared dataset's cells (any order)."""
    del seed  # nothing is drawn: the file is the result
    path = params["path"]
    adata = artifacts.read_h5ad(path)
    if "X_emb" not in adata.obsm:
        raise ContractError(path, "obsm['X_emb']", "missing (the cell embedding: cells × dimensions)")
    require_finite_matrix(adata.obsm["X_emb"], path, "obsm['X_emb']", adata.n_obs)  # rows as in the file
    rows = row_order(adata.obs_names, inputs.names, path, "obs_names", ("cell", "cells"))
    return MethodResult(embedding=dense(adata.obsm["X_emb"])[rows], uns={"imported": path})


embedding.accepted_params = ("path",)
embedding.file_params = ("path",)


# ---------------------------------------------------------------- lineage: a tree, or distances to build one


def tree(inputs: LineageInput, params: dict, seed: int) -> MethodResult:
    """A Newick tree over exactly the prepared leaves, or a distance matrix between them turned into a tree
    by ``reconstruction`` (nj, the default, or upgma) as ``celldag.methods.distance_tree`` builds its trees.
    Which of the two: ``format`` (newick | matrix), else the file's suffix."""
    del seed  # NJ and UPGMA are deterministic
    path = params["path"]
    how = params.get("reconstruction", "nj")
    if how not in RECONSTRUCTIONS:
        raise InputError(f"params.reconstruction: {how!r} is not one of {', '.join(RECONSTRUCTIONS)} ({path})")
    if tree_format(path, params.get("format")) == "newick":
        return MethodResult(tree_newick=read_newick(path, inputs.names), uns={"imported": path})
    distances = read_distances(path, inputs.names)
    built = reconstruct(distances, inputs.names, how)
    return MethodResult(tree_newick=to_newick(built), uns={"imported": path, "reconstruction": how})


tree.accepted_params = ("path", "format", "reconstruction")
tree.file_params = ("path",)


def tree_format(path: str, given: str | None) -> str:
    """newick or matrix: ``given`` (the entry's ``format``), else told by the suffix."""
    if given is not None:
        if given not in TREE_FORMATS:
            raise InputError(f"params.format: {given!r} is not one of {', '.join(TREE_FORMATS)} ({path})")
        return given
    suffix = Path(path).suffix.lower()
    if suffix in NEWICK_SUFFIXES:
        return "newick"
    if suffix in MATRIX_SEPARATORS:
        return "matrix"
    raise ContractError(
        path,
        "file",
        f"suffix {suffix!r} is neither a Newick tree's ({', '.join(NEWICK_SUFFIXES)}) nor "
        f"a distance matrix's ({', '.join(MATRIX_SEPARATORS)}); give params.format: "
        f"{' or '.join(TREE_FORMATS)}",
    )


def read_newick(path: str, leaves: Sequence[str]) -> str:
    """The tree of a Newick file, written back as celldag writes trees, once its leaves are checked."""
    try:
        parsed = parse_newick(Path(path).read_text())
    except ValueError as err:
        raise ContractError(path, "tree", f"not a valid Newick tree ({err})") from None
    row_order(parsed.leaf_names, leaves, path, "leaves", ("leaf", "leaves"))
    return to_newick(parsed)


def read_distances(path: str, leaves: Sequence[str]) -> np.ndarray:
    """A square table of distances with the leaf names as header and index, in the order of ``leaves``:
    finite, non-negative, symmetric and zero on the diagonal within rounding (then made exactly so)."""
    import pandas as pd

    try:  # as text: leaf names stay as written ("007"), numbers are parsed exactly (Python's float)
        table = pd.read_csv(
            path,
            sep=MATRIX_SEPARATORS.get(Path(path).suffix.lower(), "\t"),
            index_col=0,
            dtype=str,
            keep_default_na=False,
        )
    except (ValueError, pd.errors.ParserError) as err:
        raise ContractError(path, "file", f"not a readable table ({err})") from None
    rows = row_order(table.index, leaves, path, "index (first column)", ("leaf", "leaves"))
    columns = row_order(table.columns, leaves, path, "header", ("leaf", "leaves"))
    cells = table.to_numpy(dtype=object)
    cells[cells == ""] = (
        "nan"  # an empty cell (pandas writes NaN so) is a missing distance: named by its position below
    )
    try:
        values = cells.astype(np.float64)
    except ValueError as err:
        raise ContractError(path, "values", f"must be distances ({err})") from None
    require_finite_matrix(values, path, "values", len(leaves))  # rows and columns as in the file
    distances = values[np.ix_(rows, columns)]
    names = list(leaves)
    tolerance = SYMMETRY_RTOL * max(float(np.abs(distances).max()), np.finfo(float).tiny)
    if (negative := np.argwhere(distances < 0)).size:
        i, j = negative[0]
        raise ContractError(
            path,
            "values",
            f"{len(negative)} negative distances (first: row {names[i]!r}, "
            f"column {names[j]!r}: {float(distances[i, j])!r})",
        )
    if (off := np.flatnonzero(np.abs(np.diag(distances)) > tolerance)).size:
        raise ContractError(
            path,
            "diagonal",
            f"{off.size} non-zero distances of a leaf to itself (first: "
            f"{names[off[0]]!r}: {float(distances[off[0], off[0]])!r})",
        )
    if (asymmetric := np.argwhere(np.abs(distances - distances.T) > tolerance)).size:
        i, j = asymmetric[0]
        raise ContractError(
            path,
            "values",
            f"not symmetric: row {names[i]!r}, column {names[j]!r} holds "
            f"{float(distances[i, j])!r}, row {names[j]!r}, column {names[i]!r} "
            f"{float(distances[j, i])!r}",
        )
    distances = (distances + distances.T) / 2
    np.fill_diagonal(distances, 0.0)
    return distances


# ---------------------------------------------------------------- annotation: class probabilities per fit


def probabilities(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """``obsm['proba_<fit>']`` for every fit of the task (``proba_random``, ``proba_without_<i>``) with
    columns ``uns['classes']`` (the task's classes, any order), rows the task's cells by id (any order). The fits
    that hold one type out (``proba_without_type_<j>``) are optional: without them the held-out-type scenario is
    not scored for this method (its note says so)."""
    del seed
    path = params["path"]
    adata = artifacts.read_h5ad(path)
    fits = [f"proba_{fit}" for fit in inputs.fits]
    required = [key for key in fits if not key.startswith(f"proba_{HELD_OUT_TYPE_FIT}")]
    found = [key for key in adata.obsm if key.startswith("proba_")]
    if missing := [key for key in required if key not in found]:
        raise ContractError(path, f"obsm['{missing[0]}']", f"missing; the task's fits need {', '.join(required)}")
    if extra := [key for key in found if key not in fits]:
        raise ContractError(path, f"obsm['{extra[0]}']", f"not a fit of the task, whose fits are {', '.join(fits)}")
    fitted = [fit for fit in inputs.fits if f"proba_{fit}" in found]
    wanted = [f"proba_{fit}" for fit in fitted]
    if "classes" not in adata.uns:
        raise ContractError(path, "uns['classes']", "missing (the class of each probability column)")
    classes = [str(name) for name in adata.uns["classes"]]
    columns = row_order(classes, inputs.classes, path, "uns['classes']", ("class", "classes"), "the task")
    for key in wanted:
        require_finite_matrix(adata.obsm[key], path, f"obsm['{key}']", adata.n_obs)
    check_output(adata, path)  # the track's own contract: (cells × classes), non-negative, rows summing to 1
    rows = row_order(adata.obs_names, inputs.names, path, "obs_names", ("cell", "cells"), "the task")
    obsm = {key: dense(adata.obsm[key]).astype(np.float64)[np.ix_(rows, columns)] for key in wanted}
    return MethodResult(obsm=obsm, uns={"classes": list(inputs.classes), "fits": fitted, "imported": path})


probabilities.accepted_params = ("path",)
probabilities.file_params = ("path",)
