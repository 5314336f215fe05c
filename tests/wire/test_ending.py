"""wire/ending.py: how a stream ended, from what its last frames said (FrameReader.last_word, the rule the gateway's
relay shares) and how HTTP ended its body. Every format's stream cut at every byte, each transport end."""

from __future__ import annotations

import contextlib
import ssl

import pytest

from tokenpath.errors import (
    ConnectError,
    ContentEncodingError,
    HTTPStatusError,
    NetworkError,
    PeerTimeout,
    RemoteProtocolError,
    StreamFormatError,
)
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import (
    RULES,
    STREAM_END,
    BodyEnd,
    EndKind,
    LastWord,
    StreamEnd,
    body_end,
    broken_by,
    classify_end,
)
from tokenpath.wire.framing import Framing
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import WireFrame, frame_reader

from .battery import splits
from .samples import ERRORS, STREAMS, sse

NORMAL_ENDS = [how for how in BodyEnd if how.normal]
BROKEN_ENDS = [BodyEnd.TRUNCATED, BodyEnd.RESET]


def final_event_end(api: Api) -> int:
    """Where the format's final event ends in its sample stream, found by the frames' own bytes (not by last_word)."""
    body, kinds = STREAMS[api]
    reader = frame_reader(api)
    frames = [*reader.feed(body), *reader.close()]
    assert len(frames) == len(kinds)
    offset = 0
    final = None
    for frame in frames:
        offset += len(frame.raw)
        if reader.ends(frame) and final is None:
            # A CR is a line end in SSE: an event ended by CRLF CRLF is whole at its last CR.
            # An NDJSON line is whole at its closing brace (JSON Lines: the last line end is optional).
            final = offset - 1 if frame.raw.endswith(b"\r\n\r\n") or api is Api.OLLAMA else offset
    assert final is not None
    return final


def said_by_prefix(api: Api, prefix: bytes, pieces: list[bytes] | None = None) -> LastWord:
    """What a body that ended after `prefix` said, read as a client reads it: fed in pieces, then closed (a frame
    cut short raises at close: no frame)."""
    reader = frame_reader(api)
    frames: list[WireFrame] = []
    for piece in pieces if pieces is not None else [prefix]:
        frames.extend(reader.feed(piece))
    with contextlib.suppress(StreamFormatError):
        frames.extend(reader.close())
    return reader.last_word(frames)


def classify(said: LastWord, how: BodyEnd) -> StreamEnd:
    return classify_end(said, how, sent_ns=1_000, end_ns=9_000, last_byte_ns=4_000)


def test_rules_cover_every_case_and_say_only_a_final_event_is_complete() -> None:
    assert set(RULES) == {(said, normal) for said in LastWord for normal in (True, False)}
    for (said, normal), kind in RULES.items():
        # complete: the final event, or bare frames (no format: no final event) that HTTP ended normally
        assert (kind is EndKind.COMPLETE) == (said is LastWord.FINAL or (said is LastWord.UNFRAMED and normal))
        if said is LastWord.NOTHING:
            assert kind is (EndKind.CUT_SILENT if normal else EndKind.CUT_ERROR)


@pytest.mark.parametrize("api", list(Api))
def test_a_stream_cut_at_every_byte_is_complete_only_after_its_final_event(api: Api) -> None:
    body, _ = STREAMS[api]
    final = final_event_end(api)
    for cut in range(len(body) + 1):
        said = said_by_prefix(api, body[:cut])
        for how in NORMAL_ENDS:
            end = classify(said, how)
            expected = EndKind.COMPLETE if cut >= final else EndKind.CUT_SILENT
            assert end.kind is expected, (api, cut, how)
        for how in BROKEN_ENDS:
            assert classify(said, how).kind is (EndKind.COMPLETE if cut >= final else EndKind.CUT_ERROR), (api, cut)
        assert classify(said, BodyEnd.STATUS).kind is EndKind.CUT_ERROR  # an error status: no stream, whatever came


@pytest.mark.parametrize("api", list(Api))
def test_the_whole_stream_is_complete_however_it_was_split(api: Api) -> None:
    body, _ = STREAMS[api]
    for pieces in splits(body):
        assert said_by_prefix(api, body, pieces) is LastWord.FINAL, (api, [len(p) for p in pieces])


@pytest.mark.parametrize("api", list(Api))
def test_the_formats_error_frame_is_a_cut_error_however_the_body_ended(api: Api) -> None:
    body, _ = STREAMS[api]
    final = final_event_end(api)
    head = body[: final // 2]
    reader = frame_reader(api)
    whole_head = b"".join(frame.raw for frame in reader.feed(head))  # the error follows whole frames
    for error in ERRORS[api]:
        said = said_by_prefix(api, whole_head + error)
        assert said is LastWord.ERROR, (api, error)
        for how in BodyEnd:
            assert classify(said, how).kind is EndKind.CUT_ERROR, (api, how)


def test_frames_after_the_final_event_change_nothing() -> None:
    body, _ = STREAMS[Api.OPENAI]
    keepalive = b": keep-alive\n\n"
    assert said_by_prefix(Api.OPENAI, body + keepalive) is LastWord.FINAL
    # ... but an error after it is the last word: the server said the stream failed.
    assert said_by_prefix(Api.OPENAI, body + ERRORS[Api.OPENAI][0]) is LastWord.ERROR


def test_a_keepalive_is_no_end() -> None:
    ping = sse({"type": "ping"}, "ping")
    assert said_by_prefix(Api.ANTHROPIC, ping) is LastWord.NOTHING
    assert said_by_prefix(Api.OPENAI, b": keep-alive\n\n") is LastWord.NOTHING
    keepalive = sse({"type": "keepalive", "sequence_number": 3}, "keepalive")
    assert said_by_prefix(Api.RESPONSES, keepalive) is LastWord.NOTHING
    [frame] = frame_reader(Api.RESPONSES).feed(keepalive)
    assert frame_reader(Api.RESPONSES).kind(frame) is FrameKind.CONTROL  # the API's own: no content, not foreign


@pytest.mark.parametrize("api", list(Api))
def test_tail_reads_the_same_end_as_every_frame_at_every_cut(api: Api) -> None:
    body, _ = STREAMS[api]
    # A long stream before it (no end among its frames), so tail must find the end without reading the start.
    reader = frame_reader(api)
    filler = b"".join(frame.raw for frame in reader.feed(body) if not reader.ends(frame)) * 10
    for cut in range(len(body) + 1):
        prefix = filler + body[:cut]
        reader = frame_reader(api)
        # The filler ends at a frame's end and holds no end: what the prefix says is what body[:cut] says.
        assert reader.last_word(reader.tail(prefix)) is said_by_prefix(api, body[:cut]), (api, cut)


def test_tail_grows_its_window_for_a_large_final_event() -> None:
    text = "x" * 50_000  # response.completed repeats the whole answer
    completed = sse({"type": "response.completed", "response": {"output_text": text}}, "response.completed")
    delta = sse({"type": "response.output_text.delta", "delta": "Hello"}, "response.output_text.delta")
    reader = frame_reader(Api.RESPONSES)
    assert reader.last_word(reader.tail(delta * 100 + completed)) is LastWord.FINAL
    assert reader.last_word(reader.tail(delta * 100 + completed[:-1])) is LastWord.NOTHING


def test_tail_of_an_ndjson_body_whose_last_line_has_no_line_end() -> None:
    body, _ = STREAMS[Api.OLLAMA]
    reader = frame_reader(Api.OLLAMA)
    assert reader.last_word(reader.tail(body.rstrip(b"\n"))) is LastWord.FINAL
    assert reader.last_word(reader.tail(body[:-3])) is LastWord.NOTHING  # cut inside the last line


def test_tail_of_garbage_is_no_frame() -> None:
    reader = frame_reader(Api.BEDROCK)
    assert list(reader.tail(b"\x00" * 64)) == []
    assert reader.last_word(reader.tail(b"")) is LastWord.NOTHING


def test_times_from_the_request_and_the_last_byte() -> None:
    end = classify_end(LastWord.NOTHING, BodyEnd.CLOSE, sent_ns=1_000_000, end_ns=61_000_000, last_byte_ns=60_000_000)
    assert (end.kind, end.at_ns, end.since_last_byte_ns) == (EndKind.CUT_SILENT, 60_000_000, 1_000_000)
    assert end.cut
    assert not end.complete
    assert "cut_silent (close) 60.0 ms after the request, 1.0 ms after the last byte" in end.describe()
    nothing_came = classify_end(LastWord.NOTHING, BodyEnd.RESET, sent_ns=None, end_ns=5, last_byte_ns=None)
    assert (nothing_came.at_ns, nothing_came.since_last_byte_ns) == (None, None)
    assert StreamEnd.from_json(end.to_json()) == end
    assert StreamEnd.from_json(nothing_came.to_json()) == nothing_came


def test_a_status_ignores_what_frames_said() -> None:
    assert classify(LastWord.FINAL, BodyEnd.STATUS).kind is EndKind.CUT_ERROR


@pytest.mark.parametrize(
    ("framing", "how"),
    [(Framing.CHUNKED, BodyEnd.CHUNKED), (Framing.CLOSE, BodyEnd.CLOSE), (Framing.LENGTH, BodyEnd.LENGTH)],
)
def test_body_end_of_each_framing(framing: Framing, how: BodyEnd) -> None:
    assert body_end(framing) is how


def test_broken_by_each_error() -> None:
    assert broken_by(ConnectionResetError()) is BodyEnd.RESET
    assert broken_by(ssl.SSLError()) is BodyEnd.RESET
    assert broken_by(NetworkError("reset")) is BodyEnd.RESET
    assert broken_by(RemoteProtocolError("no last chunk")) is BodyEnd.TRUNCATED
    assert broken_by(HTTPStatusError("502")) is BodyEnd.STATUS
    for no_end in (ConnectError("refused"), PeerTimeout("slow"), ValueError("x")):
        assert broken_by(no_end) is None
    truncated = ContentEncodingError("cut", reason="truncated")
    assert broken_by(truncated) is BodyEnd.TRUNCATED


def test_an_end_rides_on_the_error() -> None:
    end = classify(LastWord.NOTHING, BodyEnd.RESET)
    exc = STREAM_END.attach(NetworkError("reset"), end)
    assert STREAM_END.of(exc) is end
    assert STREAM_END.of(NetworkError("other")) is None


def test_bare_frames_have_no_final_event_so_the_body_s_end_ends_them() -> None:
    plain = b"data: 0 ....\n\ndata: 1\n\n"  # the stub's `format` plain: what the matrix paces by size
    said = said_by_prefix(Api.OPENAI, plain)
    assert said is LastWord.UNFRAMED
    assert classify(said, BodyEnd.CHUNKED).kind is EndKind.COMPLETE
    assert classify(said, BodyEnd.RESET).kind is EndKind.CUT_ERROR
    assert said_by_prefix(Api.OPENAI, plain + b": keep-alive\n\n") is LastWord.UNFRAMED  # a comment has no data
    # A format's own JSON frames are never bare: their stream is cut without its final event.
    assert said_by_prefix(Api.OPENAI, b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n') is LastWord.NOTHING
    bedrock, _ = STREAMS[Api.BEDROCK]
    assert said_by_prefix(Api.BEDROCK, bedrock[:200]) is LastWord.NOTHING  # only SSE data can be bare text
