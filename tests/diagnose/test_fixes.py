"""The fix table: every one of the six proxies has a line and a source for every hold, the catalogue's measured fix
variants are the lines it prints, and heads are recognised by what each proxy writes into them."""

from __future__ import annotations

import pytest

from tokenpath.diagnose.classify import Cause
from tokenpath.diagnose.fixes import FIXES, PROXIES, fix_for, likely_proxy, recognise
from tokenpath.proxies import lookup

HOLDS = [c for c in Cause if c not in (Cause.STREAMS, Cause.UNSURE)]


@pytest.mark.parametrize("proxy", PROXIES)
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


def test_traefik_compression_fix_excludes_event_streams() -> None:
    fix = fix_for("traefik", Cause.COMPRESSION_HOLD)
    assert fix is not None
    assert "excludedContentTypes" in fix.line
    assert "text/event-stream" in fix.line


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
