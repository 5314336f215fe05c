"""https members: a TLS upstream the project did not write (the stdlib's HTTP server behind the stdlib's TLS), a CA
made for the test, certificate failures failed over by reason, mTLS, and sessions resumed across connections."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.gateway.test_gateway_e2e import Services, metric, request, roundtrip
from tests.gateway.test_hostile_e2e import wait_for_log
from tests.helpers import LoopbackHTTPS
from tokenpath.proxies.base import free_port

pytestmark = pytest.mark.e2e


class CA:
    """A certificate authority for one test: issues server and client certificates into files."""

    def __init__(self, folder: Path, name: str = "tokenpath test CA") -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.name = subject
        self.cert = (
            self._builder(subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = self._write("ca.pem", self.cert.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: x509.Name, public_key: Any) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder().subject_name(subject).issuer_name(getattr(self, "name", subject))
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        )  # fmt: skip

    def issue(self, stem: str, server: bool) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)])
        builder = self._builder(subject, key.public_key())
        if server:
            san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file = self._write(f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())  # fmt: skip
        return cert_file, self._write(f"{stem}.key", key_pem)

    def _write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        return str(path)


def _events() -> list[bytes]:
    out = [b'data: {"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
           b'"delta":{"role":"assistant"},"finish_reason":null}]}\n\n']  # fmt: skip
    for word in ("hello", " over", " tls"):
        chunk = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}  # fmt: skip
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


class TLSUpstream:
    """An OpenAI-compatible SSE server: http.server + ssl, each handshake in the connection's own thread."""

    def __init__(self, ctx: ssl.SSLContext, close_each: bool) -> None:
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                if close_each:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                for event in _events():
                    self.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.server = LoopbackHTTPS(ctx, Handler)
        self.url = f"https://127.0.0.1:{self.server.port}"

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def ca(tmp_path: Path) -> CA:
    return CA(tmp_path)


def server_context(ca: CA, require_client_cert: bool = False) -> ssl.SSLContext:
    cert, key = ca.issue("server", server=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    if require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(ca.ca_file)
    return ctx


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


def tls_pool(*urls: str, extra: str = "") -> str:
    members = "".join(f'[[pool.member]]\nurl = "{u}"\n' for u in urls)
    return f'[[pool]]\nname = "default"\n{extra}\n{members}'


def test_an_https_member_streams_to_the_openai_client_and_resumes_tls_sessions(svc: Services, ca: CA) -> None:
    upstream = TLSUpstream(server_context(ca), close_each=True)  # a new connection (and handshake) per request
    try:
        metrics_port = free_port()
        gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n'
                         + tls_pool(upstream.url, extra=f'ca_file = "{ca.ca_file}"'))  # fmt: skip
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        for _ in range(4):
            stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                    stream=True)  # fmt: skip
            text = "".join(part.choices[0].delta.content or "" for part in stream)
            assert text == "hello over tls"
        assert upstream.requests == 4
        murl = f"http://127.0.0.1:{metrics_port}/metrics"
        assert metric(murl, 'tokenpath_gateway_upstream_tls_handshakes_total{pool="default",resumed="false"}') == 1
        assert metric(murl, 'tokenpath_gateway_upstream_tls_handshakes_total{pool="default",resumed="true"}') == 3
    finally:
        upstream.close()


def test_keep_alive_over_tls_pays_one_handshake(svc: Services, ca: CA) -> None:
    upstream = TLSUpstream(server_context(ca), close_each=False)
    try:
        metrics_port = free_port()
        gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n'
                         + tls_pool(upstream.url, extra=f'ca_file = "{ca.ca_file}"'))  # fmt: skip
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        for _ in range(5):
            parser, data = roundtrip(gw.url, request(body, headers="Connection: close\r\n"))
            assert parser.head is not None
            assert parser.head.status == 200
            assert data.endswith(b"data: [DONE]\n\n")
        murl = f"http://127.0.0.1:{metrics_port}/metrics"
        assert metric(murl, "tokenpath_gateway_upstream_tls_handshakes_total") == 1
    finally:
        upstream.close()


def test_a_certificate_failure_is_a_connect_error_failed_over_and_named(svc: Services, ca: CA, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other = CA(tmp_path / "other", "a CA the gateway does not trust")
    untrusted = TLSUpstream(server_context(other), close_each=False)
    trusted = TLSUpstream(server_context(ca), close_each=False)
    try:
        metrics_port = free_port()
        gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n'
                         + tls_pool(untrusted.url, trusted.url, extra=f'ca_file = "{ca.ca_file}"'))  # fmt: skip
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        for _ in range(2):  # round robin: one of the two starts at the untrusted member
            parser, data = roundtrip(gw.url, request(body, headers="Connection: close\r\n"))
            assert parser.head is not None
            assert parser.head.status == 200
        assert untrusted.requests == 0  # no request is ever sent over a connection that failed verification
        assert trusted.requests == 2
        murl = f"http://127.0.0.1:{metrics_port}/metrics"
        assert metric(murl, 'tokenpath_gateway_errors_total{reason="tls"}') >= 1
        assert wait_for_log(gw, "certificate verify failed")

        only_untrusted = svc.gateway(tls_pool(untrusted.url, extra=f'ca_file = "{ca.ca_file}"'))
        parser, data = roundtrip(only_untrusted.url, request(body, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 502
        assert b"certificate" not in data  # the reason is the operator's (log, metrics), not the client's
    finally:
        untrusted.close()
        trusted.close()


def test_mtls_members_get_the_client_certificate(svc: Services, ca: CA) -> None:
    upstream = TLSUpstream(server_context(ca, require_client_cert=True), close_each=False)
    cert, key = ca.issue("gateway-client", server=False)
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        without = svc.gateway(tls_pool(upstream.url, extra=f'ca_file = "{ca.ca_file}"'))
        parser, _ = roundtrip(without.url, request(body, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 502  # the server refused the handshake
        extra = f'ca_file = "{ca.ca_file}"\nclient_cert = "{cert}"\nclient_key = "{key}"'
        with_cert = svc.gateway(tls_pool(upstream.url, extra=extra))
        parser, data = roundtrip(with_cert.url, request(body, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 200
        assert data.endswith(b"data: [DONE]\n\n")
        assert upstream.requests == 1
    finally:
        upstream.close()


def test_a_tls_member_that_stalls_the_handshake_is_a_connect_timeout(svc: Services, ca: CA) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts, never answers the ClientHello
    try:
        url = f"https://127.0.0.1:{listener.getsockname()[1]}"
        gw = svc.gateway("[limits]\nconnect_timeout_s = 0.5\n" + tls_pool(url, extra=f'ca_file = "{ca.ca_file}"'))
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        t0 = time.monotonic()
        parser, _ = roundtrip(gw.url, request(body, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 504
        assert time.monotonic() - t0 < 3
    finally:
        listener.close()
