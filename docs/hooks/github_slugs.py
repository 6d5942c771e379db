"""MkDocs hook (mkdocs.yml ``hooks:``): every heading's anchor is the one GitHub gives it.

The pages link each other's sections by GitHub's anchors (``check.md#when-it-says-changed``), so that a link works on
GitHub and in the site alike. GitHub lowercases a heading's text, drops every character but letters, digits, ``-``,
``_`` and spaces, and makes each space a ``-`` (``A — B`` → ``a--b``); it keeps inline code's text, so ``(`<p>`)``
gives ``p``. MkDocs' own slugify collapses runs of ``-`` and pymdownx's drops ``<p>`` as a tag, so neither matches:
this one does, set as the ``toc`` extension's slugify (a repeated heading still gets ``_1`` here where GitHub gives
``-1``: tests/unit/structure/test_doc_site.py refuses links to one).
"""

from __future__ import annotations

import re

NOT_KEPT = re.compile(r"[^\w\- ]")


def github_slug(text: str, separator: str) -> str:
    """GitHub's anchor of a heading whose text (tags stripped, entities unescaped: what ``toc`` gives) is ``text``."""
    return NOT_KEPT.sub("", text.strip().lower()).replace(" ", separator)


def on_config(config):
    config["mdx_configs"].setdefault("toc", {})["slugify"] = github_slug
    return config
