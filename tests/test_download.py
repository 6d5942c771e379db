"""Checksum-verified downloads against a throwaway HTTP server on 127.0.0.1 (no other traffic)."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from celldag.download import DownloadError, decompress_gzip, download, record_pin, verify_pinned

DATA = b"gene\tcell\tcount\n" * 1000
DATA_SHA = hashlib.sha256(DATA).hexdigest()


class LocalServer:
    """Routes (path → response writer) and a count of requests per path."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.routes: dict[str, Callable[[BaseHTTPRequestHandler], None]] = {}
        self.requests: Counter[str] = Counter()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def ok(body: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    def write(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return write


def truncated(body: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    """Promise twice the body, send the body, close the connection."""

    def write(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(2 * len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True

    return write


@pytest.fixture
def server():
    state: LocalServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests[self.path] += 1
            route = state.routes.get(self.path)
            if route is None:
                self.send_error(404)
            else:
                route(self)

        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = LocalServer(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


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
    assert list(tmp_path.iterdir()) == []


def test_truncated_body_is_retried_then_fails(server, tmp_path):
    server.routes["/cut.txt"] = truncated(DATA)
    with pytest.raises(DownloadError, match="truncated body: 16000 of 32000 bytes") as error:
        download(server.url("/cut.txt"), tmp_path / "cut.txt", sha256=None, retries=2, backoff=0)
    assert "after 3 attempts" in str(error.value) and server.url("/cut.txt") in str(error.value)
    assert server.requests["/cut.txt"] == 3
    assert list(tmp_path.iterdir()) == []


def test_failed_first_request_is_retried(server, tmp_path):
    def flaky(handler: BaseHTTPRequestHandler) -> None:
        if server.requests["/flaky.txt"] == 1:
            handler.send_error(503)
        else:
            ok(DATA)(handler)

    server.routes["/flaky.txt"] = flaky
    target = tmp_path / "flaky.txt"
    assert download(server.url("/flaky.txt"), target, sha256=DATA_SHA, backoff=0) == DATA_SHA
    assert target.read_bytes() == DATA
    assert server.requests["/flaky.txt"] == 2


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
    from celldag.download import fetch_registry_file

    server.routes["/geo.txt"] = ok(DATA)
    pins = tmp_path / "checksums.json"
    target = tmp_path / "geo.txt"
    entry = {"name": "geo.txt", "url": server.url("/geo.txt"), "sha256": None}
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
