"""wire/h2status.py: the first final :status in a server's HTTP/2 bytes, at every split, through 1xx heads and the
HPACK dynamic table, and given up (never guessed) on what it cannot or will not read."""

from __future__ import annotations

import h2.config
import h2.connection
import pytest
from hyperframe.frame import ContinuationFrame, HeadersFrame

from tests.wire.battery import splits
from tokenpath.wire.h2client import H2ClientConnection
from tokenpath.wire.h2status import MAX_SNIFF_BYTES, H2StatusSniffer


def server_bytes(status: bytes, *, informational: bytes | None = None, body: bytes = b"") -> bytes:
    """What the h2 library's server writes answering one request with `status` (after an optional 1xx head)."""
    client = H2ClientConnection(authority="a:1")
    sid = client.open_stream("POST", "/v1", [("content-type", "application/json")], b"{}")
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    if informational is not None:
        server.send_headers(sid, [(b":status", informational), (b"link", b"</a.css>; rel=preload")])
    server.send_headers(sid, [(b":status", status), (b"content-type", b"application/json")], end_stream=not body)
    if body:
        server.send_data(sid, body, end_stream=True)
    return server.data_to_send()


def sniff(pieces: list[bytes]) -> int | None:
    sniffer = H2StatusSniffer()
    for piece in pieces:
        sniffer.feed(piece)
    return sniffer.status


@pytest.mark.parametrize("status", [b"200", b"429", b"503"])
def test_the_status_at_every_split(status: bytes) -> None:
    raw = server_bytes(status, body=b'{"error":"x"}')
    for pieces in splits(raw):
        assert sniff(pieces) == int(status)


def test_a_1xx_head_is_skipped_and_the_dynamic_table_is_followed() -> None:
    # The 103's fields go to the HPACK dynamic table: the answer's block is only readable with that state.
    raw = server_bytes(b"429", informational=b"103")
    assert sniff([raw]) == 429


def test_a_status_is_found_when_a_read_also_holds_far_more_data_than_it_sniffs() -> None:
    raw = server_bytes(b"200", body=b"x" * 16_000)
    assert sniff([raw + b"\0" * (2 * MAX_SNIFF_BYTES)]) == 200


def frame(f: HeadersFrame | ContinuationFrame) -> bytes:
    return bytes(f.serialize())


def test_what_it_will_not_read_leaves_the_status_unknown() -> None:
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
    endless = settings + b"".join(
        frame(ContinuationFrame(1, b"\x00" * 16_000)) for _ in range(6)
    )  # a HEADERS-less CONTINUATION run: gathered, bounded, never decoded
    head = HeadersFrame(1, b"\x3f\xe1\x1f" + b"\x00" * 100)  # a table size update past the 4,096 we allow
    head.flags.add("END_HEADERS")
    for raw in (
        endless,
        settings + frame(head),
        settings + b"\xff\xff\xff\x01\x04\x00\x00\x00\x01",  # a frame over 16 KiB
        b"HTTP/1.1 200 OK\r\n\r\n",
    ):
        sniffer = H2StatusSniffer()
        sniffer.feed(raw)
        sniffer.feed(server_bytes(b"200"))  # too late: given up, not guessed
        assert sniffer.status is None
