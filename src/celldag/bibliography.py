"""The registries' ``reference:`` fields (methods, datasets, gene embeddings): one work, or a list of works, each
with its authors, title, venue, year and DOI (or url where the work has none, e.g. a PMLR paper), and formatted
here once — as a line a paper's reference list takes, and as BibTeX — for ``celldag cite`` and any other reader.

A lab's registry may still hold a reference as free text (the form before issue 42): it is kept as it is written.
Authors are written ``Family, Given``; a list that stops short of every author ends with ``others``, as BibTeX's
``and others``.
"""

from __future__ import annotations

import re
import unicodedata

OTHERS = "others"  # the last author of a list that names only the first ones
SHOWN_AUTHORS = 6  # a reference line names this many authors at most, then "et al."
FORMATS = ("markdown", "bibtex")  # what celldag cite prints: a numbered reference list, or BibTeX entries


def references_of(entry: dict) -> list[dict | str]:
    """The works a registry entry cites: none, one or several, in the order written."""
    reference = entry.get("reference")
    if reference is None:
        return []
    return list(reference) if isinstance(reference, list) else [reference]


def reference_id(reference: dict | str) -> tuple:
    """What makes two citations one work: its DOI, else its url, else all of it (a free-text one by its text)."""
    if isinstance(reference, str):
        return ("text", reference)
    if reference.get("doi"):
        return ("doi", reference["doi"].lower())
    if reference.get("url"):
        return ("url", reference["url"])
    return ("work", reference["title"], reference["year"])


def short_author(author: str) -> str:
    """``Kuang, Da`` → ``Kuang D``; ``Malladi, Venkat S.`` → ``Malladi VS``; a name without a comma stays whole
    (a consortium)."""
    family, _, given = author.partition(",")
    initials = "".join(part[0] for part in re.split(r"[\s.\-]+", given) if part)
    return f"{family.strip()} {initials}".strip()


def author_list(authors: list[str]) -> str:
    named = [author for author in authors if author != OTHERS]
    shown = ", ".join(short_author(author) for author in named[:SHOWN_AUTHORS])
    return shown + (", et al." if len(named) > SHOWN_AUTHORS or OTHERS in authors else "")


def link(reference: dict) -> str:
    return f"doi:{reference['doi']}" if reference.get("doi") else reference.get("url", "")


def format_reference(reference: dict | str) -> str:
    """One line of a paper's reference list: ``Kuang D, Qiu G, Kim J. Title. Venue (2025). doi:… (or url) [note]``."""
    if isinstance(reference, str):
        return reference
    authors, title = author_list(reference["authors"]).rstrip("."), reference["title"].rstrip(".")
    parts = [f"{authors}. {title}. {reference['venue']} ({reference['year']}).", link(reference)]
    if reference.get("note"):
        parts.append(f"[{reference['note']}]")
    return " ".join(part for part in parts if part)


def bibtex_key(reference: dict | str, taken: set[str]) -> str:
    """``kuang2025reconstructing``: first author's family name, year, first word of the title; a letter added where
    another work cited alongside has the same key."""
    if isinstance(reference, str):
        base = "reference"
    else:
        family = reference["authors"][0].partition(",")[0]
        first_word = next((word for word in re.findall(r"[A-Za-z]+", reference["title"]) if len(word) > 3), "")
        base = f"{ascii_letters(family)}{reference['year']}{ascii_letters(first_word)}"
    key, suffix = base, ord("a")
    while key in taken:
        key, suffix = f"{base}{chr(suffix)}", suffix + 1
    taken.add(key)
    return key


def ascii_letters(text: str) -> str:
    """``Domínguez Conde`` → ``dominguezconde``: a BibTeX key is ASCII."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z]", "", plain.lower())


def bibtex(reference: dict | str, key: str) -> str:
    """One BibTeX entry: ``@inproceedings`` for a conference paper (``type: inproceedings``), else ``@article``; a
    free-text reference becomes ``@misc`` with its text as the note."""
    if isinstance(reference, str):
        return f"@misc{{{key},\n  note = {{{reference}}}\n}}"
    kind = reference.get("type", "article")
    fields = {
        "author": " and ".join(reference["authors"]),
        "title": f"{{{reference['title']}}}",  # braces keep its capitals (sciLaMA, PCA) as written
        "booktitle" if kind == "inproceedings" else "journal": reference["venue"],
        "year": str(reference["year"]),
        "doi": reference.get("doi"),
        "url": reference.get("url"),
        "note": reference.get("note"),
    }
    lines = [f"  {name} = {{{value}}}" for name, value in fields.items() if value]
    return f"@{kind}{{{key},\n" + ",\n".join(lines) + "\n}"
