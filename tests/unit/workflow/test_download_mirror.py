"""The download mirror and `celldag prefetch`: ../shared/realdata (published files laid out <host>/<path>) served
as a local folder and by an HTTP server on 127.0.0.1; origins are servers on 127.0.0.1 too, never the internet."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow, ok, run_snakemake

from celldag.cli import main
from celldag.jobs.download import (
    MIRROR_VARIABLE,
    DownloadError,
    Mirror,
    configured_mirror,
    fetch,
    fetch_registry_file,
    mirror_path,
)

ROOT = Path(__file__).resolve().parents[3]
COMMIT_PATH = "LuyiTian/sc_mixology/7d00ffb0bd043467f365a9358d7312f294f13c9f/data/csv"
URL = f"https://raw.githubusercontent.com/{COMMIT_PATH}/sc_dropseq.metadata.csv.gz"
SHA = "4c48f3e13778e89192d9861095bc102cc0deb9eba1a7f47a093f5a058ce1aa6a"  # of the published file
ABSENT_URL = f"https://raw.githubusercontent.com/{COMMIT_PATH}/sc_10x.count.csv.gz"  # upstream, not in shared/
ZENODO = "https://zenodo.org/records/10833191/files/GenePT_emebdding_v2.zip?download=1"


@pytest.fixture(autouse=True)
def no_internet(monkeypatch) -> list[str]:
    """Name resolution of any host but 127.0.0.1 fails: a fetch that wrongly went to an origin on the internet
    fails here, and the host is recorded for the test to name."""
    contacted: list[str] = []
    resolve = socket.getaddrinfo

    def local_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost"):
            contacted.append(host)
            raise OSError(f"test: no network beyond 127.0.0.1 ({host})")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
    monkeypatch.delenv(MIRROR_VARIABLE, raising=False)
    return contacted


class QuietHandler(SimpleHTTPRequestHandler):
    timeout = 10  # a stuck client cannot hold a handler thread past the test

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """A static file server of ``folder`` on 127.0.0.1 in a thread, stopped on exit; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def mirror_of(kind: str, folder: Path) -> Iterator[str]:
    """``folder`` as the mirror's base: the folder itself, or its URL on a server of it."""
    if kind == "folder":
        yield str(folder)
    else:
        with serve(folder) as base:
            yield base + "/"


def entry(url: str = URL, sha256: str = SHA) -> dict:
    return {"name": url.rsplit("/", 1)[1].split("?")[0], "url": url, "sha256": sha256}


# ---------------------------------------------------------------- where a URL is in a mirror


def test_mirror_path_is_host_and_path_with_the_query_in_the_file_name():
    assert mirror_path(URL) == f"raw.githubusercontent.com/{COMMIT_PATH}/sc_dropseq.metadata.csv.gz"
    assert mirror_path(ZENODO) == "zenodo.org/records/10833191/files/GenePT_emebdding_v2.zip?download=1"
    assert mirror_path("http://Example.org:8080/a/b.txt#part") == "example.org:8080/a/b.txt"  # a fragment is never sent
    assert mirror_path("ftp://ftp.example.org/pub/x%20y.gz") == "ftp.example.org/pub/x%20y.gz"  # the path as written
    for url in ("https://example.org/a/../../etc/passwd", "https://example.org/folder/", "https://example.org"):
        with pytest.raises(DownloadError, match="no mirror path"):
            mirror_path(url)
    # an http mirror is asked for the file name percent-encoded: a static server maps it back onto the name
    assert Mirror("http://127.0.0.1:1/m/").location(ZENODO) == (
        "http://127.0.0.1:1/m/zenodo.org/records/10833191/files/GenePT_emebdding_v2.zip%3Fdownload%3D1"
    )
    assert (
        Mirror("/srv/m").location(ZENODO)
        == "/srv/m/zenodo.org/records/10833191/files/GenePT_emebdding_v2.zip?download=1"
    )


def test_the_config_key_wins_over_the_environment(monkeypatch):
    assert configured_mirror({"mirror": None, "strict": False}) is None
    monkeypatch.setenv(MIRROR_VARIABLE, "/lab/mirror")
    assert configured_mirror({"mirror": None, "strict": True}) == Mirror("/lab/mirror", strict=True)
    assert configured_mirror({"mirror": "http://mirror.lab/", "strict": False}) == Mirror("http://mirror.lab/")
    monkeypatch.delenv(MIRROR_VARIABLE)
    with pytest.raises(DownloadError, match=r"downloads.strict is true but no mirror is set .*CELLDAG_MIRROR"):
        configured_mirror({"mirror": None, "strict": True})


# ---------------------------------------------------------------- fetching through the mirror


@pytest.mark.parametrize("kind", ["folder", "http"])
def test_a_registry_file_comes_from_the_mirror(kind, realdata, tmp_path, no_internet):
    target = tmp_path / "resources" / "sc_dropseq.metadata.csv.gz"
    with mirror_of(kind, realdata) as base:  # strict: the origin, on the internet, is never asked
        digest = fetch_registry_file(entry(), target, pin_file=tmp_path / "pins.json", mirror=Mirror(base, strict=True))
    assert digest == SHA == hashlib.sha256(target.read_bytes()).hexdigest()
    assert target.read_bytes() == (realdata / mirror_path(URL)).read_bytes()
    assert no_internet == []


@pytest.mark.parametrize("kind", ["folder", "http"])
def test_a_changed_byte_in_the_mirror_stops_with_the_checksum_line(kind, realdata, tmp_path, no_internet):
    copy = tmp_path / "mirror" / mirror_path(URL)
    copy.parent.mkdir(parents=True)
    data = bytearray((realdata / mirror_path(URL)).read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    target = tmp_path / "resources" / "sc_dropseq.metadata.csv.gz"
    with mirror_of(kind, tmp_path / "mirror") as base:  # not strict: still no fall-back to the origin
        with pytest.raises(
            DownloadError, match=f"checksum mismatch for .*sc_dropseq.metadata.csv.gz.*expected sha256 {SHA}"
        ):
            fetch_registry_file(entry(), target, pin_file=tmp_path / "pins.json", mirror=Mirror(base))
    assert not target.exists() and not list(target.parent.iterdir())
    assert no_internet == []


@pytest.mark.parametrize("kind", ["folder", "http"])
def test_strict_refuses_a_file_the_mirror_lacks(kind, realdata, tmp_path, no_internet):
    target = tmp_path / "sc_10x.count.csv.gz"
    with mirror_of(kind, realdata) as base:
        with pytest.raises(DownloadError) as raised:
            fetch_registry_file(
                entry(ABSENT_URL, "0" * 64), target, pin_file=tmp_path / "pins.json", mirror=Mirror(base, strict=True)
            )
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{ABSENT_URL} is not in the download mirror (")
    assert f"{base.rstrip('/')}/raw.githubusercontent.com/{COMMIT_PATH}/sc_10x.count.csv.gz not found" in message
    assert "downloads.strict is true" in message
    assert not target.exists() and no_internet == []


@pytest.mark.parametrize("kind", ["folder", "http"])
def test_without_strict_a_file_the_mirror_lacks_comes_from_its_origin(kind, realdata, server, tmp_path):
    body = (realdata / mirror_path(URL)).read_bytes()
    server.routes["/data/sc_dropseq.metadata.csv.gz"] = ok(body)  # the origin: a server on 127.0.0.1
    url = server.url("/data/sc_dropseq.metadata.csv.gz")
    target = tmp_path / "sc_dropseq.metadata.csv.gz"
    with mirror_of(kind, realdata) as base:
        assert fetch_registry_file(entry(url), target, pin_file=tmp_path / "pins.json", mirror=Mirror(base)) == SHA
    assert server.requests["/data/sc_dropseq.metadata.csv.gz"] == 1 and target.read_bytes() == body


@pytest.mark.parametrize("kind", ["folder", "http"])
def test_a_url_with_a_query_string_is_found_under_its_file_name_with_the_query(kind, tmp_path):
    copy = tmp_path / "mirror" / "zenodo.org/records/10833191/files/GenePT_emebdding_v2.zip?download=1"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(b"not really a zip")
    digest = hashlib.sha256(b"not really a zip").hexdigest()
    with mirror_of(kind, tmp_path / "mirror") as base:
        assert fetch(ZENODO, tmp_path / "x.zip", sha256=digest, mirror=Mirror(base, strict=True)) == digest


def test_a_mirror_folder_that_does_not_exist_stops(tmp_path):
    with pytest.raises(
        DownloadError, match=r"download mirror .*/typo: no such folder \(downloads.mirror or \$CELLDAG_MIRROR\)"
    ):
        fetch_registry_file(
            entry(), tmp_path / "x.gz", pin_file=tmp_path / "pins.json", mirror=Mirror(str(tmp_path / "typo"))
        )


# ---------------------------------------------------------------- celldag prefetch


def test_prefetch_lists_exactly_the_files_of_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no config/config.yaml here: the file below is the whole config
    config = {
        "datasets": ["celegans_packer2019", "pbmc68k_batched"],
        "seeds": [0],
        "methods": ["nj_raw", "scilama/text", "scilama/go_svd", "scilama/genept", "pca"],
    }
    Path("run.yaml").write_text(yaml.safe_dump(config))
    assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT), "--list"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    geo = "https://ftp.ncbi.nlm.nih.gov/geo/series/GSE126nnn/GSE126954/suppl/GSE126954_"
    debs = "https://deb.debian.org/debian/pool/main/r/"
    assert [url for url, _, _ in rows] == sorted(
        [  # go_text and go_svd share the .debs; both GenePT files one zip
            f"{geo}gene_by_cell_count_matrix.txt.gz",
            f"{geo}cell_annotation.csv.gz",
            f"{geo}gene_annotation.csv.gz",
            f"{debs}r-bioc-org.hs.eg.db/r-bioc-org.hs.eg.db_3.16.0-1_all.deb",
            f"{debs}r-bioc-go.db/r-bioc-go.db_3.16.0-1_all.deb",
            ZENODO,
        ]
    )
    by_url = {url: (sha, path) for url, sha, path in rows}
    assert by_url[ZENODO] == ("pin-on-first-fetch", mirror_path(ZENODO))
    deb = f"{debs}r-bioc-go.db/r-bioc-go.db_3.16.0-1_all.deb"
    assert by_url[deb][0] == "6cf9c43b97212811ecb7ad0d7cde12e76f984ab7494a59c02455239a9dd3243d"

    # a pin of this working directory's first fetch is the digest the prefetch checks
    Path("resources/embeddings").mkdir(parents=True)
    Path("resources/embeddings/checksums.json").write_text(
        '{"GenePT_gene_embedding_ada_text.pickle": "' + "a" * 64 + '"}'
    )
    assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT), "--list"]) == 0
    assert f"{ZENODO}\t{'a' * 64}\t" in capsys.readouterr().out


def test_prefetch_lists_the_pretrained_model_a_query_names(tmp_path, monkeypatch, capsys):
    """config ``annotate``: a query whose ``model`` is a pretrained model of the registry (config/models.yaml) adds its
    file, with the registry's sha256, to what a run downloads (issue 52)."""
    monkeypatch.chdir(tmp_path)
    config = {
        "datasets": ["pbmc68k_batched"],
        "seeds": [0],
        "methods": ["pca"],
        "annotate": {
            "lab": {"reference": "pbmc68k_batched", "query": "lab.h5ad", "model": "celltypist_immune_all_low"}
        },
    }
    Path("run.yaml").write_text(yaml.safe_dump(config))
    assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT), "--list"]) == 0
    url = "https://celltypist.cog.sanger.ac.uk/models/Pan_Immune_CellTypist/v2/Immune_All_Low.pkl"
    assert capsys.readouterr().out.splitlines() == [
        f"{url}\t290874d35dac039d4c9218c343fde4aac1077709b72a331ce7266f6828c36502\t{mirror_path(url)}"
    ]


def lab_dataset(url: str, sha256: str) -> dict:
    """A lab's url dataset (registry overlay) with one file: prefetch only downloads, nothing reads it."""
    return {
        "lab_cellbench": {
            "track": "lineage",
            "source": "url",
            "loader": "celldag.data.packer2019:prepare_packer2019",
            "description": "CellBench Drop-seq metadata",
            "license": "MIT",
            "files": [{"name": "sc_dropseq.metadata.csv.gz", "url": url, "sha256": sha256}],
        }
    }


def test_prefetch_fills_a_mirror_that_a_strict_run_then_reads(realdata, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with serve(realdata) as origin:  # stands in for raw.githubusercontent.com
        url = f"{origin}/{mirror_path(URL)}"
        Path("lab.yaml").write_text(yaml.safe_dump(lab_dataset(url, SHA)))
        config = {"datasets": ["lab_cellbench"], "methods": ["nj_raw"], "registries": {"datasets": ["lab.yaml"]}}
        Path("run.yaml").write_text(yaml.safe_dump(config))
        assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT), "--dest", "mirror"]) == 0
        assert capsys.readouterr().out == f"{SHA}  {mirror_path(url)}\n"  # sha256sum's format
        monkeypatch.setenv(MIRROR_VARIABLE, "mirror")  # the default --dest: present and verified, kept
        assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT)]) == 0

        Path("lab.yaml").write_text(yaml.safe_dump(lab_dataset(url, "0" * 64)))
        shutil.rmtree("mirror")
        assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT), "--dest", "mirror"]) == 1
        assert "checksum mismatch" in capsys.readouterr().err
        assert not (Path("mirror") / mirror_path(url)).exists()

        Path("lab.yaml").write_text(yaml.safe_dump(lab_dataset(url, SHA)))
        assert main(["prefetch", "--configfile", "run.yaml", "--workflow", str(ROOT), "--dest", "mirror"]) == 0
    # the origin is gone: the run's download comes from the mirror the prefetch filled
    target = tmp_path / "resources/lab_cellbench/sc_dropseq.metadata.csv.gz"
    assert (
        fetch_registry_file(
            lab_dataset(url, SHA)["lab_cellbench"]["files"][0],
            target,
            pin_file=tmp_path / "pins.json",
            mirror=configured_mirror({"mirror": None, "strict": True}),
        )
        == SHA
    )


@pytest.mark.e2e
def test_the_workflow_downloads_through_the_mirror_of_the_environment(realdata, tmp_path, monkeypatch):
    workdir = copy_workflow(tmp_path / "wf")
    (workdir / "lab.yaml").write_text(yaml.safe_dump(lab_dataset(URL, SHA)))
    config = {
        "datasets": ["lab_cellbench"],
        "methods": ["nj_raw"],
        "seeds": [0],
        "registries": {"datasets": ["lab.yaml"]},
        "downloads": {"strict": True},
    }
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv(MIRROR_VARIABLE, str(realdata))  # as a lab's cluster profile sets it
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):  # a stray origin request dies on 127.0.0.1
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")
    run_snakemake(workdir, "resources/lab_cellbench/sc_dropseq.metadata.csv.gz")
    assert (workdir / "resources/lab_cellbench/sc_dropseq.metadata.csv.gz").read_bytes() == (
        realdata / mirror_path(URL)
    ).read_bytes()
