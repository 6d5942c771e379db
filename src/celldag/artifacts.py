"""Artifact I/O: atomic writes (no partial file is ever left at the final path) and checked reads."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from celldag import contracts

_UMASK = os.umask(0o022)  # read once: umask can only be read by setting it
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    os.close(handle)
    os.chmod(tmp_name, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide results from the lab on shared storage
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(data: dict, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_h5ad(adata, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        adata.write_h5ad(tmp)


def write_parquet(table, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        table.to_parquet(tmp, index=False)


def read_h5ad(path: str | os.PathLike, check: Callable | None = None, **check_args):
    """Read an AnnData and, when ``check`` is given, hold it to that contract."""
    import anndata

    try:
        adata = anndata.read_h5ad(path)
    except (OSError, KeyError) as err:
        raise contracts.ContractError(str(path), "file", f"not a readable h5ad file ({err})") from err
    if check is not None:
        check(adata, str(path), **check_args)
    return adata


def read_scores(path: str | os.PathLike):
    import pandas as pd

    table = pd.read_parquet(path)
    contracts.check_scores(table, str(path))
    return table


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
