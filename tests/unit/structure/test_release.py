"""Which celldag this is (celldag.release): `celldag --version`, the source digest the workflow's guard compares, the
release files, and where the shipped reference was made from."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from celldag import __version__, release
from celldag.provenance import RunClock
from celldag.results.record_differences import run_facts


def git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_celldag_version_prints_the_version_the_commit_and_the_source_digest():
    shown = subprocess.run(
        [sys.executable, "-m", "celldag.cli", "--version"], capture_output=True, text=True, check=True
    )
    commit = git("rev-parse", "HEAD", cwd=REPO).strip()[:12]
    assert re.fullmatch(
        rf"celldag {re.escape(__version__)} \(commit {commit}( \+ changes)?; source sha256 "
        rf"{release.package_digest()[:16]}; .+/celldag\)\n",
        shown.stdout,
    ), shown.stdout


def test_the_version_is_one_in_pyproject_the_package_the_changelog_and_the_citation():
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == __version__
    assert re.search(
        rf"^## {re.escape(__version__)} \({re.escape(release.RELEASE_DATE)}, commit [0-9a-f]{{12,40}}\)$",
        (REPO / "CHANGELOG.md").read_text(),
        re.M,
    )
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["version"] == __version__ and citation["cff-version"] == "1.2.0"
    assert {"title", "authors", "license", "references"} <= set(citation)


def test_the_workflow_names_the_digest_of_its_own_package_source():
    recorded = release.read_workflow_digest(REPO / release.WORKFLOW_DIGEST_FILE)
    assert recorded == release.source_digest(REPO / "src/celldag"), (
        "src/celldag changed since workflow/celldag-source.sha256 was written: run `make digest` and commit it"
    )


def test_the_source_digest_follows_content_and_paths_but_not_caches(tmp_path):
    package = tmp_path / "celldag"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (package / "sub/a.rst").write_text("caption\n")
    before = release.source_digest(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    (package / "sub/b.pyc").write_bytes(b"\0")
    assert release.source_digest(package) == before
    (package / "sub/a.rst").write_text("caption!\n")
    assert release.source_digest(package) != before
    (package / "sub/a.rst").rename(package / "a.rst")
    (package / "a.rst").write_text("caption\n")
    assert release.source_digest(package) != before  # the same bytes at another path
    assert release.read_workflow_digest(REPO / release.WORKFLOW_DIGEST_FILE)
    (tmp_path / "bad.sha256").write_text("not a digest\n")
    with pytest.raises(ValueError, match=r"bad\.sha256: not a source digest"):
        release.read_workflow_digest(tmp_path / "bad.sha256")


def test_a_wheel_ships_every_file_the_digest_counts():
    """The package's digest from an installed wheel equals the checkout's only if the wheel holds every file."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["celldag"]
    tracked = git("ls-files", "src/celldag", cwd=REPO).split()
    unshipped = [
        path
        for path in tracked
        if not path.endswith(".py")
        and not any(fnmatch.fnmatch(path.removeprefix("src/celldag/"), glob) for glob in globs)
    ]
    assert unshipped == []


def test_a_run_record_names_its_celldag_but_check_does_not_count_it_as_environment():
    record = RunClock().record(seed=0, config={"params": {}}, input_checksums={})
    assert record["celldag_release"] == {
        "version": __version__,
        "commit": release.package_commit(),
        "source_sha256": release.package_digest(),
    }
    assert not any("celldag_release" in name or "commit" in name for name in run_facts(record))


def test_the_tracked_digest_of_a_working_tree_is_that_of_the_commit_that_holds_it(tmp_path):
    git("init", "-q", cwd=tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.py").write_text("a = 1\n")
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference/scores.tsv").write_text("1\n")
    git("add", "-A", cwd=tmp_path)
    made = release.tracked_digest(tmp_path)  # the working tree, as `make reference` sees it
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "reference", cwd=tmp_path)
    assert release.tracked_digest(tmp_path, "HEAD") == made
    (tmp_path / "reference/scores.tsv").write_text("2\n")  # the reference itself is left out
    assert release.tracked_digest(tmp_path) == made
    (tmp_path / "src/a.py").write_text("a = 2\n")  # made from uncommitted changes: another digest
    assert release.tracked_digest(tmp_path) != made
    problem = release.reference_origin_problem(
        tmp_path,
        git("rev-parse", "HEAD", cwd=tmp_path).strip(),
        {"tracked_files_sha256": release.tracked_digest(tmp_path)},
    )
    assert problem is not None and "remake it with `make reference` on a clean checkout" in problem


def test_the_shipped_reference_was_made_from_the_commit_that_holds_it():
    """CI's check of reference/default: the commit that last changed its scores has the tracked files it recorded."""
    holding, made = release.reference_holding(REPO)
    if "tracked_files_sha256" not in made:
        pytest.skip(
            f"reference/default (committed in {holding[:12]}, made on {made['commit']}) predates celldag 0.2.0, "
            "which records the digest of the files it was made from"
        )
    assert release.reference_origin_problem(REPO, holding, made) is None


# ---- releases a user can pin: one repository URL, each release's commit, celldag's own citation ----------------------

REPOSITORY_PATTERNS = (
    r"github\.com/[\w.<>-]+/celldag",
    r"gitlab\.com/[\w.<>/-]+/celldag",
    r"raw\.githubusercontent\.com/[\w.<>-]+/celldag",
    r"<owner>/celldag",
    r"git\+https?://\S*celldag",
)


def repository_url() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def hard_coded_repository_urls(root: Path, files: list[str]) -> list[str]:
    """``path:line`` of every line outside pyproject.toml and CITATION.cff that writes a URL of celldag's repository
    (tests, which stand for a lab's fork, and CHANGELOG.md's history aside)."""
    pattern = re.compile("|".join([*REPOSITORY_PATTERNS, re.escape(repository_url())]))
    found = []
    for name in files:
        if name in ("pyproject.toml", "CITATION.cff", "CHANGELOG.md") or name.startswith(("tests/", "reference/")):
            continue
        try:
            lines = (root / name).read_text().splitlines()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        found += [f"{name}:{number}" for number, line in enumerate(lines, start=1) if pattern.search(line)]
    return found


def test_the_repository_url_is_written_in_one_place(tmp_path):
    tracked = git("ls-files", cwd=REPO).split()
    assert hard_coded_repository_urls(REPO, tracked) == []
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/page.md").write_text("pip install 'celldag @ git+https://github.com/someone/celldag@v1'\n")
    (tmp_path / "docs/other.md").write_text(f"see {repository_url()}\n")
    assert hard_coded_repository_urls(tmp_path, ["docs/page.md", "docs/other.md"]) == [
        "docs/page.md:1",
        "docs/other.md:1",
    ]


def test_citation_cff_and_celldag_cite_agree_with_the_package():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["repository-code"] == repository_url()
    assert citation["title"] == release.TITLE
    assert str(citation["version"]) == __version__
    assert str(citation["date-released"]) == release.RELEASE_DATE


RELEASE_HEADING = re.compile(r"^## (\d+\.\d+\.\d+) \(([^)]*)\)$", flags=re.M)


def test_each_changelog_release_names_the_commit_that_holds_its_version():
    """A tag is a ref a copy of the repository may not carry: a release is findable by its commit."""
    releases = RELEASE_HEADING.findall((REPO / "CHANGELOG.md").read_text())
    assert releases and releases[0][0] == __version__, "the newest release in CHANGELOG.md is the package's version"
    for version, details in releases:
        commits = re.findall(r"commit ([0-9a-f]{12,40})", details)
        assert len(commits) == 1, f"CHANGELOG.md: {version} names no commit ({details})"
        pyproject = git("show", f"{commits[0]}:pyproject.toml", cwd=REPO)
        assert f'version = "{version}"' in pyproject, f"CHANGELOG.md: {version}'s commit {commits[0]} is not {version}"
