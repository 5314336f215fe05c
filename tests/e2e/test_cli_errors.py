"""Each probe failure is one clear line on stderr and its own exit code."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.e2e.conftest import Start
from tokenpath.serve.procs import tokenpath_argv

SSE_OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"
    b"data: 1\n\n\n"
)


def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        tokenpath_argv("probe", *args),
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def raw_server() -> Iterator[Callable[..., int]]:
    """A one-shot TCP server that answers every connection with fixed bytes (or nothing)."""
    socks: list[socket.socket] = []

    def start(reply: bytes | None, tls: ssl.SSLContext | None = None) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def serve() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                try:
                    if tls is not None:
                        conn = tls.wrap_socket(conn, server_side=True)
                    conn.recv(65536)
                    if reply is None:
                        socks.append(conn)  # hold it open, silent
                        continue
                    conn.sendall(reply)
                    conn.close()
                except (OSError, ssl.SSLError):
                    conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return int(srv.getsockname()[1])

    yield start
    for s in socks:
        s.close()


def self_signed(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)
    return ctx, cert_path


def test_connection_refused_exit_3() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        out = probe(f"http://127.0.0.1:{s.getsockname()[1]}")
    assert out.returncode == 3
    assert "cannot connect" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_non_2xx_exit_6_shows_body(service: Start) -> None:
    stub = service("stub", "--port", "0")
    out = probe(f"{stub.url}/nowhere/completions")
    assert out.returncode == 6
    assert "HTTP 404" in out.stderr
    assert "no route" in out.stderr


def test_non_sse_exit_7(raw_server: Callable[..., int]) -> None:
    port = raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    out = probe(f"http://127.0.0.1:{port}")
    assert out.returncode == 7
    assert "application/json" in out.stderr


def test_first_byte_timeout_exit_8(raw_server: Callable[..., int]) -> None:
    port = raw_server(None)
    out = probe(f"http://127.0.0.1:{port}", "--first-byte-timeout", "0.3")
    assert out.returncode == 8


def test_idle_timeout_exit_9(service: Start) -> None:
    stub = service("stub", "--port", "0", "--interval-ms", "3000", "--ttft-ms", "0", "--format", "plain")
    out = probe(stub.url or "", "--idle-timeout", "0.5")
    assert out.returncode == 9
    assert "after 1 frames" in out.stderr


def test_malformed_chunked_exit_10(raw_server: Callable[..., int]) -> None:
    port = raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    out = probe(f"http://127.0.0.1:{port}")
    assert out.returncode == 10
    assert "malformed" in out.stderr


def test_tls_self_signed_fails_then_works_with_cacert_or_insecure(
    raw_server: Callable[..., int], tmp_path: Path
) -> None:
    ctx, cert = self_signed(tmp_path)
    port = raw_server(SSE_OK, tls=ctx)
    url = f"https://127.0.0.1:{port}"
    failed = probe(url)
    assert failed.returncode == 5
    assert "--cacert" in failed.stderr
    assert probe(url, "--cacert", str(cert)).returncode == 0
    assert probe(url, "--insecure").returncode == 0


def test_missing_key_env_is_a_usage_error_and_keys_are_never_printed(raw_server: Callable[..., int]) -> None:
    out = probe("http://127.0.0.1:9", "--api-key-env", "NO_SUCH_VAR_TP")
    assert out.returncode == 2
    assert "NO_SUCH_VAR_TP" in out.stderr
    port = raw_server(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 3\r\n\r\nno!")
    secret = "sk-very-secret-123"
    out = probe(f"http://127.0.0.1:{port}", env={"TOKENPATH_API_KEY": secret})
    assert out.returncode == 6
    assert secret not in out.stdout + out.stderr


def test_url_from_env_and_missing_url() -> None:
    out = probe(env={"TOKENPATH_URL": ""})
    assert out.returncode == 2
    assert "TOKENPATH_URL" in out.stderr


def test_stub_rejects_frame_bytes_it_cannot_honour() -> None:
    out = subprocess.run(
        tokenpath_argv("stub", "--port", "0", "--frame-bytes", "60"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "--format plain" in out.stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("http://[::1",), "is not valid"),
        (("http://127.0.0.1:9", "--idle-timeout", "-1"), "--idle-timeout must be a number of seconds > 0"),
        (("http://127.0.0.1:9", "--total-timeout", "0"), "--total-timeout must be a number of seconds > 0"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: tuple[str, ...], text: str) -> None:
    out = probe(*args)
    assert out.returncode == 2, out.stderr
    assert text in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_a_gzip_response_is_decoded_and_an_unknown_coding_exits_15_naming_it(raw_server: Callable[..., int]) -> None:
    """nginx `gzip on` answering `--accept-encoding gzip`: decoded, its frames counted; a coding tokenpath does not
    decode is its own error (exit 15), not 0 frames and exit 0."""
    import gzip

    body = gzip.compress(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n')
    port = raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n%b" % (len(body), body))  # fmt: skip
    out = probe(f"http://127.0.0.1:{port}", "--accept-encoding", "gzip", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["content_encoding"] == "gzip"
    assert doc["runs"][0]["frames"] == 2
    port = raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: compress\r\n"
                      b"Content-Length: 3\r\nConnection: close\r\n\r\nabc")  # fmt: skip
    out = probe(f"http://127.0.0.1:{port}", "--accept-encoding", "compress")
    assert out.returncode == 15, out.stderr
    assert "'compress'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [(b"400 Bad Request", 12), (b"413 Content Too Large", 12), (b"401 Unauthorized", 6), (b"403 Forbidden", 6)],
)
def test_a_refused_request_exits_12_and_a_refused_caller_exits_6(
    raw_server: Callable[..., int], status: bytes, code: int
) -> None:
    """The README's table: 400/413/414/422/431 (the request was malformed or too large) exit 12 (BadRequest);
    401, 403 and every other non-2xx exit 6 (HTTPStatusError). Both show the body."""
    body = b'{"error": {"message": "the reason"}}'
    port = raw_server(b"HTTP/1.1 %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                      % (status, len(body), body))  # fmt: skip
    out = probe(f"http://127.0.0.1:{port}")
    assert out.returncode == code, out.stderr
    assert f"HTTP {status[:3].decode()}" in out.stderr
    assert "the reason" in out.stderr


def test_a_stream_in_another_api_format_reports_no_ttft_and_says_why(raw_server: Callable[..., int]) -> None:
    """An Anthropic stream: every frame is counted, but no TTFT is taken at its first (non-content) frame."""
    from tests.probe.hostile import ANTHROPIC_FRAMES

    port = raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n%b" % (len(ANTHROPIC_FRAMES), ANTHROPIC_FRAMES))  # fmt: skip
    out = probe(f"http://127.0.0.1:{port}", env={"COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    assert "no OpenAI content frame" in out.stdout
    assert "event: message_start" in out.stdout
