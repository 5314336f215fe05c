"""The compressing controls as pure logic: request bytes, upstream reads and EOF in; writes and `done` out."""

from __future__ import annotations

import random

import pytest

from tests.wire.battery import splits
from tokenpath.controls.compress import CompressPolicy
from tokenpath.errors import RemoteProtocolError
from tokenpath.wire.client import ClientConnection, Data, EndOfMessage, ResponseHead
from tokenpath.wire.contentcoding import decoder_for
from tokenpath.wire.framing import chunk

EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(4)]
PLAIN = b"".join(EVENTS)
CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Cache-Control: no-cache\r\nVary: Origin\r\n\r\n"
)
UPSTREAM = [CHUNKED_HEAD, *(chunk(e) for e in EVENTS), b"0\r\n\r\n"]


def request(accept_encoding: str | None = "gzip", method: str = "POST", version: str = "1.1") -> bytes:
    ae = f"Accept-Encoding: {accept_encoding}\r\n" if accept_encoding is not None else ""
    return f"{method} /v1/chat/completions HTTP/{version}\r\nHost: h\r\n{ae}Content-Length: 2\r\n\r\n{{}}".encode()


class Run:
    def __init__(self, flush: bool, req: bytes | None = None) -> None:
        self.writes: list[bytes] = []
        self.done = 0
        self.policy = CompressPolicy(lambda pieces: self.writes.append(b"".join(pieces)), flush, self._done)
        if req is not None:
            self.policy.observe_request(req)

    def _done(self) -> None:
        self.done += 1

    def feed(self, reads: list[bytes], eof: bool = False) -> Run:
        for read in reads:
            self.policy.feed(read)
        if eof:
            self.policy.finish()
        return self

    @property
    def wire(self) -> bytes:
        return b"".join(self.writes)


def parse(wire: bytes, method: str = "POST", eof: bool = False) -> tuple[ResponseHead, bytes, bool]:
    """The client's view: head, decoded body, whether the response ended."""
    conn = ClientConnection(method)
    conn.receive_data(wire)
    if eof:
        conn.receive_eof()
    head, body, ended = None, b"", False
    decoder = None
    while (event := conn.next_event()) is not None:
        if isinstance(event, ResponseHead):
            head = event
            decoder = decoder_for(event.header("content-encoding"))
        elif isinstance(event, Data):
            assert decoder is not None
            body += decoder.feed(event.data)
        elif isinstance(event, EndOfMessage):
            ended = True
            assert decoder is not None
            decoder.end()
    assert head is not None
    return head, body, ended


@pytest.mark.parametrize("flush", [False, True])
def test_the_body_is_gzipped_for_a_client_that_asked_at_every_split_of_the_upstream(flush: bool) -> None:
    raw = b"".join(UPSTREAM)
    for pieces in splits(raw):
        run = Run(flush, request()).feed(pieces)
        head, body, ended = parse(run.wire)
        assert (body, ended, run.done) == (PLAIN, True, 1)
        assert head.header("content-encoding") == "gzip"
        assert head.header("transfer-encoding") == "chunked"
        assert head.header("content-length") is None
        assert head.header("vary") == "Origin, Accept-Encoding"
        assert head.header("cache-control") == "no-cache"  # other headers kept
        assert head.header("connection") == "close"


def test_the_request_head_is_read_at_any_split() -> None:
    req = request("br;q=1, gzip;q=0.5")
    for pieces in splits(req):
        run = Run(True)
        for piece in pieces:
            run.policy.observe_request(piece)
        run.feed(UPSTREAM)
        assert parse(run.wire)[0].header("content-encoding") == "gzip"


def test_gzip_flush_sends_each_upstream_read_decodable_on_its_own() -> None:
    run = Run(True, request()).feed(UPSTREAM)
    assert len(run.writes) == len(UPSTREAM)  # one write per upstream read, none held
    decoder = decoder_for("gzip")
    conn = ClientConnection("POST")
    decoded_per_write = []
    for write in run.writes:
        conn.receive_data(write)
        got = b""
        while (event := conn.next_event()) is not None:
            if isinstance(event, Data):
                got += decoder.feed(event.data)
        decoded_per_write.append(got)
    assert decoded_per_write == [b"", *EVENTS, b""]


def test_gzip_hold_sends_nothing_of_the_body_until_the_compressor_emits_it() -> None:
    run = Run(False, request()).feed(UPSTREAM[:-1])
    # The head leaves with the first read; the events' bytes stay in the compressor (a gzip header at most).
    head, body, ended = parse(run.wire)
    assert head.header("content-encoding") == "gzip"
    assert (body, ended, run.done) == (b"", False, 0)
    run.feed(UPSTREAM[-1:])
    assert parse(run.wire)[1:] == (PLAIN, True)
    assert run.done == 1


def test_gzip_hold_lets_a_full_compressor_block_out_before_the_end() -> None:
    """Incompressible events fill zlib's buffer: bytes leave mid-stream when the compressor emits them."""
    rng = random.Random(0)
    big = [b"data: %s\n\n" % rng.randbytes(4000).hex().encode() for _ in range(40)]
    upstream = [CHUNKED_HEAD, *(chunk(e) for e in big)]
    run = Run(False, request()).feed(upstream)
    assert len(run.wire) > 1000
    assert len(run.writes) < len(upstream)


@pytest.mark.parametrize("flush", [False, True])
@pytest.mark.parametrize("accept", [None, "", "br, zstd", "gzip;q=0", "identity"])
def test_a_client_that_did_not_ask_for_gzip_gets_every_byte_unchanged(flush: bool, accept: str | None) -> None:
    run = Run(flush, request(accept)).feed(UPSTREAM, eof=True)
    assert run.writes == UPSTREAM
    assert run.done == 0


@pytest.mark.parametrize("accept", ["gzip", "GZIP", "deflate, gzip;q=0.1", "*", "x-gzip", "br, *;q=0.5"])
def test_accept_encoding_that_accepts_gzip_compresses(accept: str) -> None:
    run = Run(True, request(accept)).feed(UPSTREAM)
    assert parse(run.wire)[0].header("content-encoding") == "gzip"


def test_an_already_encoded_response_goes_through_unchanged() -> None:
    head = CHUNKED_HEAD.replace(b"Cache-Control", b"Content-Encoding: br\r\nCache-Control")
    upstream = [head, chunk(b"\x0b\x02\x80hi\x03")]
    run = Run(True, request()).feed(upstream)
    assert run.writes == upstream


def test_a_bodiless_response_goes_through_unchanged() -> None:
    upstream = [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"]
    run = Run(True, request(method="HEAD")).feed(upstream)
    assert run.writes == upstream
    upstream = [b"HTTP/1.1 204 No Content\r\n\r\n"]
    assert Run(True, request()).feed(upstream).writes == upstream


def test_a_length_delimited_response_loses_its_length() -> None:
    upstream = [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n", b"hel", b"lo"]
    run = Run(True, request()).feed(upstream)
    head, body, ended = parse(run.wire)
    assert head.header("content-length") is None
    assert (body, ended, run.done) == (b"hello", True, 1)


def test_a_close_delimited_upstream_body_ends_at_eof() -> None:
    upstream = [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", *EVENTS]
    run = Run(False, request()).feed(upstream)
    assert run.done == 0
    run.feed([], eof=True)
    assert parse(run.wire)[1:] == (PLAIN, True)
    assert run.done == 1


def test_an_http10_client_gets_a_close_delimited_body() -> None:
    run = Run(True, request(version="1.0")).feed(UPSTREAM)
    head, body, _ = parse(run.wire, eof=True)
    assert head.header("transfer-encoding") is None
    assert head.header("content-encoding") == "gzip"
    assert body == PLAIN
    assert run.done == 1  # the relay closes the connection: that is the body's end


def test_an_upstream_cut_mid_body_is_cut_for_the_client_too() -> None:
    run = Run(True, request()).feed(UPSTREAM[:3], eof=True)
    assert run.done == 1
    assert not run.wire.endswith(b"0\r\n\r\n")
    with pytest.raises(RemoteProtocolError, match=r"closed in the middle"):
        parse(run.wire, eof=True)


def test_upstream_bytes_that_are_not_http_go_through_unchanged() -> None:
    run = Run(True, request()).feed([b"SSH-2.0-OpenSSH\r\n", b"more"], eof=True)
    assert run.writes == [b"SSH-2.0-OpenSSH\r\n", b"more"]
    assert run.done == 0


def test_a_request_that_is_not_http_means_pass() -> None:
    run = Run(True, b"\x16\x03\x01garbage\r\n\r\n").feed(UPSTREAM)
    assert run.writes == UPSTREAM


def test_nothing_is_written_after_the_compressed_response() -> None:
    run = Run(True, request()).feed([*UPSTREAM, b"HTTP/1.1 200 OK\r\n"])
    assert run.done == 1
    assert parse(run.wire)[1:] == (PLAIN, True)
    count = len(run.writes)
    run.feed([b"more"], eof=True)
    assert len(run.writes) == count
