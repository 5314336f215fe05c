"""Table columns for the format and the encoding appear where results vary them, and the variants' config
lines are listed with the table."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING
from tokenpath.report import tables
from tokenpath.report.page import page as render_page
from tokenpath.results.model import MatrixResults, ProxyInfo, from_json
from tokenpath.wire.apis import Api

DATA = Path(__file__).parent / "data"


def _results() -> MatrixResults:
    results = from_json(json.loads((DATA / "matrix" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    return results


def test_no_new_columns_when_nothing_varies() -> None:
    results = _results()
    assert tables.varying_columns(results.rows) == []
    assert tables.headers_for(results.rows) == list(tables.HEADERS)
    assert "encoding" not in tables.markdown(results)


def test_api_and_encoding_columns_when_they_vary() -> None:
    results = _results()
    first, second = results.rows[0], results.rows[1]
    asked = replace(first.condition, api=Api.ANTHROPIC, accept_encoding=BROWSER_ACCEPT_ENCODING)
    rows = (
        replace(first, condition=asked, content_encoding="gzip"),
        replace(second, condition=replace(second.condition, api=Api.OPENAI)),
    )
    varied = replace(results, rows=rows)
    headers = tables.headers_for(varied.rows)
    assert headers[:4] == ["path", "condition", "api", "encoding (asked -> answered)"]
    text = tables.markdown(varied)
    assert "| anthropic | browser -> gzip |" in text
    assert "| openai | identity -> identity |" in text
    csv = tables.csv_text(varied).splitlines()
    assert "api,accept_encoding,content_encoding" in csv[0]
    assert tables.rich_table(varied).columns[2].header == "api"
    page = render_page(varied)
    assert "browser -&gt; gzip" in page


def test_the_variants_config_lines_are_listed() -> None:
    results = _results()
    proxies = {
        "nginx": ProxyInfo("1.22.1", {"gzip": {"config": "...", "line": "gzip on; gzip_types text/event-stream;"}})
    }
    text = tables.markdown(replace(results, proxies=proxies))
    assert "- nginx (gzip): `gzip on; gzip_types text/event-stream;`" in text
    assert "gzip: gzip on; gzip_types text/event-stream;" in render_page(replace(results, proxies=proxies))
