"""wire/h2head.py's response_head: the one mapping of an HTTP/2 response's fields to a ResponseHead, read by the
client core (wire/h2client.py), so by every HTTP/2 client of ours."""

from __future__ import annotations

import pytest

from tests.wire.test_h2client import Server
from tokenpath.wire.framing import Framing
from tokenpath.wire.h2client import H2ClientConnection
from tokenpath.wire.h2events import HeadReceived
from tokenpath.wire.h2head import response_head

SSE = [(b":status", b"200"), (b"content-type", b"text/event-stream")]


@pytest.mark.parametrize(
    ("method", "fields", "framing"),
    [
        ("POST", SSE, Framing.CHUNKED),
        ("POST", [*SSE, (b"content-length", b"5")], Framing.LENGTH),
        ("HEAD", [*SSE, (b"content-length", b"5")], Framing.NONE),
        ("GET", [(b":status", b"204")], Framing.NONE),
        ("GET", [(b":status", b"304"), (b"content-length", b"9")], Framing.NONE),
    ],
)
def test_the_framing_follows_the_method_and_status(
    method: str, fields: list[tuple[bytes, bytes]], framing: Framing
) -> None:
    head = response_head(fields, method)
    assert head.framing is framing
    assert head.http_version == "2"


def test_pseudo_fields_are_left_out_and_names_kept() -> None:
    head = response_head([*SSE, (b"x-request-id", b"r1")], "POST")
    assert head.status == 200
    assert head.headers == (("content-type", "text/event-stream"), ("x-request-id", "r1"))


def test_the_client_reads_a_head_answer_by_its_streams_method() -> None:
    client = H2ClientConnection(authority="example.test")
    server = Server()
    sid = client.open_stream("HEAD", "/v1/models")
    server.feed(client.data_to_send())
    server.h2.send_headers(sid, [*SSE, (b"content-length", b"100")], end_stream=True)
    heads = [e for e in client.receive(server.take(), 0) if isinstance(e, HeadReceived)]
    assert [h.head.framing for h in heads] == [Framing.NONE]
