"""The gateway's relay and the clients' classifier (wire/ending.py) read a stream's end by one rule
(FrameReader.last_word): for every format's sample stream cut at every byte and closed, the relay says "cut"
exactly when a client reading the same bytes would not call the stream complete (a frame the body ended inside is
the relay's own cut: it never sends half a frame)."""

from __future__ import annotations

import contextlib

import pytest

from tests.helpers import HTTP_APIS
from tests.wire.samples import STREAMS
from tokenpath.errors import StreamFormatError
from tokenpath.gateway.relay import Relay
from tokenpath.gateway.streamformat import for_response
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.ending import BodyEnd, EndKind, classify_end
from tokenpath.wire.reader import WireFrame, frame_reader


def client_end(api: Api, body: bytes) -> EndKind:
    reader = frame_reader(api)
    frames: list[WireFrame] = list(reader.feed(body))
    with contextlib.suppress(StreamFormatError):
        frames.extend(reader.close())
    return classify_end(reader.last_word(frames), BodyEnd.CLOSE, sent_ns=0, end_ns=1, last_byte_ns=0).kind


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_relay_cuts_by_a_close_exactly_what_a_client_would_not_call_complete(api: Api) -> None:
    stream = for_response(api, SPECS[api].content_type)
    assert stream is not None
    body, _ = STREAMS[api]
    for cut in range(len(body) + 1):
        relay = Relay(stream, chunked=False)
        relay.feed(body[:cut])
        held = relay.held
        _, said_cut = relay.finish(by_close=True)
        if held and said_cut is not None:  # part of a frame it cannot send: its own cut, whatever came before
            continue
        assert (said_cut is not None) == (client_end(api, body[:cut]) is not EndKind.COMPLETE), (api, cut)
