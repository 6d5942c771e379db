"""Every command of README.md and docs/ works in a plain clone (issue 42).

The fenced ``bash``, ``sh`` and ``console`` blocks are read (in a ``console`` block, the lines after ``$ ``):
``celldag`` and ``snakemake`` are spelled ``.venv/bin/…`` (the environment ``make run`` creates); ``celldag …``
parses with celldag's own parser, and ``celldag prefetch … --list`` runs; ``make X`` names targets of the
Makefile; every path a command names and every ``--profile`` resolves in a fresh clone — a tracked file or
folder, what the pipeline writes (results/, resources/, .snakemake/, .venv/), or what an earlier command of the
page creates (``--dest``, ``--out``, ``mkdir``, ``cp``) or a file listing of it has the reader write (a fenced
block whose first line is ``# <path>``); ``snakemake …`` dry-runs (``-n``) in a copy of the
workflow (slow tier) where the files it names are in a fresh clone and it is no ``--report`` of a finished run.
A block that cannot hold carries, on the line before its fence, an exemption with a reason:

    <!-- docs-commands: exempt: <reason> -->          no check at all
    <!-- docs-commands: exempt paths: <reason> -->    its paths are not the clone's (and snakemake is not run)

test_the_exemptions_give_a_reason prints every exemption.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conda_standin import install
from conftest import copy_workflow

from celldag.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = ("bash", "sh", "console")
FENCE = re.compile(r"^\s*```(\S*)\s*$")
# a listing of a file the page has the reader write opens with its path: `# lab/run.yaml` or `# lab/run.yaml: …`
WRITTEN_FILE = re.compile(r"^\s*```\S*\n# ([\w.~-]+/[\w./-]+|[\w.-]+\.ya?ml)(?::|\s|$)", flags=re.M)
EXEMPTION = re.compile(r"<!--\s*docs-commands:\s*exempt( paths)?:\s*(.*?)\s*-->")
VENV_TOOLS = ("celldag", "snakemake", "snakedeploy")  # installed into .venv by `make run`
OUTPUT_ROOTS = ("results", "resources", ".snakemake", ".venv")  # folders the pipeline or make writes
# options whose value a command creates, and commands whose last argument they create
CREATING_OPTIONS = ("--dest", "--out")
CREATING_COMMANDS = ("mkdir", "cp", "git")
PATH_SUFFIXES = (".yaml", ".yml", ".md", ".py", ".h5ad", ".parquet", ".txt", ".html", ".json")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence
    commands: tuple[tuple[str, ...], ...]  # each command's words, environment assignments first
    exemption: str | None  # None, "all" or "paths"
    reason: str


def shell_blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    blocks, start, language = [], None, None
    for number, line in enumerate(lines):
        fence = FENCE.match(line)
        if not fence:
            continue
        if start is None:
            start, language = number, fence.group(1)
            continue
        if language in SHELLS:
            exemption = EXEMPTION.search(lines[start - 1]) if start else None
            blocks.append(
                Block(
                    str(page.relative_to(ROOT)),
                    start + 1,
                    tuple(block_commands(lines[start + 1 : number], language)),
                    ("paths" if exemption.group(1) else "all") if exemption else None,
                    exemption.group(2) if exemption else "",
                )
            )
        start = None
    return blocks


def block_commands(lines: list[str], language: str) -> list[tuple[str, ...]]:
    """Each command's words: continuation lines joined, comments dropped, `a && b` as two commands."""
    if language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    text = "\n".join(lines).replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words: list[str] = []
        for word in [*shlex.split(line, comments=True), "&&"]:
            if word != "&&":
                words.append(word)
            elif words:
                commands.append(tuple(words))
                words = []
    return commands


BLOCKS = [block for page in PAGES for block in shell_blocks(page)]
CHECKED = [block for block in BLOCKS if block.exemption != "all"]


def program(words: tuple[str, ...]) -> tuple[str, list[str]]:
    """The program a command runs (as written) and its arguments, environment assignments skipped."""
    position = 0
    while re.match(r"^[A-Z_][A-Z0-9_]*=", words[position]):
        position += 1
    return words[position], list(words[position + 1 :])


def environment(words: tuple[str, ...]) -> dict[str, str]:
    return dict(word.split("=", 1) for word in words if re.match(r"^[A-Z_][A-Z0-9_]*=", word))


def block_id(block: Block) -> str:
    return f"{block.page}:{block.line}"


def test_the_docs_have_shell_blocks_to_check():
    assert len(CHECKED) > 20 and {block.page for block in CHECKED} >= {
        "README.md",
        "docs/mirror.md",
        "docs/real-data.md",
    }


def test_the_readme_has_its_three_commands_first():
    assert BLOCKS[0].page == "README.md" and BLOCKS[0].commands[:3] == (
        ("make", "run"),
        ("make", "test"),
        ("make", "check"),
    )
    assert not re.search(r"revision [0-9a-f]{7}|\d+\.\d s and \d+\.\d s", (ROOT / "README.md").read_text())


def test_the_exemptions_give_a_reason(capsys):
    exempt = [block for block in BLOCKS if block.exemption]
    with capsys.disabled():
        print(f"\ndocs-commands: {len(exempt)} of {len(BLOCKS)} shell blocks exempt")
        for block in exempt:
            print(f"  {block_id(block)} ({block.exemption}): {block.reason}")
    assert all(len(block.reason.split()) >= 3 for block in exempt), [block_id(b) for b in exempt if not b.reason]


@pytest.mark.parametrize("block", CHECKED, ids=block_id)
def test_celldag_and_snakemake_run_from_the_venv(block):
    bare = [" ".join(words) for words in block.commands if program(words)[0] in VENV_TOOLS]
    assert not bare, f"{block_id(block)}: write .venv/bin/<tool> (the environment `make run` creates): {bare}"


@pytest.mark.parametrize("block", CHECKED, ids=block_id)
def test_celldag_commands_parse_and_cheap_ones_run(block):
    for words in block.commands:
        tool, arguments = program(words)
        if tool != ".venv/bin/celldag":
            continue
        try:
            parsed = build_parser().parse_args(arguments)
        except SystemExit:
            pytest.fail(f"{block_id(block)}: celldag's parser rejects {' '.join(words)}")
        if parsed.command == "prefetch" and parsed.list_only:  # it only plans: ≈ 1 s
            result = subprocess.run(
                [str(Path(sys.executable).parent / "celldag"), *arguments],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert result.returncode == 0 and result.stdout, (" ".join(words), result.stderr[-2000:])


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


@pytest.mark.parametrize("block", CHECKED, ids=block_id)
def test_make_names_existing_targets(block):
    for words in block.commands:
        tool, arguments = program(words)
        if tool == "make":
            targets = [word for word in arguments if "=" not in word and not word.startswith("-")]
            assert targets and set(targets) <= make_targets(), f"{block_id(block)}: {' '.join(words)}"


def tracked_paths() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return set(files) | {str(parent) for file in files for parent in Path(file).parents}


TRACKED = tracked_paths()


def named_paths(words: tuple[str, ...]) -> list[str]:
    """The arguments of a command that name a local path (not an option, a URL, a remote or a variable)."""
    tool, arguments = program(words)
    paths = [word.split("=", 1)[1] for word in words if re.match(r"^[A-Z_][A-Z0-9_]*=.*/", word)]
    option = ""  # the last option before the word: `celldag audit --run` takes run ids, dataset/method/variant/seed
    for previous, word in zip(["", *arguments], arguments):
        option = word if word.startswith("-") else option
        if option == "--run" or word in created_paths(words):
            continue
        if previous == "--profile" or (
            not word.startswith("-")
            and re.fullmatch(r"[\w.~/*+-]+", word)
            and ("/" in word or word.endswith(PATH_SUFFIXES))
        ):
            paths.append(word)
    return paths


def created_paths(words: tuple[str, ...]) -> list[str]:
    tool, arguments = program(words)
    created = [value for option, value in zip(arguments, arguments[1:]) if option in CREATING_OPTIONS]
    if Path(tool).name in CREATING_COMMANDS and arguments:
        created.append(arguments[-1])
    return created


def resolves(path: str, tracked: set[str], created: set[str]) -> bool:
    path = path.removeprefix("./").rstrip("/")
    if "*" in path:
        return any(Path(file).match(path) for file in tracked)
    return (
        path in tracked
        or path in created
        or path.split("/")[0] in OUTPUT_ROOTS
        or any(path.startswith(folder + "/") for folder in created)
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_path_and_profile_resolves_in_a_fresh_clone(page):
    tracked, unresolved = TRACKED, []
    created = set(WRITTEN_FILE.findall(page.read_text()))
    for block in shell_blocks(page):
        for words in block.commands:
            if block.exemption is None:
                unresolved += [
                    f"{block_id(block)}: {path}" for path in named_paths(words) if not resolves(path, tracked, created)
                ]
            created.update(path.rstrip("/") for path in created_paths(words))
    assert not unresolved, "not in a fresh clone, not written by the pipeline, not created earlier on the page"


def dry_runs() -> dict[tuple[str, ...], str]:
    """Each distinct snakemake command of the checked blocks (--cores dropped, -n added) → the first block naming it."""
    runs: dict[tuple[str, ...], str] = {}
    for block in BLOCKS:
        for words in block.commands if block.exemption is None else ():
            tool, arguments = program(words)
            if tool != ".venv/bin/snakemake" or "--report" in arguments:
                continue  # a report reads a finished run: nothing to dry-run
            if not all(resolves(path, TRACKED, set()) for path in named_paths(words)):
                continue  # a dry run needs its files in a fresh clone
            kept = [word for previous, word in zip(["", *arguments], arguments) if "--cores" not in (previous, word)]
            environ = tuple(sorted(f"{key}={value}" for key, value in environment(words).items()))
            runs.setdefault((*environ, *kept, *([] if "-n" in kept else ["-n"])), block_id(block))
    return runs


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout to dry-run in (its .snakemake/ stays out of the repository)."""
    return copy_workflow(tmp_path_factory.mktemp("docs") / "celldag")


@pytest.fixture(scope="module")
def conda_path(tmp_path_factory) -> str:
    """PATH with the tests' stand-in conda first (tests/support/conda_standin.py: Snakemake's env handling, not a
    solver)."""
    base = tmp_path_factory.mktemp("conda-standin")
    install(base, sys.executable)
    return f"{base / 'bin'}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.slow  # a Snakemake dry run in a subprocess: 4-17 s apiece
@pytest.mark.parametrize("command", list(dry_runs()), ids=lambda command: " ".join(command))
def test_every_snakemake_command_dry_runs(command, checkout, conda_path):
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("CONDA", "CELLDAG"))}
    environ |= environment(command)
    arguments = [word for word in command if not re.match(r"^[A-Z_][A-Z0-9_]*=", word)]
    if "conda" in arguments:
        environ |= {"PATH": conda_path, "PIP_NO_INDEX": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *arguments, "--quiet", "rules"],
        cwd=checkout,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (dry_runs()[command], result.stdout[-2000:], result.stderr[-2000:])
