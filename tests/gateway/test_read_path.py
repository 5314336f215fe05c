"""Issue 39's cuts on the per-read path keep their rules: a TLS read is one record read when that is all that came
(gateway/tls.py), and every record when more came in one socket read; a body handed straight from the client core to
the sink (gateway/upstream.py) stops at once when the connection is dropped in the middle of a read."""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path
from typing import Any

import pytest

from tokenpath.gateway.failures import Failure
from tokenpath.gateway.link import Origin
from tokenpath.gateway.tls import TLSClient
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.client import ResponseHead


class _Server:
    """The member's side of TLS over memory BIOs."""

    def __init__(self, cert: Path, key: Path) -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)

    def receive(self, data: bytes) -> bytes:
        self.incoming.write(data)
        with contextlib.suppress(ssl.SSLWantReadError):
            self.obj.do_handshake()
        return self.outgoing.read()

    def records(self, *plain: bytes) -> bytes:
        for data in plain:
            self.obj.write(data)  # one record each
        return self.outgoing.read()


def _handshaken(tmp_path: Path) -> tuple[TLSClient, _Server]:
    files = self_signed(tmp_path, ["127.0.0.1"])
    ctx = ssl.create_default_context(cafile=str(files.cert))
    client = TLSClient(ctx, "127.0.0.1", None)
    server = _Server(files.cert, files.key)
    to_server = client.start()
    while not client.handshaken:
        plain, reply = client.receive(server.receive(to_server))
        assert plain == b""
        to_server = reply
    tickets = server.receive(to_server)  # TLS 1.3's session tickets, after the handshake
    assert client.receive(tickets)[0] == b""
    return client, server


@pytest.mark.parametrize("private", [True, False], ids=["sslobj", "public-read"])
def test_a_tls_read_of_one_record_is_read_whole_and_of_several_records_is_read_whole_too(
    tmp_path: Path, private: bool
) -> None:
    """Both ways TLSClient reads a record: the _ssl object's read where CPython has it, SSLObject.read otherwise (the
    fallback, forced here)."""
    client, server = _handshaken(tmp_path)
    if not private:
        client._read = client.obj.read  # as where SSLObject has no _sslobj
    assert (getattr(client._read, "__self__", None) is client.obj) is not private
    assert client.receive(server.records(b"data: 1\n\n")) == (b"data: 1\n\n", b"")
    three = server.records(b"data: 2\n\n", b"data: 3\n\n", b"data: 4\n\n")  # one socket read, three records
    assert client.receive(three)[0] == b"data: 2\n\ndata: 3\n\ndata: 4\n\n"
    three = server.records(b"data: 5\n\n", b"data: 6\n\n", b"data: 7\n\n")
    half = len(three) // 2  # a read that ends inside a record: what is whole now, the rest with the next read
    first, _ = client.receive(three[:half])
    second, _ = client.receive(three[half:])
    assert (first, second) == (b"data: 5\n\n", b"data: 6\n\ndata: 7\n\n")
    assert not client.closed_by_peer
    last = server.records(b"data: [DONE]\n\n")
    with pytest.raises(ssl.SSLWantReadError):
        server.obj.unwrap()  # the member's close_notify, in the same socket read as its last record
    plain, _ = client.receive(last + server.outgoing.read())
    assert plain == b"data: [DONE]\n\n"
    assert client.closed_by_peer


class _Link:
    """What UpstreamConnection needs of its link, with no socket."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.tls = None
        self.aborted = False
        self.written = b""

    def settle(self, failure: Failure | None) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True

    @property
    def closed_by_peer(self) -> bool:
        return False


class _AbortingSink:
    """Drops the connection on the first body bytes it gets (a relay failure, a client gone: the exchange ends)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.conn: UpstreamConnection | None = None

    def upstream_head(self, head: ResponseHead) -> None:
        pass

    def upstream_body(self, data: bytes) -> None:
        self.bodies.append(data)
        assert self.conn is not None
        self.conn.abort()

    def upstream_read_done(self) -> None:
        pass

    def upstream_complete(self) -> None:
        pass

    def upstream_lost(self, failure: Failure) -> None:
        pass


def test_a_connection_dropped_inside_a_read_hands_its_sink_no_more_of_that_read() -> None:
    pool = ConnectionPool("127.0.0.1", 9)
    assert isinstance(pool.origin, Origin)
    link = _Link()
    conn = UpstreamConnection(pool, link)  # type: ignore[arg-type]
    sink = _AbortingSink()
    sink.conn = conn
    conn.send(sink, b"GET / HTTP/1.1\r\nHost: m\r\n\r\n", "GET")
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    conn.received(head + b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n")  # two chunks in one read; the first aborts
    assert sink.bodies == [b"ab"]
    assert link.aborted
