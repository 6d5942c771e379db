"""Extract one file from a Debian package (.deb) or a .zip without unpacking the rest.

A .deb is an ``ar`` archive ("!<arch>\\n", then per member a 60-byte header and the data, padded to
an even length) whose ``data.tar.<compression>`` member holds the package's files. We read the ar
headers ourselves and stream that tar member through ``tarfile``, so neither ``dpkg`` nor disk
space for the whole package is needed; the extracted file appears at its target only once complete.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from celldag.artifacts import atomic_path

AR_MAGIC = b"!<arch>\n"
AR_HEADER_SIZE = 60
# data.tar suffix → tarfile stream mode; zst works only where tarfile supports it (Python >= 3.14)
DATA_TAR_COMPRESSION = {
    "data.tar": "",
    "data.tar.gz": "gz",
    "data.tar.xz": "xz",
    "data.tar.bz2": "bz2",
    "data.tar.zst": "zst",
}
CHUNK_SIZE = 1 << 20


def extract_member(archive: str | os.PathLike, member: str, out: str | os.PathLike) -> None:
    """Write the file ``member`` (a path inside the package, without a leading "./") of ``archive`` to ``out``."""
    archive = Path(archive)
    with open(archive, "rb") as handle:
        is_deb = handle.read(len(AR_MAGIC)) == AR_MAGIC
    if is_deb:
        _extract_from_deb(archive, member, out)
    elif zipfile.is_zipfile(archive):
        _extract_from_zip(archive, member, out)
    else:
        raise ValueError(f"{archive}: neither a Debian package (ar archive) nor a zip file")


def _extract_from_zip(archive: Path, member: str, out: str | os.PathLike) -> None:
    with zipfile.ZipFile(archive) as bundle:
        names = {_normalise(name): name for name in bundle.namelist() if not name.endswith("/")}
        if member not in names:
            raise ValueError(f"{archive}: no member {member!r}")
        with bundle.open(names[member]) as source, atomic_path(out) as tmp, open(tmp, "wb") as target:
            shutil.copyfileobj(source, target, CHUNK_SIZE)


def _extract_from_deb(archive: Path, member: str, out: str | os.PathLike) -> None:
    with open(archive, "rb") as handle:
        for name, size in _ar_members(handle, archive):
            if name in DATA_TAR_COMPRESSION:
                data = _Window(handle, size)
                break
        else:
            raise ValueError(f"{archive}: no data.tar member (not a Debian binary package?)")
        try:
            tar = tarfile.open(fileobj=data, mode=f"r|{DATA_TAR_COMPRESSION[name]}")
        except tarfile.CompressionError as err:
            raise ValueError(f"{archive}: cannot decompress its {name} with this Python ({err})") from err
        with tar:
            for entry in tar:  # a stream: each entry's data can be read only when the entry is reached
                if _normalise(entry.name) != member:
                    continue
                if not entry.isfile():
                    raise ValueError(f"{archive}: member {member!r} is not a regular file")
                with tar.extractfile(entry) as source, atomic_path(out) as tmp, open(tmp, "wb") as target:
                    shutil.copyfileobj(source, target, CHUNK_SIZE)
                return
    raise ValueError(f"{archive}: no member {member!r} in its {name}")


def _normalise(name: str) -> str:
    return name.removeprefix("./")


def _ar_members(handle: BinaryIO, archive: Path) -> Iterator[tuple[str, int]]:
    """Yield (name, size) per ar member with ``handle`` at the member's data; skip what the caller leaves."""
    handle.seek(len(AR_MAGIC))
    while header := handle.read(AR_HEADER_SIZE):
        if len(header) < AR_HEADER_SIZE or header[58:60] != b"`\n":
            raise ValueError(f"{archive}: corrupt ar header at byte {handle.tell() - len(header)}")
        name = header[:16].decode("ascii").rstrip(" ").removesuffix("/")  # GNU ar ends names with "/"
        size = int(header[48:58].decode("ascii"))
        start = handle.tell()
        yield name, size
        handle.seek(start + size + size % 2)  # member data is padded to an even length


class _Window(io.RawIOBase):
    """Read-only view of ``size`` bytes of ``handle`` from its current position."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle, self.left = handle, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self.handle.read(min(len(buffer), self.left))
        buffer[: len(chunk)] = chunk
        self.left -= len(chunk)
        return len(chunk)
