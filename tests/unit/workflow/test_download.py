"""Checksum-verified downloads against a throwaway HTTP server on 127.0.0.1 (no other traffic)."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
import socket
from collections.abc import Callable

import pytest
from conftest import Handler, ok, truncated

from celldag.jobs.download import DownloadError, decompress_gzip, download, record_pin, verify_pinned

DATA = b"gene\tcell\tcount\n" * 1000
DATA_SHA = hashlib.sha256(DATA).hexdigest()


def ranged(body: bytes, cut: int | None = None, cuts: int = 1) -> Callable[[Handler], None]:
    """Honour ``Range: bytes=N-`` with 206 and the rest of the body (416 past its end), else 200.

    With ``cut``, the first ``cuts`` responses send only ``cut`` bytes of what they promise, then close.
    """

    def write(handler: Handler) -> None:
        asked = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", ""))
        start = int(asked[1]) if asked else 0
        if asked and start >= len(body):
            handler.send_error(416)
            return
        if asked:
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            handler.send_response(200)
        handler.send_header("Content-Length", str(len(body) - start))
        handler.end_headers()
        cutting = cut is not None and handler.state.requests[handler.path] <= cuts
        handler.send_body(body[start:][:cut] if cutting else body[start:])
        if cutting:
            handler.close_connection = True

    return write


def whole_as_range(body: bytes) -> Callable[[Handler], None]:
    """Answer every request with 206 and the whole body as ``bytes 0-…``, whatever range was asked for."""

    def write(handler: Handler) -> None:
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes 0-{len(body) - 1}/{len(body)}")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.send_body(body)

    return write


def test_download_with_right_checksum(server, tmp_path):
    server.routes["/data.txt"] = ok(DATA)
    target = tmp_path / "data.txt"
    assert download(server.url("/data.txt"), target, sha256=DATA_SHA.upper(), backoff=0) == DATA_SHA
    assert target.read_bytes() == DATA
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]  # no temporary file left behind


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    server.routes["/data.txt"] = ok(DATA)
    target = tmp_path / "data.txt"
    wrong = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(DownloadError, match="checksum mismatch") as error:
        download(server.url("/data.txt"), target, sha256=wrong, backoff=0)
    assert server.url("/data.txt") in str(error.value) and str(target) in str(error.value)
    assert DATA_SHA in str(error.value) and wrong in str(error.value)
    assert list(tmp_path.iterdir()) == []
    assert server.requests["/data.txt"] == 1  # a complete but wrong body is not fetched again


def test_404_fails_at_once_naming_the_url(server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404") as error:
        download(server.url("/missing.txt"), tmp_path / "x.txt", sha256=None, backoff=0)
    assert server.url("/missing.txt") in str(error.value)
    assert server.requests["/missing.txt"] == 1
    assert list(tmp_path.iterdir()) == []  # neither target nor .part
    (tmp_path / "x.txt.part").write_bytes(DATA[:100])  # left by a killed call: the resume gets the 404
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(server.url("/missing.txt"), tmp_path / "x.txt", sha256=DATA_SHA, backoff=0)
    assert server.ranges["/missing.txt"] == [None, "bytes=100-"]
    assert list(tmp_path.iterdir()) == []


def test_truncated_body_is_retried_then_fails(server, tmp_path):
    server.routes["/cut.txt"] = truncated(DATA)
    with pytest.raises(DownloadError, match="truncated body: 16000 of 32000 bytes") as error:
        download(server.url("/cut.txt"), tmp_path / "cut.txt", sha256=None, retries=2, backoff=0)
    assert "after 3 attempts" in str(error.value) and server.url("/cut.txt") in str(error.value)
    assert server.requests["/cut.txt"] == 3
    # the retries ask to resume; the server ignores Range (200), so each starts over
    assert server.ranges["/cut.txt"] == [None, "bytes=16000-", "bytes=16000-"]
    assert list(tmp_path.iterdir()) == []  # neither target nor .part


def test_truncated_bodies_resume_until_retries_run_out(server, tmp_path):
    server.routes["/cut.txt"] = ranged(DATA, cut=4000, cuts=99)
    with pytest.raises(DownloadError, match="after 3 attempts: truncated body: 4000 of 8000 bytes"):
        download(server.url("/cut.txt"), tmp_path / "cut.txt", sha256=None, retries=2, backoff=0)
    assert server.ranges["/cut.txt"] == [None, "bytes=4000-", "bytes=8000-"]
    assert server.sent["/cut.txt"] == [4000, 4000, 4000]
    assert list(tmp_path.iterdir()) == []  # the 12000 bytes fetched are dropped with the .part


def test_failed_first_request_is_retried(server, tmp_path):
    def flaky(handler: Handler) -> None:
        if server.requests["/flaky.txt"] == 1:
            handler.send_error(503)
        else:
            ok(DATA)(handler)

    server.routes["/flaky.txt"] = flaky
    target = tmp_path / "flaky.txt"
    assert download(server.url("/flaky.txt"), target, sha256=DATA_SHA, backoff=0) == DATA_SHA
    assert target.read_bytes() == DATA
    assert server.requests["/flaky.txt"] == 2


def test_truncated_body_is_resumed_with_a_range_request(server, tmp_path, caplog):
    url = server.url("/data.txt")
    server.routes["/data.txt"] = ranged(DATA, cut=6000)
    target = tmp_path / "data.txt"
    logger = logging.getLogger("celldag.test_download")
    with caplog.at_level(logging.INFO, logger=logger.name):
        assert download(url, target, sha256=DATA_SHA, backoff=0, progress=logger) == DATA_SHA
    assert target.read_bytes() == DATA
    assert server.ranges["/data.txt"] == [None, "bytes=6000-"]
    assert server.sent["/data.txt"] == [6000, len(DATA) - 6000]  # only the missing bytes the second time
    assert f"resuming {url} at 6000 bytes" in caplog.text
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


def test_part_left_by_a_killed_call_is_resumed(server, tmp_path):
    server.routes["/data.txt"] = ranged(DATA)
    target = tmp_path / "data.txt"
    half = len(DATA) // 2
    (tmp_path / "data.txt.part").write_bytes(DATA[:half])
    assert download(server.url("/data.txt"), target, sha256=DATA_SHA, backoff=0) == DATA_SHA  # of the whole file
    assert target.read_bytes() == DATA
    assert server.ranges["/data.txt"] == [f"bytes={half}-"]
    assert server.sent["/data.txt"] == [len(DATA) - half]
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


def test_part_is_not_resumed_without_a_digest_to_check_it(server, tmp_path):
    """A first fetch to pin (sha256=None) must not complete a .part of an older file and pin the mix."""
    server.routes["/data.txt"] = ranged(DATA)
    (tmp_path / "data.txt.part").write_bytes(b"old version " * 10)
    assert download(server.url("/data.txt"), tmp_path / "data.txt", sha256=None, backoff=0) == DATA_SHA
    assert server.ranges["/data.txt"] == [None]


@pytest.mark.parametrize(
    ("route", "part", "ranges", "sent"),
    [
        (ok, b"x" * 100, ["bytes=100-"], [len(DATA)]),  # Range ignored: the 200 body replaces the .part
        (whole_as_range, b"x" * 100, ["bytes=100-", None], [len(DATA)] * 2),  # a range not asked for: refetch
        (ranged, DATA + b"x", [f"bytes={len(DATA) + 1}-", None], [len(DATA)]),  # 416: drop the .part, refetch
    ],
    ids=["200", "other-range", "416"],
)
def test_part_is_refetched_from_the_start_when_the_server_does_not_resume_it(
    server, tmp_path, route, part, ranges, sent
):
    server.routes["/data.txt"] = route(DATA)
    target = tmp_path / "data.txt"
    (tmp_path / "data.txt.part").write_bytes(part)  # not a prefix of DATA: only a fresh start gives DATA
    assert download(server.url("/data.txt"), target, sha256=DATA_SHA, retries=0, backoff=0) == DATA_SHA
    assert target.read_bytes() == DATA
    assert server.ranges["/data.txt"] == ranges
    assert server.sent["/data.txt"] == sent
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


def test_resumed_stale_part_with_wrong_bytes_fails_and_leaves_nothing(server, tmp_path):
    server.routes["/data.txt"] = ranged(DATA)
    target = tmp_path / "data.txt"
    half = len(DATA) // 2
    (tmp_path / "data.txt.part").write_bytes(b"x" * half)
    with pytest.raises(DownloadError, match="checksum mismatch") as error:
        download(server.url("/data.txt"), target, sha256=DATA_SHA, backoff=0)
    assert hashlib.sha256(b"x" * half + DATA[half:]).hexdigest() in str(error.value)  # the .part is hashed
    assert server.ranges["/data.txt"] == [f"bytes={half}-"]
    assert list(tmp_path.iterdir()) == []


def test_connection_refused_is_retried_then_fails(tmp_path):
    with socket.socket() as probe:  # a port on 127.0.0.1 with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/data.txt"
    with pytest.raises(DownloadError, match="after 2 attempts") as error:
        download(url, tmp_path / "data.txt", sha256=None, retries=1, backoff=0)
    assert url in str(error.value)


def test_existing_good_file_makes_no_request(server, tmp_path):
    target = tmp_path / "data.txt"
    target.write_bytes(DATA)
    assert download(server.url("/data.txt"), target, sha256=DATA_SHA) == DATA_SHA
    assert sum(server.requests.values()) == 0


def test_existing_bad_file_is_fetched_again(server, tmp_path):
    server.routes["/data.txt"] = ok(DATA)
    target = tmp_path / "data.txt"
    target.write_bytes(b"stale")
    assert download(server.url("/data.txt"), target, sha256=DATA_SHA, backoff=0) == DATA_SHA
    assert target.read_bytes() == DATA


def test_pin_on_first_fetch_then_a_changed_file_fails(server, tmp_path):
    pins = tmp_path / "pins.json"
    server.routes["/geo.txt.gz"] = ok(DATA)
    first = tmp_path / "a" / "geo.txt.gz"
    digest = download(server.url("/geo.txt.gz"), first, sha256=None, backoff=0)
    record_pin(first, digest, pins)
    record_pin(first, digest, pins)  # the same digest again is fine
    assert verify_pinned(first, pins) == DATA_SHA

    server.routes["/geo.txt.gz"] = ok(DATA + b"one more line\n")  # the publisher replaced the file
    second = tmp_path / "b" / "geo.txt.gz"
    changed = download(server.url("/geo.txt.gz"), second, sha256=None, backoff=0)
    with pytest.raises(DownloadError, match="changed since it was pinned"):
        record_pin(second, changed, pins)
    with pytest.raises(DownloadError, match="checksum mismatch"):
        verify_pinned(second, pins)
    # passing the pin as the expected checksum keeps the changed file off the target path
    third = tmp_path / "c" / "geo.txt.gz"
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download(server.url("/geo.txt.gz"), third, sha256=DATA_SHA, backoff=0)
    assert not third.exists()


def test_verify_pinned_needs_a_pin(tmp_path):
    target = tmp_path / "data.txt"
    target.write_bytes(DATA)
    with pytest.raises(DownloadError, match="no sha256 pinned"):
        verify_pinned(target, tmp_path / "pins.json")


def test_progress_is_logged(server, tmp_path, caplog):
    server.routes["/data.txt"] = ok(DATA)
    logger = logging.getLogger("celldag.test_download")
    with caplog.at_level(logging.INFO, logger=logger.name):
        download(server.url("/data.txt"), tmp_path / "data.txt", sha256=DATA_SHA, progress=logger)
    assert "16000 bytes" in caplog.text and "MB/s" in caplog.text


def test_decompress_gzip(tmp_path):
    source = tmp_path / "data.txt.gz"
    source.write_bytes(gzip.compress(DATA))
    assert decompress_gzip(source, tmp_path / "data.txt").read_bytes() == DATA

    source.write_bytes(gzip.compress(DATA)[:-20])  # cut off before the end-of-stream marker
    with pytest.raises(DownloadError, match="cannot decompress"):
        decompress_gzip(source, tmp_path / "cut.txt")
    assert not (tmp_path / "cut.txt").exists()


def test_registry_file_pins_on_first_fetch_and_checks_later(server, tmp_path):
    from celldag.jobs.download import fetch_registry_file
    from celldag.registry import PIN_ON_FIRST_FETCH

    server.routes["/geo.txt"] = ok(DATA)
    pins = tmp_path / "checksums.json"
    target = tmp_path / "geo.txt"
    entry = {"name": "geo.txt", "url": server.url("/geo.txt"), "sha256": PIN_ON_FIRST_FETCH}
    assert fetch_registry_file(entry, target, pin_file=pins) == DATA_SHA
    assert json.loads(pins.read_text()) == {"geo.txt": DATA_SHA}
    assert fetch_registry_file(entry, target, pin_file=pins) == DATA_SHA  # pinned and present: no request
    assert server.requests["/geo.txt"] == 1
    target.unlink()
    server.routes["/geo.txt"] = ok(DATA + b"changed upstream")
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch_registry_file(entry, target, pin_file=pins)
    assert not target.exists()
    with pytest.raises(DownloadError, match="checksum mismatch"):  # the registry's own sha256 wins when given
        fetch_registry_file(entry | {"sha256": DATA_SHA}, target, pin_file=pins)
