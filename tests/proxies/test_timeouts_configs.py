"""Issue 36 item 4: each catalogue proxy's stream timeouts in its rendered config. Stock carries the shipped or
documented values, every other variant the same, `long_streams` the lifted ones, and a Site's own (tiny) limits
replace the stock values: a variant that loses its timeout lines fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.proxies import catalogue, lookup
from tokenpath.proxies.base import Endpoint, Site
from tokenpath.proxies.timeouts import LONG_STREAMS, NO_LIMITS, StreamTimeouts

TINY = StreamTimeouts(idle_s=1.5, first_byte_s=1.5, total_s=2.0)

# proxy -> (stock lines, lines under TINY, long_streams lines); argv included (Varnish and Traefik take some there)
EXPECTED: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "nginx": (("proxy_read_timeout 60s;",), ("proxy_read_timeout 1500ms;",), ("proxy_read_timeout 3600s;",)),
    "haproxy": (
        ("timeout client 50s", "timeout server 50s"),
        ("timeout client 1500ms", "timeout server 1500ms"),
        ("timeout client 3600s", "timeout server 3600s"),
    ),
    "envoy": (
        ("timeout: 15s", "stream_idle_timeout: 300s"),
        ("timeout: 2s", "stream_idle_timeout: 1.5s"),
        ("timeout: 0s", "stream_idle_timeout: 0s"),
    ),
    "apache2": (("\nTimeout 300\n",), ("\nTimeout 2\n",), ("\nTimeout 300\nProxyTimeout 3600\n",)),
    "h2o": (("proxy.timeout.io: 30000",), ("proxy.timeout.io: 1500",), ("proxy.timeout.io: 3600000",)),
    "squid": (("read_timeout 900 seconds",), ("read_timeout 2 seconds",), ("read_timeout 3600 seconds",)),
    "varnish": (
        (".first_byte_timeout = 60s;", ".between_bytes_timeout = 60s;", "send_timeout=600"),
        (".first_byte_timeout = 2s;", ".between_bytes_timeout = 2s;", "send_timeout=2"),
        (".first_byte_timeout = 3600s;", ".between_bytes_timeout = 3600s;", "send_timeout=3600"),
    ),
    "caddy": (
        ("# stock timeouts: none",),
        ("read_timeout 1500ms", "response_header_timeout 1500ms"),
        ("read_timeout 0", "response_header_timeout 0"),
    ),
    "lighttpd": (
        ('# stock timeouts: none (mod_proxy "read-timeout" => 0',),
        ('"read-timeout" => 2',),
        ('"read-timeout" => 0',),
    ),
    "traefik": (
        ("# stock timeouts: none",),
        ("respondingTimeouts.writeTimeout=2s",),
        ("respondingTimeouts.writeTimeout=0s",),
    ),
    "starlette": (("--read-timeout 5",), ("--read-timeout 1.5",), ("--read-timeout none",)),
    "gateway": (
        ("first_byte_timeout_s = 60\n", "idle_timeout_s = 300\n", "total_timeout_s = 900\n"),
        ("first_byte_timeout_s = 1.5\n", "idle_timeout_s = 1.5\n", "total_timeout_s = 2\n"),
        ("first_byte_timeout_s = 3600\n", "idle_timeout_s = 3600\n", "total_timeout_s = 3600\n"),
    ),
    "node": (
        ("--body-timeout 300000 --headers-timeout 300000",),
        ("--body-timeout 1500 --headers-timeout 1500",),
        ("--body-timeout 0 --headers-timeout 0",),
    ),
    "litellm": (("request_timeout: 6000\n",), ("request_timeout: 1.5\n",), ("request_timeout: 6000\n",)),
}
EXPECTED["haproxy3"] = EXPECTED["haproxy"]
EXPECTED["caddy-2.11"] = EXPECTED["caddy"]


def rendered(tmp_path: Path, proxy: str, variant: str, timeouts: StreamTimeouts | None = None) -> str:
    entry = lookup(proxy)
    site = Site(
        Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, entry.variant(variant), timeouts=timeouts
    )
    config = entry.write_config(site)
    try:
        argv = entry.command_line("bin", site, config)
    except NotImplementedError:  # the gateway and LiteLLM: their config file holds every line
        argv = []
    return config.read_text() + "\n" + " ".join(argv)


def test_the_gateways_stock_limits_are_its_own_defaults_and_every_rendering_loads(tmp_path: Path) -> None:
    from tokenpath.gateway.config import Limits, load
    from tokenpath.proxies.gateway import STOCK_TIMEOUTS

    defaults = Limits()
    own = StreamTimeouts(
        idle_s=defaults.idle_timeout_s, first_byte_s=defaults.first_byte_timeout_s, total_s=defaults.total_timeout_s
    )
    assert own == STOCK_TIMEOUTS
    entry = lookup("gateway")
    for variant, timeouts, idle in (("stock", None, 300.0), ("stock", TINY, 1.5), (LONG_STREAMS, TINY, 3600.0)):
        site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, entry.variant(variant))
        site.timeouts = timeouts
        assert load(entry.write_config(site)).limits.idle_timeout_s == idle


def test_varnishs_total_limit_is_named_in_its_config_too(tmp_path: Path) -> None:
    entry = lookup("varnish")
    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, entry.variant("stock"))
    assert "-p send_timeout=600" in entry.write_config(site).read_text()  # the report shows the config file


def test_every_proxy_with_a_table_row_is_in_the_catalogue() -> None:
    assert set(EXPECTED) <= set(catalogue())


@pytest.mark.parametrize("proxy", sorted(EXPECTED))
def test_every_variant_but_long_streams_carries_the_stock_timeouts(tmp_path: Path, proxy: str) -> None:
    stock, _, _ = EXPECTED[proxy]
    for variant in lookup(proxy).variants:
        if variant.name != LONG_STREAMS:
            text = rendered(tmp_path, proxy, variant.name)
            assert all(line in text for line in stock), (variant.name, stock)


@pytest.mark.parametrize("proxy", sorted(EXPECTED))
def test_a_sites_own_limits_replace_the_stock_ones(tmp_path: Path, proxy: str) -> None:
    stock, tiny, _ = EXPECTED[proxy]
    text = rendered(tmp_path, proxy, "stock", TINY)
    assert all(line in text for line in tiny), tiny
    if lookup(proxy).stock_timeouts != NO_LIMITS:
        assert not any(line in text for line in stock)


@pytest.mark.parametrize("proxy", sorted(EXPECTED))
def test_long_streams_lifts_them_whatever_the_sites_limits(tmp_path: Path, proxy: str) -> None:
    _stock, tiny, lifted = EXPECTED[proxy]
    variant = lookup(proxy).variant(LONG_STREAMS)
    assert variant.line, "the line diagnose names as the fix"
    text = rendered(tmp_path, proxy, LONG_STREAMS, TINY)
    assert all(line in text for line in lifted), lifted
    assert not any(line in text for line in tiny)


def test_ingress_profiles_on_nginx(tmp_path: Path) -> None:
    ingress = rendered(tmp_path, "nginx", "ingress_nginx")
    assert "proxy_buffering off;" in ingress
    assert "proxy_read_timeout 60s;" in ingress
    assert "proxy_http_version 1.1;" in ingress
    f5 = rendered(tmp_path, "nginx", "f5_ingress")
    assert "proxy_buffering on;" in f5
    assert "proxy_read_timeout 60s;" in f5


def test_envoy_gateway_profile_keeps_envoys_stream_limits(tmp_path: Path) -> None:
    text = rendered(tmp_path, "envoy", "envoy_gateway")
    assert "timeout: 15s" in text
    assert "stream_idle_timeout: 300s" in text


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_s"):
        StreamTimeouts(idle_s=0)
