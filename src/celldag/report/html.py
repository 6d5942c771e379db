"""results/{name}/index.html: the leaderboards, every figure with its caption, the papers' published
numbers against celldag's (``celldag.results.published``), the runs that did not finish ok with their reason, and
links to the tables — one static page, no server, no JavaScript.

Every page is a Jinja2 template (``templates/``, autoescape on: a method's or a dataset's id is text, whatever
it holds) that renders ``celldag.document``'s blocks, the content leaderboard.md (check.md, compare.md,
published.md) is made from, so that the two cannot disagree. A block's text goes through one inline-markup
renderer (``inline``); a figure's caption, reStructuredText, through docutils (``caption_html``).
``leaderboard.html`` holds only the leaderboard's blocks, for ``snakemake --report``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import jinja2
import pandas as pd
from markupsafe import Markup, escape

from celldag import artifacts, plan
from celldag.document import Block, Heading, Paragraph, Table
from celldag.report.leaderboard import Detail, leaderboard_blocks
from celldag.results.leaderboard import DEFAULT_ALPHA
from celldag.results.published import Context, PublishedTable, report_blocks
from celldag.tracks import Track


@dataclass(frozen=True)
class ShownFigure:
    dataset: str
    name: str
    path: str  # the PNG
    caption: str  # the caption file's text (reStructuredText)
    track: str = ""  # the track whose section of the dataset shows it (empty: the dataset's first section)


# A document's inline markup, as leaderboard.md shows it: `code` or ``code`` (Markdown and reStructuredText) and
# **strong**; nothing else is markup (a '*' alone is text: '*_relabelled' names the relabelled controls).
INLINE = re.compile(r"``(?P<double>[^`]+)``|`(?P<single>[^`]+)`|\*\*(?P<strong>[^*\s](?:[^*]*[^*\s])?)\*\*")


def inline(text: object) -> Markup:
    """One line of a block's text as HTML: escaped, with its inline markup (``INLINE``) as <code> and <strong>."""
    text = str(text)
    parts, position = [], 0
    for found in INLINE.finditer(text):
        parts.append(escape(text[position : found.start()]))
        if found["strong"] is not None:
            parts.append(Markup("<strong>%s</strong>") % inline(found["strong"]))
        else:
            parts.append(Markup("<code>%s</code>") % (found["double"] or found["single"]))
        position = found.end()
    parts.append(escape(text[position:]))
    return Markup("").join(parts)


# docutils for a caption of a figure: what a caption file can do is inline markup, paragraphs and lists
CAPTION_SETTINGS = {
    "_disable_config": True,  # no docutils.conf of the machine, the user or the working directory
    "file_insertion_enabled": False,  # no include directive, no file or url option of raw / csv-table
    "raw_enabled": False,  # no raw directive or role: a caption's HTML is docutils' own
    "report_level": 5,  # quiet: no system message in the page or on stderr
    "halt_level": 4,  # a severe problem stops the page (``caption_html`` names the figure) …
    "traceback": True,  # … as an exception, not an exit of the process
    "doctitle_xform": False,  # a caption's first line stays its text, never a document title
}
LINK_SCHEMES = ("", "http", "https", "mailto")  # a caption's link elsewhere (javascript: …) shows as its text


@cache
def _caption_translator():
    from docutils import nodes
    from docutils.writers import html5_polyglot

    class CaptionTranslator(html5_polyglot.HTMLTranslator):
        def visit_literal(self, node):  # ``code``: <code>, as the page's other code
            self.body.append(f"<code>{self.encode(node.astext())}</code>")
            raise nodes.SkipNode

        def visit_reference(self, node):
            if urlsplit(node.get("refuri", "")).scheme.lower() not in LINK_SCHEMES:
                self.body.append(self.encode(node.astext()))
                raise nodes.SkipNode
            super().visit_reference(node)

    return CaptionTranslator


@cache
def caption_html(source: str, id_prefix: str = "") -> Markup:
    """A figure's caption (reStructuredText) as HTML through docutils (``CAPTION_SETTINGS``); ``id_prefix``: of
    every id it makes (a target's), so that a caption shown for several datasets repeats none."""
    from docutils.core import publish_parts
    from docutils.utils import SystemMessage
    from docutils.writers import html5_polyglot

    writer = html5_polyglot.Writer()
    writer.translator_class = _caption_translator()
    try:
        parts = publish_parts(source, writer=writer, settings_overrides={**CAPTION_SETTINGS, "id_prefix": id_prefix})
    except SystemMessage as err:
        raise ValueError(f"not valid reStructuredText: {err}") from err
    return Markup(parts["fragment"].strip())


@cache
def environment() -> jinja2.Environment:
    """The templates (package data: ``celldag/report/templates``), HTML-escaping every value they print."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("celldag.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["inline"] = inline
    env.tests |= {
        "heading": lambda item: isinstance(item, Heading),
        "paragraph": lambda item: isinstance(item, Paragraph),
        "table": lambda item: isinstance(item, Table),
        "detail": lambda item: isinstance(item, Detail),  # a full table, folded under the one shown
    }
    return env


def render(blocks: Sequence[Block], kinds: Mapping[str, str] | None = None) -> list[Markup]:
    """Each block's HTML (``templates/blocks.html``); a row whose method/variant is a control gets class="control"."""
    macro = environment().get_template("blocks.html").module.block  # type: ignore[attr-defined]
    return [macro(block, dict(kinds or {})) for block in blocks]


def document_page(title: str, blocks: Sequence[Block], kinds: Mapping[str, str] | None = None) -> str:
    """A page of blocks (``templates/page.html``): check.html, compare.html, leaderboard.html."""
    return environment().get_template("page.html").render(title=title, blocks=blocks, kinds=dict(kinds or {}), parts=())


def page(title: str, body: Sequence[str]) -> str:
    """A page of HTML parts, each already HTML (``render``'s), as ``document_page`` lays out blocks."""
    return (
        environment()
        .get_template("page.html")
        .render(title=title, blocks=(), kinds={}, parts=[Markup(part) for part in body])
    )


@dataclass(frozen=True)
class Link:
    name: str
    href: str


@dataclass(frozen=True)
class FigureView:
    dataset: str
    name: str
    id: str
    src: str
    caption: Markup


def figure_view(figure: ShownFigure, index_dir: str) -> FigureView:
    anchor = f"{figure.dataset}-{figure.name}"
    try:
        caption = caption_html(figure.caption, f"{anchor}-")
    except ValueError as err:
        raise ValueError(f"the caption of figure {figure.name!r} ({figure.dataset}): {err}") from err
    return FigureView(figure.dataset, figure.name, anchor, os.path.relpath(figure.path, index_dir), caption)


@dataclass(frozen=True)
class RunNotOk:
    cells: tuple[str, ...]  # status, dataset, method/variant, seed, reason
    files: tuple[Link, ...]  # its record and its log


def runs_not_ok(runs: pd.DataFrame, index_dir: str) -> list[RunNotOk]:
    """The runs that did not finish ok: their reason and a link to each run's record and log."""
    shown = runs[runs["status"] != "ok"].sort_values(["status", "dataset", "method", "variant", "seed"])
    found = []
    for run in shown.itertuples(index=False):
        files = (("record", run.record), ("log", plan.log_of_record(run.record)))
        found.append(
            RunNotOk(
                (run.status, run.dataset, f"{run.method}/{run.variant}", str(run.seed), run.status_reason or ""),
                tuple(Link(name, os.path.relpath(path, index_dir)) for name, path in files if path is not None),
            )
        )
    return found


@dataclass(frozen=True)
class Part:
    blocks: tuple[Block, ...]
    figures: tuple[FigureView, ...]  # shown after the blocks


def index_page(
    *,
    scores: pd.DataFrame,
    runs: pd.DataFrame,
    tracks: dict[str, Track],
    figures: Sequence[ShownFigure],
    index_path: str,
    kinds: dict[str, str],
    baseline: str | None = None,
    paired: Sequence[dict] = (),
    notes: Sequence[str] = (),
    links: Sequence[str] = (),
    published: Sequence[Block] = (),
    alpha: float = DEFAULT_ALPHA,
    cards: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
) -> str:
    """The index (``templates/index.html``): each dataset's leaderboard tables and floor card followed by its
    figures, the published numbers (``published``: ``celldag.results.published.report_blocks``), then the runs not ok.
    ``alpha``: the annotation scores'; ``cards``: the floor cards (``leaderboard_blocks``)."""
    index_dir = os.path.dirname(index_path) or "."
    blocks = leaderboard_blocks(scores, tracks, baseline, paired, notes, kinds, runs, alpha, cards, findings)
    sections = [block for block in blocks if isinstance(block, Heading) and block.dataset]
    first = {s.dataset: s.track for s in reversed(sections)}  # figures without a track: the dataset's first section
    parts: list[tuple[list[Block], tuple[FigureView, ...]]] = [([], ())]
    for block in blocks:
        if isinstance(block, Heading) and block.dataset:  # a section opens: its figures close it
            shown = [f for f in figures if f.dataset == block.dataset and (f.track or first[f.dataset]) == block.track]
            parts.append(([], tuple(figure_view(f, index_dir) for f in shown)))
        parts[-1][0].append(block)
    return (
        environment()
        .get_template("index.html")
        .render(
            title="celldag results",
            kinds=dict(kinds),
            sections=sections,
            published=published,
            parts=[Part(tuple(part), shown) for part, shown in parts],
            links=[Link(os.path.basename(path), os.path.relpath(path, index_dir)) for path in links],
            not_ok=runs_not_ok(runs, index_dir),
            n_runs=len(runs),
        )
    )


def write_index(
    *,
    scores_path: str,
    runs_path: str,
    figure_paths: Sequence[str],
    figure_captions: Sequence[str],
    figure_tracks: Sequence[str],
    index_path: str,
    leaderboard_path: str,
    tracks: dict[str, Track],
    kinds: dict[str, str],
    baseline: str | None = None,
    paired: Sequence[dict] = (),
    notes: Sequence[str] = (),
    links: Sequence[str] = (),
    published: Sequence[PublishedTable] = (),
    published_context: Context | None = None,
    alpha: float = DEFAULT_ALPHA,
    floor_cards_path: str | None = None,
    qc_path: str | None = None,
) -> None:
    """Write index.html and leaderboard.html. Figure paths are results/{name}/figures/{dataset}/{figure}.png;
    ``published``: the tables of the config's datasets, held against the scores in ``published_context``;
    ``floor_cards_path``: floor_cards.parquet (``celldag.results.floor_cards``); ``qc_path``: qc.parquet
    (``celldag.results.qc``)."""
    scores, runs = pd.read_parquet(scores_path), pd.read_parquet(runs_path)
    cards = pd.read_parquet(floor_cards_path) if floor_cards_path else None
    findings = pd.read_parquet(qc_path) if qc_path else None
    figures = []
    for path, caption, track in zip(figure_paths, figure_captions, figure_tracks, strict=True):
        dataset, name = path.split("/")[-2], os.path.splitext(os.path.basename(path))[0]
        with open(caption) as handle:
            figures.append(ShownFigure(dataset, name, path, handle.read(), track))
    with artifacts.atomic_path(index_path) as tmp:
        tmp.write_text(
            index_page(
                scores=scores,
                runs=runs,
                tracks=tracks,
                figures=figures,
                index_path=index_path,
                kinds=kinds,
                baseline=baseline,
                paired=paired,
                notes=notes,
                links=links,
                alpha=alpha,
                cards=cards,
                findings=findings,
                published=report_blocks(published, scores, published_context) if published else (),
            )
        )
    with artifacts.atomic_path(leaderboard_path) as tmp:
        blocks = leaderboard_blocks(scores, tracks, baseline, paired, notes, kinds, runs, alpha, cards, findings)
        tmp.write_text(document_page("celldag leaderboard", blocks, kinds))
