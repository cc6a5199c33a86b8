"""Markdown to paste into a pull request: `ablate rank --format md`, the terminal's table and lines in the same words
(ablate.render.rank builds both), as a GitHub pipe table with the header lines above it and the notes under it.

Labels and notes are read from files: they are shown as written, never obeyed (docs/security.md), so `|`, `<`, `>`
and `&` are escaped and nothing they hold can end a cell or open an HTML tag, and Markdown's own punctuation is
backslash-escaped, so nothing they hold becomes a link, an image, emphasis or code. What GitHub links on its own is
cut with a zero-width space, which reads the same: `@name` (a mention that notifies), `#123` and `GH-123` (a link to
an issue, and a back-reference in it) and a bare URL or `www.` address (a live link)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from ablate.render.fit import sensitivity_table
from ablate.render.rank import explain_lines, rank_lead, rank_table, rank_tail

if TYPE_CHECKING:  # the fit stack imports scipy
    from ablate.fit.arms import Ranking
    from ablate.fit.settings import Elsewhere

ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
MARKDOWN = set("\\`*[]~")
"""Characters Markdown (GitHub's) reads as syntax wherever they stand: links and images (which need `[`), emphasis by
`*`, code, strikethrough (an underscore inside a word, as in C_mid, is left as it is)."""


ZWSP = "\u200b"
AUTOLINKS = re.compile(
    r"(?<!\w)@|@(?=[\w.+-]+\.\w)|#(?=\d)|(?i:\bgh-)(?=\d)|(?i:\b[a-z][a-z0-9+.-]*)(?=://)|(?i:\bwww)(?=\.)"
)
"""What GitHub turns into a mention, an e-mail link, an issue reference or a link, each followed (in md_text) by a
zero-width space: an `@` that starts a word, or comes before a domain; `#` or `GH-` before a digit; a URL's scheme
before `://`; `www` before a dot. (`R@512k` and `label@1a2b3c4d` are none of these: left as they are.)"""


def plain(markup: object) -> str:
    """The words of a line or cell as the terminal shows them: markup (a str) read, styles (a Text) dropped, and its
    lines joined by spaces (a Markdown table cell is one line)."""
    text = markup.plain if isinstance(markup, Text) else Text.from_markup(str(markup)).plain
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def md_text(s: str) -> str:
    """Text for Markdown: HTML's special characters as entities and Markdown's backslash-escaped, so that a label is
    shown, not rendered; mentions, issue references and bare URLs cut (AUTOLINKS) so that none goes live."""
    s = AUTOLINKS.sub(lambda m: m.group(0) + ZWSP, s)
    return "".join(ENTITIES.get(ch, "\\" + ch if ch in MARKDOWN else ch) for ch in s)


def md_cell(cell: object) -> str:
    """A table cell: one line, escaped (md_text), its pipes as `\\|` so that they stay inside the cell."""
    return md_text(plain(cell)).replace("|", "\\|")


def markdown_table(table: Table) -> list[str]:
    """A rich table as a GitHub pipe table: its title as a line above, its headers, right-justified columns
    aligned right, one row per row."""
    columns = table.columns
    lines = [md_text(plain(table.title)), ""] if table.title else []
    lines.append("| " + " | ".join(md_cell(c.header) for c in columns) + " |")
    lines.append("|" + "|".join(" ---: " if c.justify == "right" else " --- " for c in columns) + "|")
    for row in zip(*(list(c.cells) for c in columns)):
        lines.append("| " + " | ".join(md_cell(v) for v in row) + " |")
    return lines


def rank_markdown(
    ranking: Ranking,
    inputs: Sequence[Path],
    elsewhere: Elsewhere | None,
    *,
    window: bool = False,
    explain: bool = False,
) -> str:
    """`ablate rank --format md`: what print_rank prints, in its order (the lines above the table, the table, the
    window-sensitivity table with --window, the notes, --explain's reasoning), one paragraph each."""
    paragraphs = [md_text(plain(line)) for line in rank_lead(ranking)]
    paragraphs.append("\n".join(markdown_table(rank_table(ranking, fold=False))))
    sensitivity = sensitivity_table([a.fit for a in ranking.arms]) if window else None
    if sensitivity is not None:
        paragraphs.append("\n".join(markdown_table(sensitivity)))
    paragraphs += [md_text(plain(line)) for line in rank_tail(ranking, inputs, elsewhere)]
    if explain:
        paragraphs += [md_text(plain(line)) for line in explain_lines(ranking)]
    return "\n\n".join(paragraphs)
