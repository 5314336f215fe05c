"""HTTP/3 to the client (issue 38 item 2): Envoy's `http3` variant writes a QUIC listener on the listen port's UDP
twin (TLS only), Caddy's `response_buffers` variant (the held control over h3) its buffering line, each accepted by
the proxy's own checker where it is installed; every catalogue path says whether it serves h3."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tokenpath.proxies import catalogue, lookup
from tokenpath.proxies.base import H3_NONE, Endpoint, Site, client_version_unsupported
from tokenpath.proxies.envoy import QUIC
from tokenpath.serve.tlscert import self_signed


def site(tmp_path: Path, proxy: str, variant: str, tls: bool) -> Site:
    files = self_signed(tmp_path / "tls", ["127.0.0.1"]) if tls else None
    work = tmp_path / f"{variant}-{tls}"
    work.mkdir(exist_ok=True)
    return Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), work, lookup(proxy).variant(variant), files)


def test_envoys_http3_variant_adds_a_quic_listener_over_tls_only(tmp_path: Path) -> None:
    envoy = lookup("envoy")
    text = envoy.write_config(site(tmp_path, "envoy", "http3", tls=True)).read_text()
    assert "protocol: UDP, address: 127.0.0.1, port_value: 9001" in text
    assert QUIC in text
    assert "codec_type: HTTP3" in text
    assert "alpn_protocols: [h2, http/1.1]" in text  # its TCP listener offers h2 as the http2 variant does
    assert text.count("stream_idle_timeout") == 2  # the QUIC listener keeps the stock limits of the TCP one
    plain = envoy.write_config(site(tmp_path, "envoy", "http3", tls=False)).read_text()
    assert QUIC not in plain  # no certificate, no QUIC
    stock = envoy.write_config(site(tmp_path, "envoy", "stock", tls=True)).read_text()
    assert QUIC not in stock


def test_caddys_response_buffers_variant_writes_its_line(tmp_path: Path) -> None:
    caddy = lookup("caddy-2.11")
    text = caddy.write_config(site(tmp_path, "caddy-2.11", "response_buffers", tls=True)).read_text()
    assert "    response_buffers 1m\n" in text
    assert "response_buffers 1m" not in caddy.write_config(site(tmp_path, "caddy-2.11", "stock", tls=True)).read_text()


def test_which_stock_paths_serve_h3() -> None:
    served = {
        (name, variant.name)
        for name, proxy in catalogue().items()
        for variant in proxy.variants
        if proxy.client_h3_unsupported(variant, True) == ""
    }
    caddy_variants = {c: {v.name for v in lookup(c).variants} - {"h2c"} for c in ("caddy", "caddy-2.11")}
    assert "response_buffers" not in caddy_variants["caddy"]  # Caddy 2.6.2 has no such line (2.7 brought it)
    assert served == {("envoy", "http3"), *((c, v) for c, vs in caddy_variants.items() for v in vs)}
    assert all(
        proxy.client_h3_unsupported(variant, False) != ""
        for proxy in catalogue().values()
        for variant in proxy.variants
    )  # QUIC is TLS only
    assert lookup("squid").client_h3_unsupported(lookup("squid").variants[0], True) == H3_NONE


CHECKS = {
    "envoy": lambda b, c: [b, "--mode", "validate", "-c", str(c), "-l", "error", "--disable-hot-restart"],
    "caddy-2.11": lambda b, c: [b, "validate", "--config", str(c), "--adapter", "caddyfile"],
}


@pytest.mark.parametrize(("proxy", "variant"), [("envoy", "http3"), ("caddy-2.11", "response_buffers")])
def test_the_proxy_itself_accepts_the_config(tmp_path: Path, proxy: str, variant: str) -> None:
    entry = lookup(proxy)
    binary = entry.binary()
    if binary is None:
        pytest.skip(f"{proxy}: {entry.missing_reason()}")
    s = site(tmp_path, proxy, variant, tls=True)
    config = entry.write_config(s)
    done = subprocess.run(
        CHECKS[proxy](binary, config),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **entry.env(s)},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]


def test_one_question_answers_every_version() -> None:
    nginx, envoy = lookup("nginx"), lookup("envoy")
    assert client_version_unsupported(nginx, nginx.variant("stock"), True, "3") == H3_NONE
    assert client_version_unsupported(envoy, envoy.variant("http3"), True, "3") == ""
    assert client_version_unsupported(nginx, nginx.variant("stock"), True, "2") != ""  # HTTP/2: its own answer
    assert client_version_unsupported(nginx, nginx.variant("stock"), True, "1.1") == ""
