"""The protocol choice on a listener (serve.listener.Sniffer: ALPN over TLS, the preface in clear text), the TLS server
context, and the gateway's TLS keys in its config."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.serve.h2harness import FakeTransport, Recorder
from tests.wire.battery import splits
from tokenpath.errors import UsageError
from tokenpath.gateway import config as gwconfig
from tokenpath.serve.h2 import PREFACE, H2ServerConnection
from tokenpath.serve.http import HTTPConnection
from tokenpath.serve.listener import Sniffer, serve_factory
from tokenpath.serve.tlscert import self_signed
from tokenpath.serve.tlsserver import ALPN, server_context
from tokenpath.wire.limits import ServerLimits

LIMITS = ServerLimits(max_body_bytes=1000)


class FakeSSL:
    def __init__(self, alpn: str | None) -> None:
        self.alpn = alpn

    def selected_alpn_protocol(self) -> str | None:
        return self.alpn


def chosen(pieces: list[bytes], extra: dict[str, Any] | None = None) -> object:
    """The protocol the sniffer handed the transport to; the pieces after the choice go to that protocol."""

    async def main() -> object:
        sniffer = serve_factory(Recorder(), LIMITS)()
        assert isinstance(sniffer, Sniffer)
        transport = FakeTransport(extra)
        sniffer.connection_made(transport)
        for piece in pieces:
            target = transport.protocol if transport.protocol is not None else sniffer
            if piece:
                assert isinstance(target, asyncio.Protocol)
                target.data_received(piece)
        return transport.protocol

    return asyncio.run(main())


def test_the_preface_at_every_split_picks_http2_and_h2_gets_every_byte() -> None:
    raw = PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # the preface and an empty SETTINGS frame
    for pieces in splits(raw):
        proto = chosen(pieces)
        assert isinstance(proto, H2ServerConnection), pieces
        assert not proto.closed  # h2 accepted the preface it was handed whole


@pytest.mark.parametrize("raw", [b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", b"PRI * HTTP/1.1\r\n\r\n", b"P"])
def test_anything_else_is_http1(raw: bytes) -> None:
    pieces = [raw] if raw != b"P" else [b"P", b"OST / HTTP/1.1\r\n\r\n"]  # a prefix of the preface, then not
    proto = chosen(pieces)
    assert isinstance(proto, HTTPConnection)


@pytest.mark.parametrize(
    ("alpn", "kind"), [("h2", H2ServerConnection), ("http/1.1", HTTPConnection), (None, HTTPConnection)]
)
def test_tls_picks_by_alpn_before_any_byte(alpn: str | None, kind: type) -> None:
    proto = chosen([], {"ssl_object": FakeSSL(alpn)})
    assert isinstance(proto, kind)


def test_http1_only_when_http2_is_off() -> None:
    assert isinstance(serve_factory(Recorder(), LIMITS, None)(), HTTPConnection)


def test_server_context_offers_h2_then_http1_and_never_shows_the_key(tmp_path: Path) -> None:
    files = self_signed(tmp_path, ["127.0.0.1"])
    ctx = server_context(str(files.cert), str(files.key))
    assert ALPN == ["h2", "http/1.1"]
    assert ctx.minimum_version.name == "TLSv1_2"
    wrong = tmp_path / "wrong.pem"
    key_text = files.key.read_text()
    wrong.write_text(key_text.replace("A", "B", 5))  # a damaged key
    with pytest.raises(UsageError) as err:
        server_context(str(files.cert), str(wrong))
    assert "wrong.pem" in str(err.value)
    assert "PRIVATE KEY" not in str(err.value)
    assert key_text.splitlines()[1] not in str(err.value)


def test_gateway_config_tls_keys(tmp_path: Path) -> None:
    files = self_signed(tmp_path, ["127.0.0.1"])
    base: dict[str, Any] = {
        "pool": [{"name": "p", "member": [{"url": "http://127.0.0.1:1"}]}],
        "auth": {"mode": "none"},
    }
    cfg = gwconfig.from_dict({**base, "tls_cert": str(files.cert), "tls_key": str(files.key)})
    assert (cfg.tls_cert, cfg.tls_key) == (str(files.cert), str(files.key))
    over = gwconfig.Overrides(tls_cert=str(files.cert), tls_key=str(files.key)).apply(base)
    assert gwconfig.from_dict(over).tls_key == str(files.key)
    with pytest.raises(UsageError, match="both tls_cert and tls_key"):
        gwconfig.from_dict({**base, "tls_cert": str(files.cert)})
    with pytest.raises(UsageError, match="no such file"):
        gwconfig.from_dict({**base, "tls_cert": str(files.cert), "tls_key": str(tmp_path / "nope.pem")})
    limits = gwconfig.from_dict({**base, "limits": {"h2_max_concurrent_streams": 7}}).limits
    assert limits.h2_max_concurrent_streams == 7
    with pytest.raises(UsageError, match="h2_max_concurrent_streams"):
        gwconfig.from_dict({**base, "limits": {"h2_max_concurrent_streams": 0}})


def test_a_connection_that_sends_nothing_is_closed_at_the_request_timeout() -> None:
    async def main() -> FakeTransport:
        sniffer = serve_factory(Recorder(), ServerLimits(max_body_bytes=10, request_timeout_s=0.01))()
        transport = FakeTransport()
        sniffer.connection_made(transport)
        sniffer.data_received(PREFACE[:5])  # a prefix of the preface: still undecided
        for _ in range(200):  # bounded: 2 s at most
            await asyncio.sleep(0.01)
            if transport.closed:
                break
        return transport

    transport = asyncio.run(main())
    assert transport.closed
    assert transport.protocol is None  # never handed to a protocol
