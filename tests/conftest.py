"""Shared fixtures: repository paths, small registries built in memory, a throwaway HTTP server on 127.0.0.1."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from celldag import contracts, plan
from celldag.plan import ORG_ROLE, Run, make_run
from celldag.registry import Registries, apply_schema, load_config, read_yaml
from celldag.tracks import tracks_of

REPO = Path(__file__).resolve().parents[1]
E2E = REPO / "tests/e2e"
# fixtures of tests/support/ modules that tests in several folders use, by name (the GEO files a local server serves)
pytest_plugins = ["geo_files"]
# exact copies of published files laid out <host>/<path> of their URLs: a download mirror (docs/mirror.md)
REALDATA = REPO.parent / "shared" / "realdata"
TRACKS = tracks_of(read_yaml(REPO / "config/tracks.yaml"))  # the shipped tracks by id


def check_prepared(adata, path: str) -> None:
    """The prepared-dataset contract of the shipped track the file names (else lineage's), as a job checks it."""
    track_id = adata.uns.get("track") if adata.uns.get("track") in TRACKS else "lineage"
    contracts.check_prepared_dataset(adata, path, track_id, TRACKS[track_id])


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    # test servers listen on 127.0.0.1: a proxy configured in the environment must never see that traffic
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def registries() -> Registries:
    """The shipped registries plus a second lineage dataset and a two-variant method, defaults filled."""
    datasets = read_yaml(REPO / "config/datasets.yaml")
    datasets["bm_small"] = copy.deepcopy(datasets["bm_default"]) | {
        "params": {**datasets["bm_default"]["params"], "depth": 3}
    }
    methods = read_yaml(REPO / "config/methods.yaml")
    methods["nj_multi"] = {
        "track": "lineage",
        "run": "celldag.methods.distance_tree:run",
        "description": "two variants",
        "params": {"features": "raw", "reconstruction": "nj"},
        "variants": {"raw": {}, "pca": {"features": "pca", "n_components": 3}},
    }
    embeddings = read_yaml(REPO / "config/embeddings.yaml")
    return Registries(
        apply_schema(datasets, "datasets", "datasets.yaml"),
        apply_schema(methods, "methods", "methods.yaml"),
        apply_schema(embeddings, "embeddings", "embeddings.yaml"),
        apply_schema(read_yaml(REPO / "config/models.yaml"), "models", "models.yaml"),
        apply_schema(read_yaml(REPO / "config/tracks.yaml"), "tracks", "tracks.yaml"),
    )


@pytest.fixture(scope="session")
def realdata() -> Path:
    if not REALDATA.is_dir():
        pytest.skip(f"{REALDATA} is missing (the shared copies of published files)")
    return REALDATA


@pytest.fixture(scope="session")
def org_db(pytestconfig, tmp_path_factory) -> Path:
    """The real org.Hs.eg.sqlite as the pipeline gets it: the Debian package config/embeddings.yaml pins, through
    celldag's download (and $CELLDAG_MIRROR's mirror when set), kept in pytest's cache between sessions; a run's
    download in resources/ when there is one. Skipped only when it cannot be fetched (no network, no mirror)."""
    from celldag.jobs.download import DownloadError, configured_mirror, fetch_registry_file

    files = [f for entry in read_yaml(REPO / "config/embeddings.yaml").values() for f in entry.get("files", [])]
    spec = next(f for f in files if f["role"] == ORG_ROLE)
    downloaded = REPO / plan.DOWNLOAD.format(source=plan.EMBEDDING_SOURCE, file=spec["name"])
    if downloaded.is_file():
        return downloaded
    # pytest's cache keeps it between sessions; without that plugin (-p no:cacheprovider) the session's temp folder
    cache = getattr(pytestconfig, "cache", None)
    folder = cache.mkdir("celldag-org-hs-eg") if cache else tmp_path_factory.mktemp("celldag-org-hs-eg")
    target = folder / spec["name"]
    if not target.is_file():
        try:
            fetch_registry_file(spec, target, pin_file=folder / "checksums.json", mirror=configured_mirror(None))
        except DownloadError as err:
            pytest.skip(
                f"org.Hs.eg.db cannot be fetched here ({err}); set $CELLDAG_MIRROR to a mirror holding "
                f"{spec['url']}, or run the pipeline once (it downloads the file to {downloaded})"
            )
    return target


def copy_workflow(workdir: Path) -> Path:
    """Copy what a user's checkout holds of the workflow into workdir: its src/celldag too, which the workflow's
    guard hashes to know the installed celldag is its own (celldag.release); the jobs import the installed one."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "workflow", "config", "envs", "profiles", "src/celldag"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, workdir / name)
    return workdir


def tiny_lineage_workflow(workdir: Path, config: dict) -> Path:
    """A copied workflow whose registry adds ``bm_small`` (bm_default with depth 4: 16 leaves), run by ``config``."""
    import yaml

    copy_workflow(workdir)
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["bm_small"] = datasets["bm_default"] | {"params": {**datasets["bm_default"]["params"], "depth": 4}}
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    return workdir


# The tiny lineage run the audit's and compare's end-to-end tests read (each copies it before damaging it): bm_small,
# two seeds, NJ on raw features and on PCA, and UPGMA (Δ rows against nj_raw), run to the report.
TINY_LINEAGE = {"name": "tiny", "datasets": ["bm_small"], "methods": ["nj_raw", "nj_pca", "upgma_raw"], "seeds": [0, 1]}


@pytest.fixture(scope="session")
def tiny_lineage_run(tmp_path_factory) -> Path:
    """The finished folder of TINY_LINEAGE's whole run (scores, records, leaderboard, figures, report); read it, or
    copy it first to change it."""
    workdir = tiny_lineage_workflow(tmp_path_factory.mktemp("tiny_lineage"), TINY_LINEAGE)
    run_snakemake(workdir)
    return workdir


def run_snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def dry_run_jobs(workdir: Path, *args: str) -> dict[str, int]:
    """Jobs per rule that `snakemake -n` lists (its job-stats table)."""
    listed = {}
    for line in run_snakemake(workdir, "-n", "--quiet", "rules", *args).stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            listed[parts[0]] = int(parts[1])
    return listed


def planned_run(workdir: Path, dataset: str, method: str, variant: str, seed: int) -> Run:
    """A run as the workflow copy in workdir plans it: its registries and config/config.yaml give the keys."""
    _, registries = load_config(read_yaml(workdir / "config/config.yaml"), "config.yaml", root=workdir)
    return make_run(dataset, method, variant, seed, registries)


# ---------------------------------------------------------------- a throwaway HTTP server on 127.0.0.1


class LocalServer:
    """Routes (path → response writer); per path: request count, Range header of each, body bytes sent."""

    def __init__(self) -> None:
        self.port = 0
        self.routes: dict[str, Callable[[Handler], None]] = {}
        self.requests: Counter[str] = Counter()
        self.ranges: defaultdict[str, list[str | None]] = defaultdict(list)
        self.sent: defaultdict[str, list[int]] = defaultdict(list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class Handler(BaseHTTPRequestHandler):
    state: LocalServer  # bound by the fixture

    def do_GET(self) -> None:
        self.state.requests[self.path] += 1
        self.state.ranges[self.path].append(self.headers.get("Range"))
        route = self.state.routes.get(self.path)
        if route is None:
            self.send_error(404)
        else:
            route(self)

    def send_body(self, data: bytes) -> None:
        self.state.sent[self.path].append(len(data))
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass


def ok(body: bytes) -> Callable[[Handler], None]:
    def write(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.send_body(body)

    return write


def truncated(body: bytes) -> Callable[[Handler], None]:
    """Promise twice the body, send the body, close the connection."""

    def write(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(2 * len(body)))
        handler.end_headers()
        handler.send_body(body)
        handler.close_connection = True

    return write


@pytest.fixture
def server():
    state = LocalServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("BoundHandler", (Handler,), {"state": state}))
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def pytest_collection_modifyitems(items) -> None:
    """Every test under tests/e2e/ is end to end (`make test`'s fast tier leaves them out), whether or not it carries
    the marker itself; a unit module's test that runs Snakemake carries it by hand."""
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)
