"""MkDocs hook (mkdocs.yml ``hooks:``): links from a page to a repository file outside docs/ are not dead links.

The pages are read on GitHub as well as in the site, so they link the repository's own files where they are
(``../config/README.md``, ``../profiles/README.md``, ``../CHANGELOG.md``). MkDocs knows only docs/ and calls such a
link "not found among documentation files", a warning that ``--strict`` turns into an error. This hook drops that one
warning when the target, resolved from the page's own folder, is a file of the repository outside docs/; every other
dead link (a page of docs/ that is missing, a file outside docs/ that is not there) still fails the build. The link is
left as written: with ``use_directory_urls: false`` a page's HTML sits in site/ at the depth its Markdown has in docs/,
and site/ sits beside docs/ in the checkout, so the same relative link opens the file there.
tests/unit/structure/test_doc_site.py checks that each such link names a file of the repository.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

NOT_FOUND = re.compile(r"^Doc file '(?P<page>[^']+)' contains a link '(?P<link>[^']+)', but the target.* is not found")


class OutsideLinks(logging.Filter):
    """Drops MkDocs' not-found warning for a link that resolves to an existing file outside docs/."""

    def __init__(self, docs_dir: str) -> None:
        super().__init__()
        self.docs = Path(docs_dir).resolve()
        self.root = self.docs.parent

    def filter(self, record: logging.LogRecord) -> bool:
        match = NOT_FOUND.match(record.getMessage())
        if not match:
            return True
        path = unquote(urlsplit(match["link"]).path)
        target = (self.docs / posixpath.dirname(match["page"]) / path).resolve()
        outside_docs = not target.is_relative_to(self.docs) and target.is_relative_to(self.root)
        return not (outside_docs and target.is_file())


def on_config(config):
    logger = logging.getLogger("mkdocs.structure.pages")
    for old in [f for f in logger.filters if isinstance(f, OutsideLinks)]:  # `mkdocs serve` reloads the config
        logger.removeFilter(old)
    logger.addFilter(OutsideLinks(config["docs_dir"]))
    return config
