"""table.md through a CommonMark renderer with GFM tables (markdown-it-py, rich's own Markdown parser): a name that
a user's experiment file or a results.json controls renders as its own text, never as Markdown or HTML structure."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tokenpath.report import md, tables
from tokenpath.results.model import MatrixResults, from_json

DATA = Path(__file__).parent / "data"

HOSTILE = [
    "> quoted",
    "x\n> quoted on its own line",
    "a|b",
    "a\\|b",
    "ends in a backslash\\",
    "`code`",
    "``two`` and ` one",
    "<script>alert(1)</script>",
    "<!-- hidden -->",
    "<http://evil.example>",
    "&amp; &#x3c; &lt;",
    "# heading",
    "###### heading",
    "- item",
    "+ item",
    "1. item",
    "12) item",
    "***",
    "---",
    "___",
    "=====",
    "    indented code",
    "[x](http://evil.example)",
    "![tracker](http://evil.example/t.png)",
    "[ref]: http://evil.example",
    "[ ] a task box",
    "*em* and **strong**",
    "_em_ and __strong__",
    "~struck~ and ~~struck~~",
    "a\r\nb\rc",
    "title #",
]
TEXT = ["proxy_buffering_off", "a->b", "-0.3", "1.5 ms", "60 B @ 50 ms"]  # as typed, and as text


def render(text: str) -> str:
    rendered: str = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)
    return rendered


def one_line(value: str) -> str:
    return " ".join(value.splitlines()).strip()


def text_of(rendered: str, tag: str) -> str:
    """The text inside the one `tag` element of `rendered`, which must hold nothing else and no other element."""
    match = re.fullmatch(rf"<{tag}>(.*)</{tag}>\n", rendered, re.DOTALL)
    assert match, rendered
    assert "<" not in match.group(1), rendered  # no element inside: every `<` of the text is an entity
    return html.unescape(match.group(1))


@pytest.mark.parametrize("name", HOSTILE + TEXT)
def test_a_name_at_the_start_of_a_line_renders_as_its_text(name: str) -> None:
    assert text_of(render(md.line(name)), "p") == one_line(name)


@pytest.mark.parametrize("name", HOSTILE + TEXT)
def test_a_name_in_a_list_item_renders_as_its_text(name: str) -> None:
    rendered = render(f"- {md.line(name)}: reason")
    assert text_of(rendered.removeprefix("<ul>\n").removesuffix("</ul>\n"), "li") == f"{one_line(name)}: reason"


@pytest.mark.parametrize("name", HOSTILE + TEXT)
def test_a_name_in_a_table_cell_is_one_cell_of_its_text(name: str) -> None:
    rendered = render(f"| a | b |\n|---|---|\n{md.row([name, 'next'])}\n")
    body = rendered.split("<tbody>\n")[1]
    cells = re.findall(r"<td>(.*?)</td>", body, re.DOTALL)
    assert len(cells) == 2, rendered
    assert "<" not in cells[0], rendered
    assert html.unescape(cells[0]) == one_line(name)
    assert cells[1] == "next"


@pytest.mark.parametrize("name", HOSTILE + TEXT)
def test_a_name_as_a_heading_renders_as_its_text(name: str) -> None:
    assert text_of(render(md.heading(name)), "h1") == one_line(name)


@pytest.mark.parametrize("line", ["gzip on;", "a `b` c", "``x``", "`", "ends `", " padded ", "a|b <i>x</i>"])
def test_a_config_line_is_one_code_span_of_its_text(line: str) -> None:
    rendered = render(md.code(line))
    match = re.fullmatch(r"<p><code>(.*)</code></p>\n", rendered, re.DOTALL)
    assert match, rendered
    assert html.unescape(match.group(1)) == line


def test_our_own_words_stay_as_typed() -> None:
    """Figures, an arrow and an intra-word underscore need no escape: the raw table.md reads as it renders."""
    for text in TEXT:
        assert md.cell(text) == text
    assert md.row(["-", "gzip -> identity", "[38.0, 60.0]"]) == "| - | gzip -> identity | [38.0, 60.0] |"
    assert md.cell("a > b") == "a &gt; b"


# --- the whole table.md --------------------------------------------------------------------------------------


def hostile_matrix(name: str) -> MatrixResults:
    """The matrix fixture with `name` wherever a file sets free text: the experiment, a proxy, its variant and config
    line, a skipped path and its reason, the link (so every condition label), the upstream's note, the drift's place,
    an origin's attribution and a pairing's reasons."""
    doc: dict[str, Any] = copy.deepcopy(json.loads((DATA / "matrix" / "results.json").read_text()))
    row = doc["rows"][1]
    doc["proxies"][name] = doc["proxies"].pop(row["proxy"])
    doc["proxies"][name]["variants"] = {name: {"line": name}}
    doc["experiment"]["name"] = name
    row.update(proxy=name, variant=name, verdict=name, pairing={"kept": 3, "excluded": 1, "reasons": {name: 1}})
    row["attribution"] = {"streams": True, "credited": [name], "baseline": name, "words": name, "origin": name}
    for r in doc["rows"]:
        r["link"] = name
    doc["skipped"] = [{"path": name, "reason": name}]
    doc["experiment"]["upstream"] = {"origin": name, "model": name, "note": name}
    doc["certification"]["emitter_drift_ms"] = {name: {"writes": 0}}
    results = from_json(doc)
    assert isinstance(results, MatrixResults)
    return results


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_adds_no_structure_to_the_table_md(name: str) -> None:
    clean = render(tables.markdown(hostile_matrix("plain")))
    rendered = render(tables.markdown(hostile_matrix(name)))
    tags = re.compile(r"<(/?[a-z0-9]+)")
    assert sorted(tags.findall(rendered)) == sorted(tags.findall(clean))  # the same elements, however many
    assert html.unescape(re.sub(r"<[^>]+>", "", rendered)).count(one_line(name)) >= 10
    title = rendered.split("\n")[0] + "\n"
    assert text_of(title, "h1") == one_line(tables.title(hostile_matrix(name)))


@pytest.mark.parametrize("name", HOSTILE + TEXT)
def test_a_name_on_the_line_after_a_paragraph_renders_as_its_text(name: str) -> None:
    """A line of `=` or `-` under a paragraph's line would make it a heading."""
    assert text_of(render(f"Our own words.\n{md.line(name)}"), "p") == f"Our own words.\n{one_line(name)}"
