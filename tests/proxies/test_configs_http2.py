"""HTTP/2 to the client (issue 25 §3): each h2 variant writes its listener line, the proxy's own checker accepts the
file where the proxy is installed, and every path says whether it serves h2 (and why not) rather than letting a
client fall back to HTTP/1.1 under an h2 label."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tokenpath.proxies import catalogue, lookup
from tokenpath.proxies.base import H2_NONE, Endpoint, Site
from tokenpath.proxies.relays import CONTROLS
from tokenpath.serve.tlscert import self_signed

# (proxy, variant, the line its config must hold over TLS, ... on cleartext or None when it is the same file as stock)
H2_LINES = [
    ("nginx", "http2", "listen 127.0.0.1:9001 ssl http2;", "listen 127.0.0.1:9001 http2;"),
    ("nginx", "http2_buffering_off", "listen 127.0.0.1:9001 ssl http2;", "proxy_buffering off;"),
    ("haproxy", "h2", "alpn h2,http/1.1", None),
    ("envoy", "http2", "alpn_protocols: [h2, http/1.1]", None),
    ("apache2", "http2", "Protocols h2 h2c http/1.1", "LoadModule http2_module"),
    ("apache2", "http2_flushpackets", "Protocols h2 h2c http/1.1", "flushpackets=on"),
    ("caddy", "h2c", "protocols h1 h2 h2c", "protocols h1 h2 h2c"),
]


def site(tmp_path: Path, proxy: str, variant: str, tls: bool) -> Site:
    files = self_signed(tmp_path / "tls", ["127.0.0.1"]) if tls else None
    work = tmp_path / ("tls-site" if tls else "plain-site")
    work.mkdir(exist_ok=True)
    return Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), work, lookup(proxy).variant(variant), files)


@pytest.mark.parametrize(("proxy", "variant", "tls_line", "plain_line"), H2_LINES)
def test_an_h2_variant_writes_its_listener_line_and_only_it_serves_h2(
    tmp_path: Path, proxy: str, variant: str, tls_line: str, plain_line: str | None
) -> None:
    entry = lookup(proxy)
    tls_text = entry.write_config(site(tmp_path, proxy, variant, tls=True)).read_text()
    assert tls_line in tls_text
    stock_tls = entry.write_config(site(tmp_path / "stock", proxy, "stock", tls=True)).read_text()
    assert tls_line not in stock_tls
    plain = entry.write_config(site(tmp_path, proxy, variant, tls=False)).read_text()
    if plain_line is not None:
        assert plain_line in plain
    assert entry.client_http_unsupported(entry.variant(variant), True, "2") == ""
    assert entry.client_http_unsupported(entry.variant(variant), False, "2") == ""
    assert tls_line.split("9001 ")[-1] in entry.variant(variant).line  # the line the report shows


def test_which_stock_paths_serve_h2_is_what_was_measured() -> None:
    """Measured here with curl --http2 / --http2-prior-knowledge (the report of issue 25 §3 lists them); the gateway
    with `tokenpath load --http2 --proxy gateway`."""
    names = ("caddy", "caddy-2.11", "traefik", "envoy", "haproxy", "h2o", "nginx", "lighttpd", "varnish", "apache2",
             "gateway")  # fmt: skip
    stock = {name: lookup(name) for name in names}
    served = {
        (name, tls)
        for name, p in stock.items()
        for tls in (True, False)
        if p.client_http_unsupported(p.variants[0], tls, "2") == ""
    }
    assert served == {
        ("caddy", True), ("caddy-2.11", True), ("caddy-2.11", False), ("traefik", True), ("traefik", False),
        ("envoy", False), ("haproxy", False), ("h2o", True), ("h2o", False), ("lighttpd", True), ("lighttpd", False),
        ("gateway", False),  # h2c beside HTTP/1.1 on its one port (`load --http2 --proxy gateway` joins every stream)
    }  # fmt: skip
    reason = lookup("nginx").client_http_unsupported(lookup("nginx").variants[0], True, "2")
    assert "http2" in reason  # names the variant that does


def test_nginx_h2c_port_is_h2_only_and_says_so() -> None:
    nginx = lookup("nginx")
    assert "h2c only" in nginx.client_http_unsupported(nginx.variant("http2"), False, "1.1")
    assert nginx.client_http_unsupported(nginx.variant("http2"), True, "1.1") == ""


def test_paths_without_an_h2_listener_say_so_and_every_path_serves_http_1_1() -> None:
    for name, proxy in catalogue().items():
        for variant in proxy.variants:
            for tls in (True, False):
                assert isinstance(proxy.client_http_unsupported(variant, tls, "2"), str), name
    assert lookup("squid").client_http_unsupported(lookup("squid").variants[0], True, "2") == H2_NONE
    controls = {c.name: c.client_http_unsupported(c.variants[0], False, "2") for c in CONTROLS}
    assert controls["pass"] == controls["buffer"] == controls["cork"] == ""
    assert "refuses" in controls["gzip-hold"]
    assert "refuses" in controls["gzip-flush"]


# The proxy's own checker, where the project already runs one (the effective config), on the written file.
CHECKS = {
    "nginx": lambda b, c, s: [b, "-t", "-c", str(c), "-p", str(s.workdir)],
    "haproxy": lambda b, c, s: [b, "-c", "-f", str(c)],
    "envoy": lambda b, c, s: [b, "--mode", "validate", "-c", str(c), "-l", "error", "--disable-hot-restart"],
    "apache2": lambda b, c, s: [b, "-t", "-f", str(c)],
    "caddy": lambda b, c, s: [b, "validate", "--config", str(c), "--adapter", "caddyfile"],
}


@pytest.mark.parametrize(("proxy", "variant"), [(p, v) for p, v, _, _ in H2_LINES])
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "cleartext"])
def test_the_proxy_itself_accepts_the_h2_config(tmp_path: Path, proxy: str, variant: str, tls: bool) -> None:
    entry = lookup(proxy)
    binary = entry.binary()
    if binary is None:
        pytest.skip(f"{proxy}: {entry.missing_reason()}")
    s = site(tmp_path, proxy, variant, tls)
    (s.workdir / "tmp").mkdir(exist_ok=True)
    config = entry.write_config(s)
    done = subprocess.run(
        CHECKS[proxy](binary, config, s),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **entry.env(s)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_varnish_http2_turns_the_feature_on_on_its_command_line(tmp_path: Path) -> None:
    varnish = lookup("varnish")
    on = varnish.command_line("varnishd", site(tmp_path, "varnish", "http2", tls=False), tmp_path / "v.vcl")
    off = varnish.command_line("varnishd", site(tmp_path, "varnish", "stock", tls=False), tmp_path / "v.vcl")
    assert " ".join(on).endswith("-p feature=+http2")
    assert "feature=+http2" not in " ".join(off)
    assert varnish.client_http_unsupported(varnish.variant("http2"), False, "2") == ""
    assert "http2" in varnish.client_http_unsupported(varnish.variant("stock"), False, "2")
