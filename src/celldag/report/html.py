"""results/{name}/index.html: the leaderboards, every figure with its caption, the papers' published
numbers against celldag's (``celldag.published``), the runs that did not finish ok with their reason, and
links to the tables — one static page, no server, no JavaScript.

The leaderboard content is ``celldag.report.leaderboard``'s blocks (the same as leaderboard.md);
``leaderboard.html`` holds only those tables, for ``snakemake --report``.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from celldag import artifacts, plan
from celldag.document import Block, Heading, Paragraph, Table
from celldag.published import Context, PublishedTable, report_blocks
from celldag.report.leaderboard import leaderboard_blocks
from celldag.tracks import Track

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; }
th { background: #f0f3f7; }
tr.control td:first-child, tr.control td:nth-child(2) { color: #777; font-style: italic; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #444; max-width: 900px; }
code { background: #f4f4f4; padding: 0 0.2em; }
nav a { margin-right: 1em; }
"""


@dataclass(frozen=True)
class ShownFigure:
    dataset: str
    name: str
    path: str  # the PNG
    caption: str  # the caption file's text (reStructuredText)
    track: str = ""  # the track whose section of the dataset shows it (empty: the dataset's first section)


def inline(text: str) -> str:
    """Escaped text with `code` / ``code`` spans (Markdown and reStructuredText) as <code>."""
    return re.sub(r"``?([^`]+)``?", r"<code>\1</code>", html.escape(text))


def render(blocks: Sequence[Block], kinds: dict[str, str] | None = None) -> list[str]:
    """HTML of leaderboard blocks; a row whose method/variant is a control gets class="control"."""
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            anchor = f' id="{html.escape(block.anchor)}"' if block.anchor else ""
            parts.append(f"<h{block.level}{anchor}>{inline(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            if block.bullets:
                parts.append("<ul>" + "".join(f"<li>{inline(line)}</li>" for line in block.lines) + "</ul>")
            else:
                parts.append("<p>" + " ".join(inline(line) for line in block.lines) + "</p>")
        else:
            parts.append(table_html(block, kinds or {}))
    return parts


def table_html(table: Table, kinds: dict[str, str]) -> str:
    head = "".join(f"<th>{inline(cell)}</th>" for cell in table.header)
    rows = []
    for row in table.rows:
        is_control = kinds.get(f"{row[0]}/{row[1]}") == "control"  # a run's row: its two id columns name its kind
        opening = '<tr class="control">' if is_control else "<tr>"
        rows.append(opening + "".join(f"<td>{inline(cell)}</td>" for cell in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def page(title: str, body: Sequence[str]) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")  # fmt: skip


def figure_html(figure: ShownFigure, index_dir: str) -> str:
    source = html.escape(os.path.relpath(figure.path, index_dir))
    caption = " ".join(line.strip() for line in figure.caption.splitlines())
    return (f'<figure id="{html.escape(figure.dataset)}-{html.escape(figure.name)}"><img src="{source}" '
            f'alt="{html.escape(figure.dataset)}: {html.escape(figure.name)}"><figcaption><b>{html.escape(figure.name)}.</b> '
            f"{inline(caption)}</figcaption></figure>")  # fmt: skip


def runs_not_ok(runs: pd.DataFrame, index_dir: str) -> list[str]:
    """The runs that did not finish ok: their reason and a link to each run's log."""
    shown = runs[runs["status"] != "ok"].sort_values(["status", "dataset", "method", "variant", "seed"])
    parts = [f'<h2 id="not-ok">Runs not ok ({len(shown)} of {len(runs)})</h2>']
    if shown.empty:
        return parts + ["<p>Every run finished with status <code>ok</code>.</p>"]
    rows = []
    for run in shown.itertuples(index=False):
        files = (("record", run.record), ("log", plan.log_of_record(run.record)))
        links = " ".join(f'<a href="{html.escape(os.path.relpath(path, index_dir))}">{name}</a>'
                         for name, path in files if path is not None)  # fmt: skip
        rows.append(
            (run.status, run.dataset, f"{run.method}/{run.variant}", str(run.seed), run.status_reason or "", links)
        )
    head = "".join(f"<th>{name}</th>" for name in ("status", "dataset", "run", "seed", "reason", "files"))
    body = "".join(
        "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row[:-1]) + f"<td>{row[-1]}</td></tr>" for row in rows
    )
    return parts + [f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]


def index_page(*, scores: pd.DataFrame, runs: pd.DataFrame, tracks: dict[str, Track], figures: Sequence[ShownFigure],
               index_path: str, kinds: dict[str, str], baseline: str | None = None, paired: Sequence[dict] = (),
               notes: Sequence[str] = (), links: Sequence[str] = (), published: Sequence[Block] = ()) -> str:  # fmt: skip
    """The index: each dataset's leaderboard tables followed by its figures, the published numbers
    (``published``: ``celldag.published.report_blocks``), then the runs not ok."""
    index_dir = os.path.dirname(index_path) or "."
    blocks = leaderboard_blocks(scores, tracks, baseline, paired, notes, kinds, runs)
    sections = [block for block in blocks if isinstance(block, Heading) and block.dataset]
    nav = " ".join(f'<a href="#{html.escape(s.anchor)}">{html.escape(s.text if s.anchor != s.dataset else s.dataset)}</a>'
                   for s in sections)  # fmt: skip
    files = " ".join(f'<a href="{html.escape(os.path.relpath(path, index_dir))}">{html.escape(os.path.basename(path))}</a>'
                     for path in links)  # fmt: skip
    if published:
        nav += ' <a href="#published">published vs reproduced</a>'
    body = [f'<nav>{nav} <a href="#not-ok">runs not ok</a></nav>', f"<p>Tables: {files}</p>"]
    first = {s.dataset: s.track for s in reversed(sections)}  # figures without a track: the dataset's first section
    shown_in = {(s.dataset, s.track): [f for f in figures if f.dataset == s.dataset and (f.track or first[s.dataset]) == s.track]
                for s in sections}  # fmt: skip
    current = None
    for block in blocks:
        if isinstance(block, Heading) and block.dataset:
            body += [figure_html(f, index_dir) for f in shown_in.get(current, [])]
            current = (block.dataset, block.track)
        body += render([block], kinds)
    body += [figure_html(f, index_dir) for f in shown_in.get(current, [])]
    body += render(published, kinds)
    body += runs_not_ok(runs, index_dir)
    return page("celldag results", body)


def write_index(*, scores_path: str, runs_path: str, figure_paths: Sequence[str], figure_captions: Sequence[str],
                figure_tracks: Sequence[str], index_path: str, leaderboard_path: str, tracks: dict[str, Track], kinds: dict[str, str],
                baseline: str | None = None, paired: Sequence[dict] = (), notes: Sequence[str] = (),
                links: Sequence[str] = (), published: Sequence[PublishedTable] = (),
                published_context: Context | None = None) -> None:  # fmt: skip
    """Write index.html and leaderboard.html. Figure paths are results/{name}/figures/{dataset}/{figure}.png;
    ``published``: the tables of the config's datasets, held against the scores in ``published_context``."""
    scores, runs = pd.read_parquet(scores_path), pd.read_parquet(runs_path)
    figures = []
    for path, caption, track in zip(figure_paths, figure_captions, figure_tracks, strict=True):
        dataset, name = path.split("/")[-2], os.path.splitext(os.path.basename(path))[0]
        with open(caption) as handle:
            figures.append(ShownFigure(dataset, name, path, handle.read(), track))
    with artifacts.atomic_path(index_path) as tmp:
        tmp.write_text(index_page(scores=scores, runs=runs, tracks=tracks, figures=figures, index_path=index_path,
                                  kinds=kinds, baseline=baseline, paired=paired, notes=notes, links=links,
                                  published=report_blocks(published, scores, published_context) if published else ()))  # fmt: skip
    with artifacts.atomic_path(leaderboard_path) as tmp:
        tmp.write_text(
            page(
                "celldag leaderboard",
                render(leaderboard_blocks(scores, tracks, baseline, paired, notes, kinds, runs), kinds),
            )
        )
