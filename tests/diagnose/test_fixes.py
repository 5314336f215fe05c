"""The fix table: every line is a catalogue fix variant the matrix measured, printed only for what it was measured
to fix (so applying it and diagnosing again never gets it back); every catalogue proxy that names itself in a head
is recognised; a path that names none gets the rule's generic fix, never another proxy's name."""

from __future__ import annotations

import re

import pytest

from tokenpath.diagnose.classify import Cause, Verdict
from tokenpath.diagnose.fixes import FIXES, check_proxy, fix_for, generic_fix, proxy_names, recognise, variant_line
from tokenpath.errors import UsageError
from tokenpath.proxies.catalogue import catalogue


def verdict(cause: Cause, encoding: str | None = None, **kw: object) -> Verdict:
    return Verdict(cause, "summary", encoding=encoding, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("fix", FIXES, ids=lambda f: f"{f.proxies[0]}:{f.variant}")
def test_every_line_is_a_catalogue_fix_variant(fix: object) -> None:
    from tokenpath.diagnose.fixes import MeasuredFix

    assert isinstance(fix, MeasuredFix)
    for proxy in fix.proxies:
        assert proxy in catalogue()
    line = variant_line(fix.proxies[0], fix.variant)
    assert line, f"{fix.proxies[0]}:{fix.variant} has no config line"
    assert fix.source.startswith("https://")
    assert Cause.STREAMS not in fix.causes
    assert Cause.UNSURE not in fix.causes


@pytest.mark.parametrize(
    ("proxy", "v", "line"),
    [
        ("nginx", verdict(Cause.WHOLE_RESPONSE), "proxy_buffering off;"),
        ("nginx", verdict(Cause.BYTE_QUANTIZED), "proxy_buffering off;"),
        ("haproxy", verdict(Cause.TIME_QUANTIZED), "option http-no-delay"),
        ("lighttpd", verdict(Cause.WHOLE_RESPONSE), "server.stream-response-body = 2"),
        ("traefik@3.3.2", verdict(Cause.COMPRESSION_HOLD, "zstd"), "excludedContentTypes"),
        ("envoy", verdict(Cause.COMPRESSION_HOLD, "zstd"), "gzip"),
    ],
)
def test_measured_lines(proxy: str, v: Verdict, line: str) -> None:
    fix = fix_for(proxy, v)
    assert fix is not None
    assert line in fix.line


def test_nginx_fix_is_never_the_http_1_1_line_that_only_holds_the_head() -> None:
    """Issue 35: `proxy_http_version 1.1;` gave a head-only hold and the same two lines again."""
    for cause in Cause:
        fix = fix_for("nginx", verdict(cause))
        assert fix is None or "proxy_http_version" not in fix.line


@pytest.mark.parametrize(
    ("proxy", "v"),
    [
        ("nginx", verdict(Cause.STREAMS)),
        ("nginx", verdict(Cause.COMPRESSION_HOLD, "gzip")),  # nginx gzip streams with buffering off: not its line
        ("lighttpd", verdict(Cause.BYTE_QUANTIZED)),
        ("envoy", verdict(Cause.COMPRESSION_HOLD, "gzip")),  # the fix is gzip: it does not fix a gzip hold
        ("traefik", verdict(Cause.COMPRESSION_HOLD, "gzip")),
        ("apache2", verdict(Cause.WHOLE_RESPONSE)),  # Apache streams stock: nothing measured to fix a hold
    ],
)
def test_a_line_not_measured_to_fix_what_was_seen_is_not_printed(proxy: str, v: Verdict) -> None:
    assert fix_for(proxy, v) is None


def test_generic_fixes_carry_the_measured_rule_and_name_no_proxy() -> None:
    synthetic = {"pass", "buffer", "cork", "gzip-hold", "gzip-flush", "gateway"}  # peers, not proxies one names
    names = [re.compile(rf"\b{re.escape(n)}\b") for n in catalogue() if n not in synthetic]
    for cause in (Cause.WHOLE_RESPONSE, Cause.BYTE_QUANTIZED, Cause.TIME_QUANTIZED, Cause.COMPRESSION_HOLD):
        text = generic_fix(verdict(cause, size_bytes=16384, period_ms=200.0))
        assert text
        assert not any(name.search(text.lower()) for name in names), text
    assert "200 ms" in (generic_fix(verdict(Cause.TIME_QUANTIZED, period_ms=200.0)) or "")
    assert "16 KiB" in (generic_fix(verdict(Cause.BYTE_QUANTIZED, size_bytes=16384)) or "")
    assert generic_fix(verdict(Cause.STREAMS)) is None


@pytest.mark.parametrize(
    ("headers", "proxy"),
    [
        ([("Server", "nginx/1.22.1")], "nginx"),
        ([("server", "openresty/1.25")], "nginx"),
        ([("server", "envoy")], "envoy"),
        ([("x-envoy-upstream-service-time", "3")], "envoy"),
        ([("Server", "Caddy")], "caddy"),
        ([("Via", "1.1 Caddy")], "caddy"),
        ([("Server", "Apache/2.4.62 (Debian)")], "apache2"),
        ([("Server", "lighttpd/1.4.69")], "lighttpd"),
        ([("Server", "h2o/2.2.5")], "h2o"),
        ([("Via", "1.1 varnish (Varnish/7.1)")], "varnish"),
        ([("X-Varnish", "32770")], "varnish"),
        ([("Via", "1.1 host (squid/5.7)")], "squid"),
        ([("Server", "squid/5.7")], "squid"),
        ([("X-Powered-By", "Express")], "express"),
        ([("Server", "nginx/1.22.1"), ("X-Powered-By", "Express")], "nginx"),  # the proxy in front wins
        ([("Content-Type", "text/event-stream")], None),
        ([("Server", "uvicorn")], None),
    ],
)
def test_recognise(headers: list[tuple[str, str]], proxy: str | None) -> None:
    found = recognise(headers)
    assert (found.proxy if found else None) == proxy
    if found is not None:
        assert found.proxy in catalogue()
        assert found.by in {f"{k}: {v}" for k, v in headers}


@pytest.mark.parametrize("name", ["lighttpd", "h2o", "varnish", "squid", "traefik@3.3.2", "express", "node"])
def test_every_catalogue_proxy_is_accepted_by_proxy(name: str) -> None:
    check_proxy(name)


def test_an_unknown_proxy_is_a_usage_error_naming_the_catalogue() -> None:
    with pytest.raises(UsageError, match="lighttpd"):
        check_proxy("nosuchproxy")
    assert "lighttpd" in proxy_names()
