"""Titles that fit: the report's figures are laid out by ``FittedTitles``, constrained layout that wraps
every title to the width it has (``celldag.report.figures.new_figure``).

Matplotlib's constrained layout makes room for a title's height but not for its width, so a title longer
than its axes (or than the figure) ran past the figure's edge and was cut off. Imports matplotlib: only
``new_figure`` imports this module, when a figure is drawn.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.text import Text


class FittedTitles(ConstrainedLayoutEngine):
    """Constrained layout, redone after wrapping each title too wide for the place the layout gave it.
    A title's lines (its own and the wrapping's) stay in its text once the figure is drawn."""

    def execute(self, fig) -> None:
        for _ in range(3):  # the titles' new lines change the panels' heights, hardly their widths
            super().execute(fig)
            if not wrap_titles(fig):
                return


def wrap_titles(figure) -> bool:
    """Wrap every title of ``figure`` to its width (``titles``), a pixel inside either side; whether any changed."""
    changed = False
    for text, inches in titles(figure):
        original = text.get_text()
        text.set_text(wrapped(text, inches * figure.dpi - 2))
        changed |= text.get_text() != original
    return changed


def titles(figure) -> Iterator[tuple[Text, float]]:
    """Each title with the inches it may span: an axes title its axes' width, a horizontal text of the
    figure (the suptitle) the figure's width either side of where it is anchored."""
    width = figure.get_figwidth()
    for axes in figure.axes:
        yield axes.title, width * axes.get_position().width
    for text in figure.texts:
        if text.get_rotation() == 0:
            x = text.get_position()[0]  # a fraction of the figure's width
            yield text, width * {"center": 2 * min(x, 1 - x), "left": 1 - x, "right": x}[text.get_horizontalalignment()]


def wrapped(text: Text, pixels: float) -> str:
    """The string of ``text`` with each line wider than ``pixels`` as drawn broken at spaces, or inside a word
    longer than a line. Measures each candidate line by setting ``text`` to it: the caller sets the result."""

    def width(line: str) -> float:
        text.set_text(line)
        return text.get_window_extent().width

    lines = []
    for line in text.get_text().split("\n"):
        pieces, chars = [line], len(line)
        while chars > 1 and max(map(width, pieces)) > pixels:
            chars -= 1
            pieces = textwrap.wrap(line, chars, break_on_hyphens=False) or [""]
        lines += pieces
    return "\n".join(lines)
