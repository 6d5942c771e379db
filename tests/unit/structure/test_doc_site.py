"""The doc site (`make docs`: mkdocs.yml over docs/, MkDocs Material and mkdocstrings) holds together without MkDocs.

The fast tier checks what a strict build would refuse, with nothing but this venv: every page of docs/ is in
mkdocs.yml's nav and the nav names no missing page; every relative Markdown link of README.md and docs/ resolves to a
file of the repository and every ``#anchor`` it names is a heading of its target, by GitHub's slugs (which
docs/hooks/github_slugs.py makes the site's too; a link to a repeated heading is refused, GitHub and the site number
those apart); every module or object a ``:::`` directive of docs/api/ names exists in src/ (read, not imported, as
mkdocstrings' griffe reads it); docs/api/cli.md's ``--help`` texts are the parser's. The slow tier builds the site
with ``mkdocs build --strict`` where MkDocs is installed (`make docs` installs it: requirements/docs.txt) and skips,
saying so, where it is not.

After a change of the command line, rewrite docs/api/cli.md's help texts with
``PYTHONPATH=src .venv/bin/python tests/unit/structure/test_doc_site.py --write-cli-help``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
SRC = ROOT / "src"
MKDOCS_YML = ROOT / "mkdocs.yml"
CLI_PAGE = DOCS / "api/cli.md"
LINKED_PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), the text possibly over lines; an optional "title" after the target
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", flags=re.S)
HTML_COMMENT = re.compile(r"<!--.*?-->", flags=re.S)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", flags=re.M)
# docs/api/cli.md: each help text is a ```text block after a line <!-- celldag-help: [SUBCOMMAND] -->
HELP_MARK = re.compile(r"<!-- celldag-help:\s*([\w-]*)\s*-->\n```text\n(.*?)```\n", flags=re.S)
HELP_COLUMNS = "100"  # argparse wraps at the terminal's width: fixed, so the page does not depend on who wrote it


class NavLoader(yaml.SafeLoader):
    """mkdocs.yml as data: a ``!!python/name:`` or ``!!python/object/apply:`` tag (an extension's function, as
    Material's documentation spells some) reads as None; the nav and the validation levels are plain YAML."""


NavLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def mkdocs_config() -> dict:
    return yaml.load(MKDOCS_YML.read_text(), Loader=NavLoader)


def nav_pages(entry) -> list[str]:
    """The pages the nav names, in order (a nav entry is a page, {title: page} or {title: [entries]})."""
    if isinstance(entry, str):
        return [entry] if not re.match(r"^[a-z]+://", entry) else []
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in nav_pages(value)]
    if isinstance(entry, list):
        return [page for item in entry for page in nav_pages(item)]
    return []


def repository_files() -> set[str]:
    """Tracked files and the untracked ones git does not ignore (a page written beside this test), with their
    folders: what a clone of the next commit holds."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    files = {file for file in listed if (ROOT / file).exists()}
    return files | {str(parent) for file in files for parent in Path(file).parents if str(parent) != "."}


def outside_fences(text: str) -> list[str]:
    """The lines of ``text`` outside its fenced blocks."""
    kept, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None and match and match.group(1) == fence:
            fence = None
        elif fence is None:
            kept.append(line)
    return kept


def prose(text: str) -> str:
    """The page without its fenced blocks, HTML comments and inline code: where links and headings are."""
    return INLINE_CODE.sub("", HTML_COMMENT.sub("", "\n".join(outside_fences(text))))


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (links as their text, tags and Markdown marks out), lowercase, every
    character but letters, digits, ``_``, ``-`` and spaces removed, spaces as ``-`` (not collapsed)."""
    parts = re.split(r"(`+[^`]*`+)", heading)  # inline code keeps its text: `<p>` is not a tag there
    text = "".join(
        part if part.startswith("`") else re.sub(r"<[^>]+>", "", re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part))
        for part in parts
    )
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path, repeated_only: bool = False) -> set[str]:
    """Every heading's anchor on the page, a repeated one with -1, -2, … as GitHub numbers them, and HTML anchors
    (``repeated_only``: the numbered ones alone, which the site numbers _1, _2, …: no link may name one)."""
    seen: Counter[str] = Counter()
    found, repeated = set(), set()
    kept = outside_fences(HTML_COMMENT.sub("", page.read_text()))  # headings keep their inline code's text
    for line in kept:
        heading = HEADING.match(line)
        if heading:
            slug = github_slug(heading.group(2))
            found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            repeated.update([f"{slug}-{seen[slug]}"] if seen[slug] else [])
            seen[slug] += 1
    return repeated if repeated_only else found | set(HTML_ANCHOR.findall("\n".join(kept)))


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text())) if target]


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target))


def test_every_page_is_in_the_nav_and_the_nav_names_only_pages():
    config = mkdocs_config()
    assert config["docs_dir"] == "docs" and config["strict"] is True
    named = nav_pages(config["nav"])
    pages = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
    repeated = [page for page, count in Counter(named).items() if count > 1]
    assert not repeated, f"named twice in mkdocs.yml's nav: {repeated}"
    assert not pages - set(named), f"pages of docs/ missing from mkdocs.yml's nav: {sorted(pages - set(named))}"
    assert not set(named) - pages, f"mkdocs.yml's nav names pages docs/ lacks: {sorted(set(named) - pages)}"


def test_a_strict_build_warns_of_broken_links_and_anchors():
    """What makes `mkdocs build --strict` fail on a dead link: the validation levels at `warn`, every page in nav."""
    validation = mkdocs_config()["validation"]
    assert validation == {
        "omitted_files": "warn",
        "absolute_links": "warn",
        "unrecognized_links": "warn",
        "anchors": "warn",
    }


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    files, broken = repository_files(), []
    for target in links(page):
        if is_external(target):
            continue
        path, _, anchor = target.partition("#")
        resolved = Path(os.path.normpath(page.parent / path)) if path else page
        try:
            name = str(resolved.relative_to(ROOT))
        except ValueError:
            broken.append(f"{target}: outside the repository")
            continue
        if name not in files:
            broken.append(f"{target}: no file {name} in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading of {name} has the anchor #{anchor}")
        elif anchor and resolved.suffix == ".md" and anchor in anchors(resolved, repeated_only=True):
            broken.append(f"{target}: a repeated heading of {name} (GitHub numbers it -1, the site _1): rename it")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_a_repeated_heading_is_numbered_and_refused_as_a_target(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n## Notes\n\n```\n## Notes\n```\n\n## Notes\n")
    assert anchors(page) == {"top", "notes", "notes-1"} and anchors(page, repeated_only=True) == {"notes-1"}


def test_the_slugs_are_githubs():
    assert github_slug("Annotating your own cells (`celldag annotate`)") == "annotating-your-own-cells-celldag-annotate"
    assert github_slug("Floor cards: where each metric's floor and ceiling lie") == (
        "floor-cards-where-each-metrics-floor-and-ceiling-lie"
    )
    assert github_slug("A — B [link](x.md) `c_d` <em>e</em>") == "a--b-link-c_d-e"
    assert github_slug("Conformal procedures (`<p>`)") == "conformal-procedures-p"


def module_file(dotted: str) -> Path | None:
    base = SRC.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def defines(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The statement of ``body`` that binds ``name`` at its level: a def, a class, an assignment or an import."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                return node
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                return node
    return None


def api_object_exists(dotted: str) -> bool:
    """A ``:::`` identifier: a module of src/, or a module and the names bound in it (a class's members in its
    body), read without importing anything."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        source = module_file(".".join(parts[:split]))
        if source is None:
            continue
        body: list[ast.stmt] = ast.parse(source.read_text()).body
        for name in parts[split:]:
            node = defines(body, name)
            if node is None:
                return False
            body = node.body if isinstance(node, ast.ClassDef) else []
        return True
    return False


def api_directives() -> list[tuple[str, str]]:
    return [
        (str(page.relative_to(ROOT)), dotted)
        for page in sorted((DOCS / "api").glob("*.md"))
        for dotted in DIRECTIVE.findall(page.read_text())
    ]


def test_the_api_pages_name_modules_and_objects_of_src():
    directives = api_directives()
    assert len(directives) >= 10
    missing = [f"{page}: ::: {dotted}" for page, dotted in directives if not api_object_exists(dotted)]
    assert not missing, missing
    sys.path.insert(0, str(SRC))
    try:  # the modules as Python finds them, src on the path (a package's find_spec imports only its parents)
        modules = {dotted for _, dotted in directives if module_file(dotted)}
        assert all(importlib.util.find_spec(dotted) for dotted in modules)
    finally:
        sys.path.remove(str(SRC))


def test_the_object_check_fails_on_a_missing_name():
    assert api_object_exists("celldag.methods.MethodResult")
    assert not api_object_exists("celldag.methods.NoSuchResult")
    assert not api_object_exists("celldag.no_such_module")


def help_text(subcommand: str) -> str:
    """``celldag [SUBCOMMAND] --help`` as the parser prints it, at HELP_COLUMNS columns."""
    from celldag.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
            build_parser().parse_args([*([subcommand] if subcommand else []), "--help"])
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return printed.getvalue()


def test_the_cli_page_shows_the_parsers_help():
    from celldag.cli import build_parser

    shown = dict(HELP_MARK.findall(CLI_PAGE.read_text()))
    subcommands = next(
        action.choices for action in build_parser()._actions if action.dest == "command"
    )  # every subcommand, and celldag --help itself
    assert set(shown) == {"", *subcommands}, "docs/api/cli.md: a help text per subcommand"
    stale = [name or "celldag" for name, text in shown.items() if text != help_text(name)]
    assert not stale, (
        f"docs/api/cli.md: {stale} differ from the parser's --help: "
        "PYTHONPATH=src .venv/bin/python tests/unit/structure/test_doc_site.py --write-cli-help"
    )


@pytest.mark.slow  # the whole site, the API read by griffe: ≈ 10-20 s
def test_the_site_builds_in_strict_mode(tmp_path):
    missing = [name for name in ("mkdocs", "material", "mkdocstrings_handlers.python") if not has_module(name)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed in this venv: `make docs` installs requirements/docs.txt")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about MkDocs 2, not a build warning
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert not re.search(r"^WARNING\b", built.stderr, flags=re.M), built.stderr[-4000:]
    assert (tmp_path / "site/index.html").is_file() and (tmp_path / "site/api/cli.html").is_file()


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def write_cli_help() -> None:
    """Rewrite docs/api/cli.md's help texts from the parser (each marked block in place)."""
    page = CLI_PAGE.read_text()
    rewritten = HELP_MARK.sub(
        lambda match: f"<!-- celldag-help: {match.group(1)} -->\n```text\n{help_text(match.group(1))}```\n", page
    )
    CLI_PAGE.write_text(rewritten)


if __name__ == "__main__" and sys.argv[1:] == ["--write-cli-help"]:
    write_cli_help()
