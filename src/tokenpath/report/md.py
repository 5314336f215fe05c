"""Markdown escaping: every value a results file gave (a proxy's name, a verdict, a warning) goes into table.md
through `cell`, so a `|` does not split a table's row, a newline does not end it, and raw HTML stays text."""

from __future__ import annotations


def cell(value: object) -> str:
    """A value as one Markdown table cell (or one line of text): `&` and `<` as entities (no tag or entity can then
    begin, so raw HTML stays text; a lone `>` cannot start one, and `->` stays readable), `|` escaped, line breaks
    as spaces."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def row(cells: list[str]) -> str:
    """A Markdown table row, each cell escaped."""
    return "| " + " | ".join(cell(c) for c in cells) + " |"
