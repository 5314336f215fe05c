"""The fix table: every one of the six proxies has a line and a source for every hold, the application servers one
for the compression hold, the catalogue's measured fix variants are the lines it prints, and heads are recognised by
what each proxy writes into them."""

from __future__ import annotations

import pytest

from tokenpath.diagnose.classify import Cause
from tokenpath.diagnose.fixes import (
    APPLICATIONS,
    FIXES,
    PROXIES,
    REVERSE_PROXIES,
    fix_for,
    likely_proxy,
    recognise,
)
from tokenpath.diagnose.report import check_proxy
from tokenpath.proxies import lookup

HOLDS = [c for c in Cause if c not in (Cause.STREAMS, Cause.UNSURE)]


@pytest.mark.parametrize("proxy", REVERSE_PROXIES)
@pytest.mark.parametrize("cause", HOLDS)
def test_every_proxy_has_a_fix_with_a_source_for_every_hold(proxy: str, cause: Cause) -> None:
    fix = fix_for(proxy, cause)
    assert fix is not None
    assert fix.line
    assert fix.source.startswith("https://")


def test_no_fix_for_a_path_that_streams_or_an_unsure_verdict() -> None:
    assert all(cause not in (Cause.STREAMS, Cause.UNSURE) for _, cause in FIXES)


def test_every_proxy_is_a_catalogue_entry() -> None:
    for proxy in PROXIES:
        assert lookup(proxy).name == proxy


@pytest.mark.parametrize("app", APPLICATIONS)
def test_applications_have_a_compression_fix_only_and_can_be_named(app: str) -> None:
    assert {cause for proxy, cause in FIXES if proxy == app} == {Cause.COMPRESSION_HOLD}
    check_proxy(app)  # --proxy express / starlette: accepted


@pytest.mark.parametrize(
    ("proxy", "variant", "cause"),
    [
        ("nginx", "proxy_buffering_off", Cause.WHOLE_RESPONSE),
        ("haproxy", "http_no_delay", Cause.TIME_QUANTIZED),
        ("caddy", "flush_interval", Cause.BYTE_QUANTIZED),
        ("apache2", "flushpackets", Cause.WHOLE_RESPONSE),
    ],
)
def test_lines_are_the_catalogues_measured_fix_variants(proxy: str, variant: str, cause: Cause) -> None:
    line = next(v.line for v in lookup(proxy).variants if v.name == variant)
    fix = fix_for(proxy, cause)
    assert fix is not None
    assert fix.line.startswith(line)


def test_nginx_names_both_fixes_the_findings_measured() -> None:
    fix = fix_for("nginx", Cause.WHOLE_RESPONSE)
    assert fix is not None
    assert "proxy_buffering off" in fix.line
    assert "proxy_http_version 1.1" in fix.line


def _variant(proxy: str, name: str) -> str:
    variant = next(v for v in lookup(proxy).variants if v.name == name)
    return f"{variant.line} {variant.description}"


def test_envoy_compression_fix_is_gzip_or_brotli_instead_of_zstd() -> None:
    # docs/findings.md §10: compressor_zstd held the stream to its end, compressor (gzip) and _brotli streamed.
    fix = fix_for("envoy", Cause.COMPRESSION_HOLD)
    assert fix is not None
    assert "gzip or brotli" in fix.line
    assert "not zstd" in fix.line
    assert "zstd" in fix.source
    assert "gzip or brotli" in _variant("envoy", "compressor_zstd")


def test_express_compression_fix_is_res_flush_or_a_filter() -> None:
    # docs/findings.md §10: express:naive held the stream to its end, express:flush streamed.
    fix = fix_for("express", Cause.COMPRESSION_HOLD)
    assert fix is not None
    assert fix.line.startswith("res.flush()")
    assert "compression({filter})" in fix.line
    assert fix.source == "https://github.com/expressjs/compression#server-sent-events"
    assert "res.flush()" in _variant("express", "flush")


def test_starlette_compression_fix_is_the_release_that_skips_event_streams() -> None:
    # docs/findings.md §10: GZipMiddleware held the stream on 0.45.3 and passed it uncompressed on 0.46.0.
    fix = fix_for("starlette", Cause.COMPRESSION_HOLD)
    assert fix is not None
    assert fix.line.startswith("starlette>=0.46")
    assert "text/event-stream" in fix.line
    assert fix.source.endswith("/pull/2871")


def test_traefik_compression_fix_excludes_event_streams() -> None:
    fix = fix_for("traefik", Cause.COMPRESSION_HOLD)
    assert fix is not None
    assert "excludedContentTypes" in fix.line
    assert "text/event-stream" in fix.line
    assert "Traefik 3.7" in fix.line  # docs/findings.md §10: 3.3.2 held br/zstd until 1 KB, 3.7.15 streamed


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
        ([("Via", "1.1 traefik")], "traefik"),
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
        assert found.by in {f"{k}: {v}" for k, v in headers}


def test_likely_proxy_from_a_stock_signature() -> None:
    hint = likely_proxy(Cause.TIME_QUANTIZED, 190.0)
    assert hint is not None
    assert "--proxy haproxy" in hint
    assert likely_proxy(Cause.TIME_QUANTIZED, 40.0) is None
    assert likely_proxy(Cause.STREAMS, None) is None


def test_likely_proxy_for_a_compression_hold_names_the_measured_holders() -> None:
    hint = likely_proxy(Cause.COMPRESSION_HOLD, None)
    assert hint is not None
    assert all(name in hint for name in ("express", "starlette", "envoy"))
