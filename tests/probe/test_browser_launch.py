"""How the browser probe starts Chromium: its flags, the --cacert pin (the leaf's key, read only after Python verified
the server against the CA), and a missing Chromium named as such. A real TLS listener on loopback; no browser."""

from __future__ import annotations

import base64
import hashlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tokenpath.errors import ConnectError, InstrumentError, TLSError, UsageError
from tokenpath.probe import browser
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.transport import TLSOptions
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.httpversion import HttpVersion


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """Accepts TLS handshakes (and closes) until the test ends."""
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(files.cert, files.key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            try:
                with ctx.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], files.cert
    stop.set()
    thread.join(5)
    listener.close()


def spki_of(cert_pem: Path) -> str:
    cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
    der = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_plain_http_gets_the_measurement_flags_only() -> None:
    args = browser.launch_args(ProbeConfig(url="http://127.0.0.1:9"))
    assert args == list(browser.CHROMIUM_ARGS)
    for flag in ("--disable-quic", "--disable-background-networking", "--no-sandbox"):
        assert flag in args


def test_cacert_pins_the_verified_leafs_key(tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    cfg = ProbeConfig(url=f"https://127.0.0.1:{port}", tls=TLSOptions(cacert=str(cert)))
    assert browser.launch_args(cfg)[-1] == f"--ignore-certificate-errors-spki-list={spki_of(cert)}"


def test_a_server_the_cacert_did_not_sign_is_refused_before_any_browser(
    tls_server: tuple[int, Path], tmp_path: Path
) -> None:
    port, _ = tls_server
    other = self_signed(tmp_path / "other", ["127.0.0.1"])
    cfg = ProbeConfig(url=f"https://127.0.0.1:{port}", tls=TLSOptions(cacert=str(other.cert)))
    with pytest.raises(TLSError, match="did not verify"):
        browser.launch_args(cfg)


def test_insecure_pins_nothing(tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    cfg = ProbeConfig(url=f"https://127.0.0.1:{port}", tls=TLSOptions(insecure=True, cacert=str(cert)))
    assert browser.launch_args(cfg) == list(browser.CHROMIUM_ARGS)  # the context ignores certificate errors


def test_a_closed_port_is_a_connect_error(tmp_path: Path) -> None:
    ca = self_signed(tmp_path / "ca", ["127.0.0.1"]).cert
    # bound, never listening: refused for as long as the test holds it (a port closed again could be anyone's)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        cfg = ProbeConfig(url=f"https://127.0.0.1:{port}", tls=TLSOptions(cacert=str(ca)), connect_timeout_s=2)
        with pytest.raises(ConnectError, match="to read its certificate"):
            browser.launch_args(cfg)


def test_no_chromium_is_an_instrument_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    with pytest.raises(InstrumentError, match="no Chromium found"):
        browser.chromium_path()


def test_http3_turns_quic_on_and_forces_it_for_the_targets_origin(tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    cfg = ProbeConfig(url=f"https://127.0.0.1:{port}", tls=TLSOptions(cacert=str(cert)), http_version=HttpVersion.HTTP3)
    args = browser.launch_args(cfg)
    assert "--disable-quic" not in args
    assert "--enable-quic" in args
    assert f"--origin-to-force-quic-on=127.0.0.1:{port}" in args  # no Alt-Svc discovery, no race with TCP
    assert f"--ignore-certificate-errors-spki-list={spki_of(cert)}" in args  # the same pin trusts the QUIC session
    insecure = ProbeConfig(
        url=f"https://127.0.0.1:{port}", tls=TLSOptions(insecure=True), http_version=HttpVersion.HTTP3
    )
    assert "--ignore-certificate-errors" in browser.launch_args(insecure)


def test_http3_over_clear_text_is_refused_before_any_browser() -> None:
    with pytest.raises(UsageError, match="https URL"):
        browser.launch_args(ProbeConfig(url="http://127.0.0.1:9", http_version=HttpVersion.HTTP3))
