"""diagnose/limitprobe.py's Client: the API format and the HTTP version the timeouts survey asks in. A path sees the
format's route and reads its frames by the format's rule (an Anthropic stream ends whole on `message_stop`, which an
OpenAI reader would call a silent cut); `--http2` sends the HTTP/2 preface (h2c, prior knowledge) and a path that
cannot answer it is refused, never read over HTTP/1.1; through a real stub, each format's silence is survived and
an h2 stream ends by END_STREAM; an h2 stream cut (END_STREAM without the final event, a reset, a close) is never
complete."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import pytest

from tokenpath.diagnose.limitprobe import Client, Outcome, Target, run_stream
from tokenpath.diagnose.limits import Measure, SurveyConfig, pacing
from tokenpath.errors import HTTP2Unavailable, UsageError
from tokenpath.stub.config import StubConfig
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import BodyEnd, EndKind
from tokenpath.wire.httpversion import HttpVersion

ANTHROPIC_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","role":"assistant","content":[]}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SSE_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


class Recorded:
    """A scripted HTTP/1.1 peer that keeps the first bytes it was sent."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.first = b""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.first = await reader.read(65536)
            writer.write(self.answer)
            await writer.drain()
        finally:
            writer.close()

    def run(self, client: Client) -> Outcome:
        async def main() -> Outcome:
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                return await run_stream(Target.parse(f"http://127.0.0.1:{port}/v1"), {"ttft_ms": 0}, 5.0, client)

        return asyncio.run(main())


def test_the_anthropic_format_is_asked_on_its_route_and_ends_whole_on_message_stop() -> None:
    peer = Recorded(SSE_CLOSE + ANTHROPIC_STREAM)
    outcome = peer.run(Client(api=Api.ANTHROPIC))
    assert peer.first.startswith(b"POST /v1/messages HTTP/1.1\r\n")
    assert b"anthropic-version" in peer.first.lower()
    assert outcome.survived  # message_stop read as the format's final event
    # The same bytes read as OpenAI's are a silent cut: no [DONE].
    openai = Recorded(peer.answer)
    cut = openai.run(Client())
    assert openai.first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert cut.end is not None
    assert cut.end.kind is EndKind.CUT_SILENT


def test_http2_sends_the_preface_and_a_path_that_answers_in_http1_is_refused() -> None:
    peer = Recorded(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    with pytest.raises(HTTP2Unavailable):
        peer.run(Client(http_version=HttpVersion.HTTP2))
    assert peer.first.startswith(H2_PREFACE)


def test_http2_to_a_path_that_closes_on_the_preface_is_refused_by_name() -> None:
    peer = Recorded(b"")
    with pytest.raises(HTTP2Unavailable, match="drop --http2"):
        peer.run(Client(http_version=HttpVersion.HTTP2))


@pytest.mark.parametrize("api", [Api.ANTHROPIC, Api.BEDROCK, Api.OLLAMA, Api.GEMINI, Api.RESPONSES])
@pytest.mark.parametrize("version", [HttpVersion.HTTP11, HttpVersion.HTTP2])
def test_through_a_stub_each_formats_silence_is_survived(api: Api, version: HttpVersion) -> None:
    async def main() -> Outcome:
        stub = StubServer(StubConfig(port=0))
        await stub.start()
        try:
            keys = pacing(Measure.MID_STREAM, 0.2)  # a 200 ms silence after the first token, in the format's shape
            return await run_stream(Target.parse(stub.url), keys, 10.0, Client(api=api, http_version=version))
        finally:
            await stub.close()

    outcome = asyncio.run(main())
    assert outcome.survived, outcome.end
    assert outcome.end is not None
    assert outcome.end.at_ns is not None
    assert outcome.end.at_ns >= 0.2e9  # the stub held the silence
    if version is HttpVersion.HTTP2:
        assert outcome.end.how is BodyEnd.END_STREAM  # only HTTP/2 ends a body so
    else:
        assert outcome.end.how is not BodyEnd.END_STREAM


def test_keepalives_are_tried_only_where_the_format_has_one() -> None:
    url = ("http://127.0.0.1:1",)
    assert SurveyConfig(url).tries_keepalives
    assert SurveyConfig(url, api=Api.ANTHROPIC).tries_keepalives
    assert not SurveyConfig(url, api=Api.BEDROCK).tries_keepalives  # none in the event stream: not tried
    assert not SurveyConfig(url, keepalives=False).tries_keepalives
    with pytest.raises(UsageError, match="--keepalives: --api ollama"):
        SurveyConfig(url, api=Api.OLLAMA, keepalives=True)
    with pytest.raises(UsageError, match="HTTP/3"):
        SurveyConfig(url, http_version=HttpVersion.HTTP3)


CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


def h2_peer(end: str, data: bytes = CHUNK, api: Api = Api.OPENAI) -> Outcome:
    """An h2c server (the h2 library's state machine) that sends a head and one OpenAI chunk, then ends the stream
    by END_STREAM without [DONE] (`silent`), by RST_STREAM (`reset`), or closes the connection (`close`)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        conn.initiate_connection()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived) and event.stream_id is not None:
                        sid = event.stream_id
                        conn.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/event-stream")])
                        conn.send_data(sid, data, end_stream=end == "silent")
                        if end == "reset":
                            conn.reset_stream(sid)
                        writer.write(conn.data_to_send())
                        await writer.drain()
                        if end == "close":
                            return
                writer.write(conn.data_to_send())
                await writer.drain()
        finally:
            writer.close()

    async def main() -> Outcome:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = Client(api=api, http_version=HttpVersion.HTTP2)
            return await run_stream(Target.parse(f"http://127.0.0.1:{port}"), {}, 5.0, client)

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("end", "kind", "how"),
    [
        ("silent", EndKind.CUT_SILENT, BodyEnd.END_STREAM),  # END_STREAM without [DONE]: never complete
        ("reset", EndKind.CUT_ERROR, BodyEnd.RESET),
        ("close", EndKind.CUT_ERROR, BodyEnd.TRUNCATED),
    ],
)
def test_an_h2_stream_cut_is_classified_never_complete(end: str, kind: EndKind, how: BodyEnd) -> None:
    outcome = h2_peer(end)
    assert outcome.end is not None
    assert (outcome.end.kind, outcome.end.how) == (kind, how)
    assert not outcome.survived


# An event-stream message whose prelude CRC is wrong (Bedrock's framing): a path that broke the stream's frames.
BROKEN_EVENT = b"\x00\x00\x00\x20\x00\x00\x00\x00\xde\xad\xbe\xef" + b"\x00" * 20


@pytest.mark.parametrize("version", [HttpVersion.HTTP11, HttpVersion.HTTP2])
def test_a_stream_whose_frames_break_is_its_cut_error_in_either_version(version: HttpVersion) -> None:
    """The one read loop's rule for both versions: broken frames end that stream (cut_error, truncated), never the
    survey (an exception out of run_stream)."""
    if version is HttpVersion.HTTP2:
        outcome = h2_peer("close", BROKEN_EVENT, Api.BEDROCK)
    else:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\nConnection: close\r\n\r\n"
        outcome = Recorded(head + BROKEN_EVENT).run(Client(api=Api.BEDROCK))
    assert outcome.end is not None
    assert (outcome.end.kind, outcome.end.how) == (EndKind.CUT_ERROR, BodyEnd.TRUNCATED)
    assert "frames" in outcome.end.detail
