"""Markdown escaping: every value a results file gave (a proxy's name, a verdict, a warning, a config line) goes into
table.md through this module, so it renders as its own text: a `|` does not split a table's row, a newline does not
end it, raw HTML stays text, and no name opens a quote, heading, list, code span, link or emphasis.

The rule: `&`, `<` and `>` as entities (no tag, entity or autolink can begin; renderers that pass HTML show text);
`\\`, a backtick, `*`, `~`, `|` and the `]` of a `](` behind a backslash (no escape, code span, emphasis,
strikethrough, cell break or inline link); `_` too, except inside a word (`proxy_buffering_off` cannot be emphasis,
so it stays as typed); line breaks as spaces. Our own arrow `->` is kept as typed: with every `<` escaped its `>`
closes no tag, and with a `-` before it, it opens no quote. Text that begins a line (`line`, `heading`) also has a
leading block marker escaped (`#`, `-`, `+`, `=`, `[`, `1.`): inside a table cell those mean nothing, so a cell's `-`
(no figure) and `-0.3` stay as they are."""

from __future__ import annotations

import re

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# One pass, so an escape is never escaped again: entities, backslash-escaped punctuation, runs of underscores.
_MARKUP = re.compile(r"[&<]|(?<!-)>|[\\`*~|]|\](?=\()|_+")
_WORD = re.compile(r"[^\W_]")  # a letter or digit: an underscore between two is inside a word
# What opens a block at the start of a line (or of a list item's text): ATX heading, list or setext marker, a link
# definition or task box, ordered list (`1.` / `1)`). `>`, `*`, `_`, `~` and backticks are escaped wherever they are.
_BLOCK_START = re.compile(r"[#+=\[-]|\d{1,9}(?=[.)](?:\s|$))")
_HEADING_END = re.compile(r"(\s)(#+)$")  # an ATX heading's closing sequence would be dropped from the text


def _escape(match: re.Match[str]) -> str:
    found = match.group()
    if found in _ENTITIES:
        return _ENTITIES[found]
    if found[0] == "_":
        text, start, end = match.string, match.start(), match.end()
        inside = start > 0 and end < len(text) and _WORD.match(text[start - 1]) and _WORD.match(text[end])
        return found if inside else "\\_" * len(found)
    return "\\" + found


def cell(value: object) -> str:
    """A value as one Markdown table cell (or inline text after our own words): one line, markup as text."""
    text = str(value)
    if "\n" in text or "\r" in text:
        text = " ".join(text.splitlines())
    return _MARKUP.sub(_escape, text)


def line(value: object) -> str:
    """A value that begins a line or a list item's text: a cell, with its leading block marker (if any) escaped."""
    text = cell(value).lstrip()  # four leading spaces would make a code block
    start = _BLOCK_START.match(text)
    if start is None:
        return text
    return text[: start.end()] + "\\" + text[start.end() :] if start.group()[0].isdigit() else "\\" + text


def heading(value: object) -> str:
    """A level-one heading's line: its text escaped as a line, a trailing `#` run kept as text."""
    return "# " + _HEADING_END.sub(lambda m: m.group(1) + "\\#" * len(m.group(2)), line(value))


def code(value: object) -> str:
    """A value as an inline code span (a config line): fenced by more backticks than any run inside it, so no
    backtick in the value ends the span; one line."""
    text = " ".join(str(value).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def row(cells: list[str]) -> str:
    """A Markdown table row, each cell escaped."""
    return "| " + " | ".join(cell(c) for c in cells) + " |"
