"""The timeouts survey's HTML: the table of limits and each cut with its fix, escaped, in a self-contained page."""

from __future__ import annotations

from tokenpath.diagnose.limits import LimitFound, Measure, PathLimits, SurveyConfig
from tokenpath.report.timeouts import timeouts_page
from tokenpath.wire.apis import Api
from tokenpath.wire.httpversion import HttpVersion


def test_the_page_shows_each_paths_limits_and_the_line_that_lifts_them() -> None:
    url = "http://127.0.0.1:8080"
    cfg = SurveyConfig((url,), min_s=1, max_s=120, resolution_s=1)
    found = (
        LimitFound(Measure.FIRST_BYTE, 59.5, 60.5, None, 4),
        LimitFound(Measure.MID_STREAM, 59.5, 60.5, None, 4),
        LimitFound(Measure.TOTAL, 120.0, None, None, 2),
    )
    html = timeouts_page([PathLimits(url, found, True, 15.0)], cfg, {url: "nginx:stock"})
    assert html.startswith("<!doctype html>")
    assert "<script" not in html
    assert "nginx:stock" in html
    assert "59.5 s survived, 60.5 s cut (held)" in html
    assert "none up to 120 s" in html
    assert "yes (every 15 s)" in html
    assert "proxy_read_timeout 3600s;" in html
    assert 'id="timeouts"' in html


def test_each_row_says_the_api_format_and_http_version_it_was_asked_in() -> None:
    """Issue 36's leftover: a limit found over h2c in the Anthropic format is not the same path's limit over HTTP/1.1
    in OpenAI's; the page's row says which, in the cells beside its limits."""
    url = "http://127.0.0.1:8080"
    found = (LimitFound(Measure.MID_STREAM, 59.5, 60.5, None, 4),)
    for api, version in ((Api.ANTHROPIC, HttpVersion.HTTP2), (Api.OPENAI, HttpVersion.HTTP11)):
        cfg = SurveyConfig((url,), min_s=1, max_s=120, resolution_s=1, api=api, http_version=version)
        html = timeouts_page([PathLimits(url, found, None, None)], cfg, {url: "nginx:stock"})
        assert "<th>API</th><th>HTTP</th>" in html
        assert f"<td>nginx:stock</td><td>{api.value}</td><td>{version.label}</td>" in html
