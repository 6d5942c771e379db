"""Which celldag this is: its version, the git commit it was run from, and one digest of its source.

A version string names a release, not a commit: between two releases every commit says the same version, and a
package installed from one commit with workflow files from another would pass a check of versions alone. The
digest of ``src/celldag`` tells them apart. The package computes it from its own files (an editable install from
the checkout, a wheel from what it installed: the same files, since the wheel ships every file of the package);
the workflow names the digest it was written with in ``workflow/celldag-source.sha256`` (``make digest`` writes it;
a test holds it to the checkout's), one small file read without any network however the workflow is reached.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import yaml

from celldag import __version__

PACKAGE_FOLDER = Path(__file__).parent
# celldag's own citation: CITATION.cff's title and date-released (a test keeps them equal), `celldag cite`'s first entry
TITLE = (
    "celldag: a reproducible benchmark of CellTreeQM, sciLaMA and Kandinsky conformal prediction against their "
    "baselines"
)
RELEASE_DATE = "2026-12-06"  # of __version__
# the digest the workflow files were written with, relative to the repository root
WORKFLOW_DIGEST_FILE = "workflow/celldag-source.sha256"
SKIPPED_PARTS = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def kept(relative: str) -> bool:
    """Files a wheel holds: not caches, compiled files, metadata of an editable install or hidden files."""
    parts = relative.split("/")
    return not (
        any(p in SKIPPED_PARTS or p.startswith(".") or p.endswith(".egg-info") for p in parts)
        or relative.endswith(SKIPPED_SUFFIXES)
    )


def directory_files(root: Path) -> list[str]:
    """Every kept file under ``root``, as sorted '/'-separated paths relative to it."""
    found = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if kept(d))
        for name in names:
            relative = Path(directory, name).relative_to(root).as_posix()
            if kept(relative) and Path(directory, name).is_file():
                found.append(relative)
    return sorted(found)


def content_digest(files: Mapping[str, bytes]) -> str:
    """sha256 of a file set: of each path with the sha256 of its content, in path order."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{hashlib.sha256(files[path]).hexdigest()}\n".encode())
    return digest.hexdigest()


def source_digest(folder: Path = PACKAGE_FOLDER) -> str:
    """``content_digest`` of the package files under ``folder`` (what a wheel of it holds), paths relative to it."""
    return content_digest({name: (folder / name).read_bytes() for name in directory_files(folder)})


@functools.cache
def package_digest() -> str:
    """The digest of the imported package's own files (computed once a process)."""
    return source_digest(PACKAGE_FOLDER)


def read_workflow_digest(path: str | Path) -> str:
    """The digest a workflow file names: its first line, a sha256 in hex; a ValueError naming the file otherwise."""
    text = Path(path).read_text().strip()
    if len(text) != 64 or any(char not in "0123456789abcdef" for char in text):
        raise ValueError(f"{path}: not a source digest (64 hex digits): {text[:80]!r}; `make digest` writes it")
    return text


def commit_of(folder: str | Path) -> str:
    """The git commit of the checkout holding ``folder`` (12 hex digits), "+ changes" where its tracked files differ
    from it; "unknown" outside git (a package installed from a wheel)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip()[:12] + (" + changes" if dirty.strip() else "")


def tracked_digest(repository: str | Path, commit: str | None = None, outside: str = "reference/") -> str:
    """sha256 over the path and git blob id of every tracked file but those under ``outside``: of ``commit``'s tree,
    or (None) of the working tree's current bytes, so that `make reference` can record what it was made from and a
    later check can find that the commit holding the reference has exactly those files."""
    if commit is None:
        listed = git_output(repository, "ls-files", "-z").split("\0")
        paths = [path for path in listed if path and not path.startswith(outside)]
        blobs = subprocess.run(
            ["git", "hash-object", "--stdin-paths"],
            cwd=repository,
            input="\n".join(paths) + "\n",
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        entries = dict(zip(paths, blobs, strict=True))
    else:
        rows = (
            line.split("\t", 1) for line in git_output(repository, "ls-tree", "-r", "-z", commit).split("\0") if line
        )
        entries = {path: meta.split()[2] for meta, path in rows if not path.startswith(outside)}
    lines = "".join(f"{path}\0{blob}\n" for path, blob in sorted(entries.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


# the file whose last change marks the commit that holds a reference: its scores (reference.yaml's environment
# fields may be relabelled by a later release commit, e.g. a new version with the same numbers)
REFERENCE_SCORES = "scores.tsv"


def reference_origin(repository: str | Path) -> dict[str, str]:
    """What `make reference` records of where it was made: the commit it was made on (its parent, once the
    reference is committed) and ``tracked_digest`` of the working tree then; {} outside git."""
    try:
        parent = git_output(repository, "rev-parse", "HEAD").strip()
        return {"parent_commit": parent, "tracked_files_sha256": tracked_digest(repository)}
    except (OSError, subprocess.CalledProcessError):
        return {}


def git_output(repository: str | Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repository, capture_output=True, text=True, check=True).stdout


def reference_holding(repository: str | Path, reference_folder: str = "reference/default") -> tuple[str, dict]:
    """The commit that holds ``reference_folder`` (the last to change its scores) and its reference.yaml there."""
    holding = git_output(repository, "log", "-1", "--format=%H", "--", f"{reference_folder}/{REFERENCE_SCORES}").strip()
    if not holding:
        raise ValueError(f"{reference_folder}/{REFERENCE_SCORES} is not committed in {repository}")
    return holding, yaml.safe_load(git_output(repository, "show", f"{holding}:{reference_folder}/reference.yaml"))


def reference_origin_problem(repository: str | Path, holding: str, made: dict) -> str | None:
    """Why the commit ``holding`` a reference is not what its reference.yaml (``made``) says it was made from (one
    line), or None: its tracked files outside reference/ must have the recorded ``tracked_files_sha256``, so a
    reference made from uncommitted changes, or committed beside other changes, fails."""
    found, recorded = tracked_digest(repository, holding), made["tracked_files_sha256"]
    if found == recorded:
        return None
    return (
        f"the reference committed in {holding[:12]} was made from tracked files with sha256 {recorded[:16]}… "
        f"(on {str(made.get('parent_commit', '?'))[:12]} + changes), but that commit's have {found[:16]}…: remake "
        "it with `make reference` on a clean checkout and commit it alone"
    )


@functools.cache
def package_commit() -> str:
    """The commit of the checkout the imported package lies in (an editable install), else "unknown"."""
    return commit_of(PACKAGE_FOLDER)


def version_text() -> str:
    """What ``celldag --version`` prints: version, commit and source digest."""
    commit = package_commit()
    where = f"commit {commit}" if commit != "unknown" else "not a git checkout"
    return f"celldag {__version__} ({where}; source sha256 {package_digest()[:16]}; {PACKAGE_FOLDER})"


@functools.cache
def repository_url() -> str:
    """The repository's URL, pyproject.toml ``[project.urls] Repository`` as the installed package's metadata holds
    it; "unknown" for a package installed without one."""
    for entry in metadata.metadata("celldag").get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository":
            return url.strip()
    return "unknown"


def release_facts() -> dict[str, str]:
    """What a run record keeps of the celldag that made it. Not an environment field of `celldag check`: two
    commits that compute the same scores must still be judged bit for bit."""
    return {"version": __version__, "commit": package_commit(), "source_sha256": package_digest()}


def write_workflow_digest(repository: Path) -> str:
    """Write ``repository``'s src/celldag digest into its ``WORKFLOW_DIGEST_FILE`` (``make digest``: after any change
    of src/celldag, so the workflow names the package it goes with); returns the digest."""
    digest = source_digest(repository / "src" / "celldag")
    (repository / WORKFLOW_DIGEST_FILE).write_text(digest + "\n")
    return digest


if __name__ == "__main__":  # python -m celldag.release: the checkout's digest into workflow/celldag-source.sha256
    print(f"{WORKFLOW_DIGEST_FILE}: {write_workflow_digest(PACKAGE_FOLDER.parent.parent)}")
