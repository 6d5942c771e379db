"""Checksum-verified downloads (stdlib urllib), sha256 pins for sources without published checksums.

A download streams into ``<target>.part`` beside the target while hashing, and is renamed onto the
target only when the body is complete and its digest is the expected one, so a failed or corrupted
fetch never leaves a file at the target path for a later step to parse. The .part survives retries
and a killed process, and the next attempt resumes it with an HTTP Range request where the server
honours one (else it starts over); a download that fails for good removes it.

A download mirror (``fetch``, docs/mirror.md) serves compute nodes without internet: a local folder or an
http(s) base URL holding each file at ``<base>/<host>/<path>`` of its URL, checked against the same sha256.
``celldag prefetch`` (celldag.cli, with ``celldag.jobs.prefetch.needed_files``) fills such a folder
with the files a config needs.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from celldag.artifacts import atomic_path, sha256_file
from celldag.embeddings.sources import mark_verified
from celldag.errors import InputError
from celldag.jobs.archives import extract_member
from celldag.registry import PIN_ON_FIRST_FETCH

PROGRESS_INTERVAL_S = 5.0
# client errors that a retry cannot fix: fail at once rather than hammer the server
_PERMANENT_HTTP_ERRORS = frozenset(range(400, 500)) - {408, 425, 429}


class DownloadError(InputError):
    """A download or checksum check failed; the message names the URL and/or file."""


class NotFoundError(DownloadError):
    """The server has no such file (HTTP 404 or 410): for a mirror, a file it lacks."""


def download(
    url: str,
    target: str | os.PathLike,
    *,
    sha256: str | None,
    timeout: float = 60,
    retries: int = 3,
    chunk_size: int = 1 << 20,
    progress: logging.Logger | None = None,
    backoff: float = 1.0,
) -> str:
    """Fetch ``url`` to ``target`` and return the file's sha256.

    ``sha256=None`` pins on first fetch: the file is accepted and its digest returned for the
    caller to record (``record_pin``). An existing target with the expected digest is kept without
    any network access. Network failures, HTTP 5xx/408/429 and truncated bodies are retried
    ``retries`` more times after waiting ``backoff * 2**k`` seconds; other 4xx errors and a
    checksum mismatch fail at once. A retry, or a later call after this process was killed, resumes
    from the bytes in ``<target>.part`` when the server honours a Range request.
    """
    target = Path(target)
    expected = sha256.lower() if sha256 is not None else None
    if expected is not None and target.is_file():
        if sha256_file(target) == expected:
            return expected
        target.unlink()  # known to be wrong: never leave it for a later step, even if the fetch fails
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")  # a stable name, so a later call can resume it
    if expected is None:  # nothing would catch a .part of an older version of the file being completed and pinned
        part.unlink(missing_ok=True)
    try:
        digest = _fetch_with_retries(url, part, target, timeout, retries, chunk_size, progress, backoff)
        if expected is not None and digest != expected:
            raise DownloadError(f"checksum mismatch for {url} → {target}: expected sha256 {expected}, got {digest}")
    except DownloadError:
        # failed for good: leave nothing behind (only a killed process leaves a .part to resume)
        part.unlink(missing_ok=True)
        raise
    os.replace(part, target)
    return digest


def _fetch_with_retries(
    url: str,
    part: Path,
    target: Path,
    timeout: float,
    retries: int,
    chunk_size: int,
    progress: logging.Logger | None,
    backoff: float,
) -> str:
    attempt = 0
    while True:
        try:
            return _fetch(url, part, timeout, chunk_size, progress)
        except _TransientError as err:
            if attempt == retries:
                raise DownloadError(f"download of {url} → {target} failed after {attempt + 1} attempts: {err}") from err
            if progress is not None:
                progress.warning("attempt %d for %s failed (%s); retrying", attempt + 1, url, err)
            time.sleep(backoff * 2**attempt)
            attempt += 1
        except urllib.error.HTTPError as err:  # only the permanent ones get here
            error = NotFoundError if err.code in (404, 410) else DownloadError
            raise error(f"download of {url} → {target} failed: HTTP {err.code} {err.reason}") from err


class _TransientError(Exception):
    """A failure worth retrying."""


def _fetch(url: str, part: Path, timeout: float, chunk_size: int, progress: logging.Logger | None) -> str:
    """Stream one response body into ``part``, after the bytes it holds if the server resumes; return the sha256."""
    received = 0
    try:
        response, offset = _open(url, part, timeout, progress)
        with response, open(part, "r+b" if offset else "wb") as out:
            # the digest is of the whole file: hash the bytes fetched before (reading to their end), then append
            digest = hashlib.file_digest(out, "sha256") if offset else hashlib.sha256()
            promised = response.headers.get("Content-Length")  # of this response: after a 206, the rest only
            promised = int(promised) if promised is not None else None
            meter = _Meter(url, promised, progress)
            while chunk := response.read(chunk_size):
                out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                meter.update(received)
    except urllib.error.HTTPError as err:
        if err.code in _PERMANENT_HTTP_ERRORS:
            raise
        raise _TransientError(f"HTTP {err.code} {err.reason}") from err
    except (OSError, http.client.HTTPException) as err:  # URLError, timeouts, resets are OSErrors
        raise _TransientError(f"{type(err).__name__}: {err}") from err
    # http.client returns b"" when the connection closes early instead of raising, so count the bytes
    if promised is not None and received != promised:
        raise _TransientError(f"truncated body: {received} of {promised} bytes")
    meter.done(received)
    return digest.hexdigest()


def _open(
    url: str, part: Path, timeout: float, progress: logging.Logger | None
) -> tuple[http.client.HTTPResponse, int]:
    """Request ``url``, asking for the bytes after ``part`` when it has some; return (response, offset).

    ``offset`` is where the response body goes in the file: len(part) when the server sent exactly
    that range, else 0 (the caller then truncates the .part and writes the body from the start).
    """
    offset = part.stat().st_size if part.exists() else 0
    if offset:
        try:
            response = urllib.request.urlopen(
                urllib.request.Request(url, headers={"Range": f"bytes={offset}-"}), timeout=timeout
            )
        except urllib.error.HTTPError as err:
            if err.code != 416:
                raise
            err.close()  # the .part is no prefix of the file (it changed, or the .part is complete): start over
        else:
            resumed = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
            if response.status == 206 and resumed and int(resumed[1]) == offset:
                if progress is not None:
                    progress.info("resuming %s at %d bytes", url, offset)
                return response, offset
            if response.status == 200:  # no range support: this is the whole file
                return response, 0
            response.close()  # a range we did not ask for: its bytes fit nowhere, so fetch the whole file
        part.unlink()
    return urllib.request.urlopen(url, timeout=timeout), 0


class _Meter:
    """Progress lines (bytes, MB/s) at most every PROGRESS_INTERVAL_S seconds."""

    def __init__(self, url: str, total: int | None, log: logging.Logger | None) -> None:
        self.url, self.total, self.log = url, total, log
        self.start = self.last = time.monotonic()

    def update(self, received: int) -> None:
        now = time.monotonic()
        if self.log is not None and now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            of_total = f" of {self.total / 1e6:.1f}" if self.total is not None else ""
            self.log.info(
                "%s: %.1f%s MB (%.1f MB/s)", self.url, received / 1e6, of_total, received / 1e6 / (now - self.start)
            )

    def done(self, received: int) -> None:
        if self.log is not None:
            seconds = max(time.monotonic() - self.start, 1e-9)
            self.log.info("%s: %d bytes in %.1f s (%.1f MB/s)", self.url, received, seconds, received / 1e6 / seconds)


def decompress_gzip(source: str | os.PathLike, target: str | os.PathLike, chunk_size: int = 1 << 20) -> Path:
    """Stream-decompress a gzip file; the target appears only once complete."""
    try:
        with gzip.open(source, "rb") as compressed, atomic_path(target) as tmp, open(tmp, "wb") as out:
            shutil.copyfileobj(compressed, out, chunk_size)
    except (OSError, EOFError) as err:  # BadGzipFile is an OSError; a cut-off stream is an EOFError
        raise DownloadError(f"cannot decompress {source} → {target}: {err}") from err
    return Path(target)


def expected_sha256(entry: Mapping[str, str | None], pin_file: str | os.PathLike, name: str) -> str | None:
    """The sha256 a registry ``files`` entry's download must have: the registry's, else (``pin-on-first-fetch``) the
    pin of this working directory's first fetch of ``name`` in ``pin_file``; None when neither exists yet."""
    given = entry.get("sha256")
    return given if given != PIN_ON_FIRST_FETCH else read_pins(pin_file).get(name)


def fetch_registry_file(
    entry: Mapping[str, str | None],
    target: str | os.PathLike,
    *,
    pin_file: str | os.PathLike,
    mirror: Mirror | None = None,
) -> str:
    """Fetch one ``files`` entry of a registry to ``target``, through ``mirror`` when given; return the download's
    sha256.

    The registry's sha256 is checked when it has one. Otherwise (GEO publishes none) the first fetch
    pins the digest in ``pin_file`` and every later fetch must match that pin. With ``extract`` the
    download is an archive (.deb, .zip): its digest is the one checked, only the member is kept.
    """
    log = logging.getLogger(__name__)
    target = Path(target)
    fetched = target.with_name(target.name + ".archive") if entry.get("extract") else target

    pinned = expected_sha256(entry, pin_file, target.name)
    try:
        digest = fetch(entry["url"], fetched, sha256=pinned, mirror=mirror, progress=log)
        if entry.get("extract"):
            extract_member(fetched, entry["extract"], target)
    finally:
        if fetched != target:
            fetched.unlink(missing_ok=True)
    if target.suffix in (".pickle", ".pkl"):  # unpickling runs code: only these verified bytes may be loaded
        mark_verified(target)
    if pinned is None:
        record_pin(target, digest, pin_file)
        log.warning(
            "%s: the registry gives no sha256; pinned %s in %s (add it to the registry entry to share it)",
            entry["url"],
            digest,
            pin_file,
        )
    return digest


# ---------------------------------------------------------------- the download mirror

MIRROR_VARIABLE = "CELLDAG_MIRROR"  # a lab sets it once in its cluster profile; the config's downloads.mirror wins


@dataclass(frozen=True)
class Mirror:
    """A local folder or an http(s) base URL holding each download at ``<base>/<host>/<path>`` of its URL.

    ``strict``: a file the mirror lacks is refused instead of fetched from its origin.
    """

    base: str
    strict: bool = False

    @property
    def is_url(self) -> bool:
        return re.match(r"https?://", self.base) is not None

    def location(self, url: str) -> str:
        """Where the mirror keeps ``url``: a path under a folder, or a URL under a base URL."""
        relative = mirror_path(url)
        if self.is_url:
            # percent-encoded, so that '?', '%' and the like of the file name reach a static file server as a name
            return self.base.rstrip("/") + "/" + urllib.parse.quote(relative, safe="/:")
        return str(Path(self.base).expanduser() / relative)


def configured_mirror(downloads: Mapping | None) -> Mirror | None:
    """The mirror of a run config's ``downloads`` (config.schema.yaml), else of $CELLDAG_MIRROR; None: none set."""
    downloads = downloads or {}
    base = downloads.get("mirror") or os.environ.get(MIRROR_VARIABLE)
    if not base:
        if downloads.get("strict"):  # strict promises no origin is contacted: with no mirror, nothing could be fetched
            raise DownloadError(
                f"downloads.strict is true but no mirror is set (downloads.mirror or ${MIRROR_VARIABLE})"
            )
        return None
    return Mirror(base, strict=bool(downloads.get("strict")))


def mirror_path(url: str) -> str:
    """``<host>/<path>`` of ``url`` — the path as written, ``?<query>`` appended to the file name when the URL
    has one (``…/x.zip?download=1``: the file is named ``x.zip?download=1``); a fragment, never sent, is dropped."""
    parts = urllib.parse.urlsplit(url)
    segments = parts.path.split("/")[1:]
    if not parts.hostname or not segments or any(segment in ("", ".", "..") for segment in segments):
        # such a path would name a folder, or one outside the host's: no file of the mirror answers it
        raise DownloadError(f"{url}: no mirror path for this URL (it needs a host and a path of named segments)")
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return "/".join([host, *segments]) + (f"?{parts.query}" if parts.query else "")


def fetch(
    url: str,
    target: str | os.PathLike,
    *,
    sha256: str | None,
    mirror: Mirror | None,
    progress: logging.Logger | None = None,
) -> str:
    """``download`` through ``mirror``: every file celldag downloads comes through here.

    The mirror's copy is tried first, with the same sha256 (a mismatch stops: never another source in its
    place). Only a copy the mirror lacks (no such file, HTTP 404/410) is fetched from the origin, or, when
    the mirror is strict, refused; any other failure of the mirror stops, so a broken mirror is noticed.
    """
    if mirror is None:
        return download(url, target, sha256=sha256, progress=progress)
    copy = mirror.location(url)
    try:
        if mirror.is_url:
            return download(copy, target, sha256=sha256, progress=progress)
        if (
            not Path(mirror.base).expanduser().is_dir()
        ):  # a mistyped folder must not pass for a mirror lacking every file
            raise DownloadError(
                f"download mirror {mirror.base}: no such folder (downloads.mirror or ${MIRROR_VARIABLE})"
            )
        if not Path(copy).is_file():
            raise NotFoundError(copy)
        return download(
            Path(copy).resolve().as_uri(), target, sha256=sha256, progress=progress
        )  # urllib reads file URLs
    except NotFoundError:
        if mirror.strict:
            raise DownloadError(
                f"{url} is not in the download mirror ({copy} not found) and downloads.strict is true: add it to the "
                "mirror (celldag prefetch) or set downloads.strict: false to fetch it from its origin"
            ) from None
    if progress is not None:
        progress.info("%s is not in the mirror (%s): fetching it from its origin", url, copy)
    return download(url, target, sha256=sha256, progress=progress)


# ---------------------------------------------------------------- sha256 pins ({file name: sha256} JSON)


def record_pin(target: str | os.PathLike, digest: str, pin_file: str | os.PathLike) -> None:
    """Pin ``digest`` for the target's file name; DownloadError if a different digest is pinned already."""
    name = Path(target).name
    with _locked(pin_file):  # parallel download jobs share one pin file
        pins = read_pins(pin_file)
        if pins.get(name, digest) != digest:
            raise DownloadError(
                f"{target} changed since it was pinned in {pin_file}: pinned sha256 {pins[name]}, got {digest}"
            )
        if name not in pins:
            with atomic_path(pin_file) as tmp:
                tmp.write_text(json.dumps(pins | {name: digest}, indent=2, sort_keys=True) + "\n")


def verify_pinned(target: str | os.PathLike, pin_file: str | os.PathLike) -> str:
    """Return the target's sha256; DownloadError if it is not pinned or differs from its pin."""
    name = Path(target).name
    pinned = read_pins(pin_file).get(name)
    if pinned is None:
        raise DownloadError(f"{target}: no sha256 pinned for {name!r} in {pin_file}")
    digest = sha256_file(target)
    if digest != pinned:
        raise DownloadError(f"checksum mismatch for {target}: pinned sha256 {pinned} in {pin_file}, got {digest}")
    return digest


def read_pins(pin_file: str | os.PathLike) -> dict[str, str]:
    path = Path(pin_file)
    return json.loads(path.read_text()) if path.exists() else {}


@contextlib.contextmanager
def _locked(pin_file: str | os.PathLike) -> Iterator[None]:
    lock = Path(f"{pin_file}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
