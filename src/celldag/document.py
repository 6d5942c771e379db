"""A small document model: headings, paragraphs and tables as blocks, one content that the leaderboard, the check,
compare and published verdicts build once and render as Markdown here and as HTML in ``celldag.report.html`` (its
templates), so that the two renderings cannot disagree. A block's text is plain text with two kinds of inline markup,
which Markdown shows as such and ``celldag.report.html.inline`` renders: `code` (or ``code``) and **strong**."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Heading:
    level: int  # 1 = the document's title, 2 = a dataset, 3 = a metric group or the paired differences
    text: str
    dataset: str = ""  # the dataset a level-2 heading opens
    track: str = ""  # and its track (a dataset may have a section per track: annotation chains on representation)
    anchor: str = ""  # the section's id in the HTML: the dataset's, with the track for its later sections


@dataclass(frozen=True)
class Paragraph:
    lines: tuple[str, ...]
    bullets: bool = False  # one bullet per line


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


Block = Heading | Paragraph | Table


def markdown(blocks: Sequence[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["", f"{'#' * block.level} {block.text}"] if lines else [f"# {block.text}"]
        elif isinstance(block, Paragraph):
            lines += [f"- {line}" for line in block.lines] if block.bullets else ["", *block.lines]
        else:
            lines += [
                "",
                _markdown_row(block.header),
                "|" + "---|" * len(block.header),
                *map(_markdown_row, block.rows),
            ]
    return "\n".join(lines) + "\n"


def _markdown_row(cells: Sequence[str]) -> str:
    # a "|" inside a cell (a lab's id, a formula) would end the cell: GitHub Markdown reads "\|" as the character
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
