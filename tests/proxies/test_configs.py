"""Each catalogue proxy's config as written: stock is stock, a variant changes only its own lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tokenpath.errors import ProxyError
from tokenpath.proxies import catalogue, lookup
from tokenpath.proxies.base import Endpoint, Proxy, Site, UpstreamTLS
from tokenpath.proxies.relays import CONTROLS
from tokenpath.serve.tlscert import TLSFiles
from tokenpath.tools import TOOLS_ENV


def site(tmp_path: Path, proxy: str, variant: str = "stock", tls: bool = False) -> Site:
    files = TLSFiles(tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ck.pem") if tls else None
    return Site(
        Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, lookup(proxy).variant(variant), files
    )


def test_nginx_stock_does_not_touch_buffering(tmp_path: Path) -> None:
    text = lookup("nginx").write_config(site(tmp_path, "nginx")).read_text()
    assert "proxy_pass http://backend;" in text
    assert "server 127.0.0.1:8000;" in text
    assert "listen 127.0.0.1:9001;" in text
    assert "proxy_buffering" not in text
    assert "proxy_http_version" not in text


@pytest.mark.parametrize(
    ("variant", "line"),
    [
        ("proxy_buffering_off", "proxy_buffering off;"),
        ("http_1_1", "proxy_http_version 1.1;"),
        ("ignore_x_accel", "proxy_ignore_headers X-Accel-Buffering;"),
    ],
)
def test_nginx_variants(tmp_path: Path, variant: str, line: str) -> None:
    assert line in lookup("nginx").write_config(site(tmp_path, "nginx", variant)).read_text()


def test_nginx_tls(tmp_path: Path) -> None:
    text = lookup("nginx").write_config(site(tmp_path, "nginx", tls=True)).read_text()
    assert "listen 127.0.0.1:9001 ssl;" in text
    assert f"ssl_certificate {tmp_path}/c.pem;" in text


def test_haproxy_stock_and_no_delay(tmp_path: Path) -> None:
    proxy = lookup("haproxy")
    stock = proxy.write_config(site(tmp_path, "haproxy")).read_text()
    assert "option http-no-delay" not in stock
    assert "server stub 127.0.0.1:8000" in stock
    fixed = proxy.write_config(site(tmp_path, "haproxy", "http_no_delay")).read_text()
    assert fixed.count("option http-no-delay") == 2
    tls = proxy.write_config(site(tmp_path, "haproxy", tls=True)).read_text()
    assert f"ssl crt {tmp_path}/ck.pem" in tls


def test_every_catalogue_entry_has_a_stock_variant_and_a_missing_reason_or_binary() -> None:
    for name, proxy in catalogue().items():
        assert proxy.variants[0].name == "stock", name
        # A reason whenever it cannot run; none only when it can. A binary alone is not enough: Express runs on
        # the machine's node but needs its npm packages in the tools folder (a fresh machine has node only).
        if not (proxy.runnable and proxy.binary() is not None):
            assert proxy.missing_reason() is not None, name
        if proxy.missing_reason() is None:
            assert proxy.runnable, name
            assert proxy.binary() is not None, name


def test_unknown_variant_lists_the_known_ones() -> None:
    with pytest.raises(ProxyError, match="proxy_buffering_off"):
        lookup("nginx").variant("nope")


CONTROL_NAMES = {c.name for c in CONTROLS}  # tokenpath's relays: always in front of the stub, never an endpoint
FRONTING = [n for n, p in catalogue().items()
            if p.runnable and not p.openai_only and not p.attached and n not in CONTROL_NAMES]  # fmt: skip


@pytest.mark.parametrize("name", FRONTING)
def test_a_stub_site_writes_no_endpoint_lines_and_an_endpoint_site_writes_them(tmp_path: Path, name: str) -> None:
    """The stub's configs stay what was measured so far; an https endpoint gets its name and the declared CA."""
    proxy = lookup(name)
    (tmp_path / "stub").mkdir()
    try:
        stub_text = proxy.write_config(site(tmp_path / "stub", name)).read_text()
    except ProxyError:  # a peer whose config is its command line (node22), when not installed
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    assert "api.example.com" not in stub_text
    assert str(tmp_path / "ca.pem") not in stub_text
    if proxy.upstream_tls_unsupported:
        return
    (tmp_path / "ep").mkdir()
    endpoint = Site(Endpoint("127.0.0.1", 9001), Endpoint("api.example.com", 443), tmp_path / "ep",
                    proxy.variant("stock"), upstream_tls=UpstreamTLS("api.example.com", tmp_path / "ca.pem"),
                    upstream_host="api.example.com", upstream_api_key_env="EP_KEY")  # fmt: skip
    config = proxy.write_config(endpoint)
    argv = proxy.argv(endpoint, config) if proxy.binary() else proxy.image_argv(endpoint, config)  # haproxy3 unbuilt
    text = config.read_text() + " ".join(argv)
    text += " ".join(f"{k}={v}" for k, v in proxy.env(endpoint).items())
    assert "api.example.com" in text
    assert str(tmp_path / "ca.pem") in text  # the declared CA, not the system store


WITH_IMAGE = [n for n, p in catalogue().items() if p.image and p.runnable]


@pytest.mark.parametrize("name", WITH_IMAGE)
def test_a_config_and_the_image_command_need_no_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       name: str) -> None:  # fmt: skip
    """Only running it here needs the binary (and says why it is missing); its config and the command its image
    runs are written without one (the compose export, an opt-in build not made)."""
    monkeypatch.setenv(TOOLS_ENV, str(tmp_path / "empty-tools"))
    monkeypatch.setattr(Proxy, "binary", lambda self: None)
    proxy = lookup(name)
    config = proxy.write_config(site(tmp_path, name))
    assert config.is_file()
    argv = proxy.image_argv(site(tmp_path, name), config)
    assert argv[0] == Path(argv[0]).name == proxy.image_binary
    with pytest.raises(ProxyError, match=f"^{name}: not "):
        proxy.argv(site(tmp_path, name), config)


def test_attach_waits_for_a_path_that_never_accepts_then_says_so(tmp_path: Path) -> None:
    from tokenpath.proxies.attached import AttachedProxy
    from tokenpath.proxies.base import attach, free_port

    port = free_port()
    proxy = AttachedProxy("svc", f"http://127.0.0.1:{port}")
    with pytest.raises(ProxyError, match=f"nothing accepts at 127.0.0.1:{port} within 0 s"):
        attach(proxy, Site(proxy.listen, Endpoint("127.0.0.1", 1), tmp_path), timeout_s=0.3)


def test_a_custom_command_reaches_https_only_through_upstream_url(tmp_path: Path) -> None:
    from tokenpath.proxies.custom import CustomProxy

    plain = CustomProxy("p", "relay --listen {listen} --to {upstream}")
    assert "{upstream_url}" in plain.upstream_tls_unsupported  # the runner skips it for an https endpoint
    full = CustomProxy("f", "gw --listen {listen} --to {upstream_url}")
    assert not full.upstream_tls_unsupported
    endpoint = Site(Endpoint("127.0.0.1", 9001), Endpoint("api.example.com", 443), tmp_path,
                    upstream_tls=UpstreamTLS("api.example.com"))  # fmt: skip
    assert full.argv(endpoint, tmp_path) == ["gw", "--listen", "127.0.0.1:9001", "--to", "https://api.example.com:443"]


def test_varnish_websocket_variant_pipes_the_upgrade_with_its_hop_by_hop_headers(tmp_path: Path) -> None:
    """Varnish carries a WebSocket only through pipe, with Upgrade/Connection copied onto the backend request (its
    users' guide); stock has neither, and the VCL compiles (`varnishd -C`) where Varnish is installed."""
    varnish = lookup("varnish")
    (tmp_path / "s").mkdir()
    (tmp_path / "w").mkdir()
    stock = varnish.write_config(site(tmp_path / "s", "varnish")).read_text()
    vcl = varnish.write_config(site(tmp_path / "w", "varnish", "websocket"))
    text = vcl.read_text()
    assert "return (pipe);" in text
    assert "return (pipe);" not in stock
    assert "set bereq.http.upgrade = req.http.upgrade;" in text
    assert "set bereq.http.connection = req.http.connection;" in text
    binary = varnish.binary()
    if binary is not None:
        compiled = subprocess.run(
            [binary, "-C", "-j", "none", "-f", str(vcl), "-n", str(tmp_path / "n")], capture_output=True
        )
        assert compiled.returncode == 0, compiled.stderr.decode()[-2000:]


def _config_check(argv: list[str]) -> None:
    """The proxy's own config check accepts the file (skipped where the proxy is not installed)."""
    checked = subprocess.run(argv, capture_output=True, text=True)
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-2000:]


def test_h2o_websocket_variant_turns_proxy_websocket_on(tmp_path: Path) -> None:
    """h2o 2.2 carries a WebSocket only with proxy.websocket ON (its proxy directives; stock: a 405 from the stub,
    which sees a plain GET); `h2o -t` accepts it where h2o is installed."""
    h2o = lookup("h2o")
    (tmp_path / "s").mkdir()
    (tmp_path / "w").mkdir()
    stock = h2o.write_config(site(tmp_path / "s", "h2o")).read_text()
    config = h2o.write_config(site(tmp_path / "w", "h2o", "websocket"))
    text = config.read_text()
    assert "\n        proxy.websocket: ON\n" in text  # in the proxied path's own mapping
    assert "proxy.websocket" not in stock
    binary = h2o.binary()
    if binary is not None:
        _config_check([binary, "-t", "-c", str(config)])


def test_lighttpd_websocket_variant_enables_the_upgrade_in_proxy_header(tmp_path: Path) -> None:
    """lighttpd's mod_proxy carries a WebSocket only with proxy.header's "upgrade" => "enable" (1.4.46+); with a real
    endpoint's Host it shares the one proxy.header (a second assignment would replace the first); `lighttpd -tt`
    (which loads mod_proxy and checks the value) accepts it where lighttpd is installed."""
    lighttpd = lookup("lighttpd")
    for sub in ("s", "w", "h"):
        (tmp_path / sub).mkdir()
    stock = lighttpd.write_config(site(tmp_path / "s", "lighttpd")).read_text()
    config = lighttpd.write_config(site(tmp_path / "w", "lighttpd", "websocket"))
    assert 'proxy.header = ("upgrade" => "enable")\n' in config.read_text()
    assert "upgrade" not in stock
    endpoint = Site(
        Endpoint("127.0.0.1", 9001),
        Endpoint("api.example.com", 80),
        tmp_path / "h",
        lighttpd.variant("websocket"),
        upstream_host="api.example.com",
    )
    both = lighttpd.write_config(endpoint).read_text()
    assert both.count("proxy.header") == 1
    assert 'proxy.header = ("map-host-request" => ("-" => "api.example.com"), "upgrade" => "enable")' in both
    binary = lighttpd.binary()
    if binary is not None:
        _config_check([binary, "-tt", "-f", str(config)])


def test_squid_websocket_variant_allows_the_upgrade_as_clients_spell_it(tmp_path: Path) -> None:
    """Squid 5+ drops Upgrade unless http_upgrade_request_protocols allows it; its protocol names are case sensitive
    and clients send `Upgrade: websocket` (the docs' `WebSocket` left this Squid 5.7 answering 405, measured):
    `squid -k parse` accepts the line where Squid is installed."""
    squid = lookup("squid")
    (tmp_path / "s").mkdir()
    (tmp_path / "w").mkdir()
    stock = squid.write_config(site(tmp_path / "s", "squid")).read_text()
    config = squid.write_config(site(tmp_path / "w", "squid", "websocket"))
    assert "\nhttp_upgrade_request_protocols websocket allow all\n" in config.read_text()
    assert "http_upgrade_request_protocols" not in stock
    binary = squid.binary()
    if binary is not None:
        _config_check([binary, "-k", "parse", "-f", str(config)])
