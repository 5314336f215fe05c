"""The recorder (origins/record.py) and the replayer (stub/replay.py), pure: a recorded answer read at every split of
its bytes, a replayed one parsed at every split, and the file's own checks."""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from tokenpath.errors import ResponseTooLarge, UsageError
from tokenpath.origins.behaviour import Http10Answer
from tokenpath.origins.record import RECORD_LIMITS, recording_from, redacted
from tokenpath.probe.trace import TraceLimits, TraceRecorder
from tokenpath.stub.replay import MAX_EVENTS, MAX_RECORDING_BYTES, Recording, load, plan
from tokenpath.wire.apis import Api
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.eventstream import event_message
from tokenpath.wire.framing import Framing, chunk
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import frame_reader

EVENTS = [
    b'data: {"choices":[{"delta":{"role":"assistant","content":null}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"One"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":", two \\u00e9"}}]}\n\n',
    b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Accel-Buffering: no\r\nDate: today\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
BODY = b"".join(chunk(e) for e in EVENTS) + b"0\r\n\r\n"
ANSWER = Http10Answer(200, Framing.CHUNKED, (("X-Accel-Buffering", "no"),), 0)


def recorded(reads: list[bytes]) -> Recording:
    recorder = TraceRecorder("s", 0, api=Api.OPENAI)
    for k, data in enumerate(reads):
        recorder.on_read((k + 1) * 1_000_000, data)
    return recording_from(recorder.trace, ANSWER, name="t", api=Api.OPENAI, source={})


def test_the_recorder_keeps_every_event_exact_at_every_split() -> None:
    raw = HEAD + BODY
    whole = recorded([raw])
    assert [e.kind for e in whole.events] == [
        FrameKind.CONTROL,
        FrameKind.CONTENT,
        FrameKind.CONTENT,
        FrameKind.CONTROL,
        FrameKind.DONE,
    ]
    sizes = [len(e) for e in EVENTS]
    assert [len(e.data) for e in whole.events] == sizes  # redacted to the same size
    assert b"One" not in b"".join(e.data for e in whole.events)
    assert whole.headers == (("X-Accel-Buffering", "no"),)  # no Date, and no framing or Content-Type among them
    assert whole.content_type == "text/event-stream"
    assert whole.http10_framing == "chunked"
    assert len(whole.writes) == 1  # one read: one write
    for cut in range(1, len(raw)):
        split = recorded([raw[:cut], raw[cut:]])
        assert split.events == whole.events, cut
        assert sum(len(w.events) for w in split.writes) == len(EVENTS)
        assert 1 <= len(split.writes) <= 2  # a read that completes events is a write, at its time
        assert [w.at_ms for w in split.writes] == sorted(w.at_ms for w in split.writes)


def test_redaction_keeps_sizes_and_escapes() -> None:
    raw = EVENTS[2]
    hidden, whole = redacted(raw, raw.removeprefix(b"data: ").rstrip())
    assert whole
    assert len(hidden) == len(raw)
    assert b"two" not in hidden
    assert json.loads(hidden.removeprefix(b"data: "))["choices"][0]["delta"]["content"].strip("x") == ""


def replayed_events(wire: bytes) -> list[bytes]:
    parser = ResponseParser("POST")
    reader = frame_reader(Api.OPENAI)
    body = parser.feed(wire)
    return [f.raw for f in reader.feed(body)]


@pytest.mark.parametrize("chunked", [True, False])
def test_the_replayer_writes_the_recording_exactly_at_every_split(chunked: bool) -> None:
    recording = recorded([HEAD + BODY[:40], BODY[40:100], BODY[100:]])
    p = plan(recording, chunked)
    assert p.sizes == [len(e.data) for e in recording.events]
    assert len(p.offsets) == len(p.wire) == len(recording.events)
    # One socket write per recorded write, at its time: every event but a write's first is empty, at the same offset.
    starts = [i for i, w in enumerate(p.wire) if w]
    assert len(starts) == len(recording.writes)
    assert sorted(set(p.offsets)) == [round(w.at_ms * 1e6) for w in recording.writes]
    body = b"".join(p.wire)
    if chunked:
        assert body.endswith(b"0\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    else:
        assert body == b"".join(e.data for e in recording.events)
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    events = [e.data for e in recording.events]
    for cut in range(1, len(body)):
        parser = ResponseParser("POST")
        reader = frame_reader(Api.OPENAI)
        got = [f.raw for part in (head + body[:cut], body[cut:]) for f in reader.feed(parser.feed(part))]
        assert got == events, cut


def doc(**over: object) -> dict[str, object]:
    base: dict[str, object] = json.loads(recorded([HEAD + BODY]).dumps())
    return {**base, **over}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"version": 2}, "version 2"),
        ({"writes": []}, "no events"),
        (
            {"writes": [{"at_ms": 5, "events": []}, {"at_ms": 6, "events": [{"kind": "done", "data": "x"}]}]},
            "a write without events",
        ),
        ({"writes": [{"at_ms": -1, "events": [{"kind": "content", "data": "data: x\n\n"}]}]}, "write times"),
        ({"writes": [{"at_ms": "NaN", "events": [{"kind": "content", "data": "x"}]}]}, "not a time"),
        ({"http10_framing": "gzip"}, "http10_framing"),
        ({"headers": [["Transfer-Encoding", "chunked"]]}, "Transfer-Encoding"),
        ({"headers": [["X-Bad", "a\r\nInjected: 1"]]}, "X-Bad"),
        ({"api": "nope"}, "nope"),
        ({"content_type": "a\nb"}, "content_type"),
        ({"content_type": 5}, "content_type must be a string"),
        ({"name": 5}, "name must be a string"),
        ({"name": "a\r\nb<script>"}, "name must be one printable line"),
        ({"source": "xy"}, "source must be an object"),
        ({"source": 5}, "source must be an object"),
        ({"source": [1]}, "source must be an object"),
        ({"version": True}, "version True"),
        ({"version": 1.0}, "version 1.0"),
        ({"writes": "abc"}, "writes must be a list"),
        ({"writes": [{"at_ms": 5, "events": 5}]}, r"writes\[0\] must be an object"),
        ({"writes": [{"at_ms": 10**400, "events": [{"kind": "content", "data": "x"}]}]}, r"writes\[0\]\.at_ms"),
        ({"writes": [{"at_ms": True, "events": [{"kind": "content", "data": "x"}]}]}, r"at_ms True is not a time"),
        ({"writes": [{"at_ms": 5, "events": [{"kind": "zzz", "data": "x"}]}]}, "kind 'zzz'"),
        ({"writes": [{"at_ms": 5, "events": [{"kind": "control", "data": "x"}]}]}, "no event of kind 'content'"),
        ({"head_ms": -1}, "head_ms"),
        ({"head_ms": [1]}, "head_ms"),
        # Hand edits the stub used to send as they were (/tmp/review-timeouts/edits):
        ({"content_type": ""}, r"content_type is empty"),
        ({"content_type": " ; charset=utf-8"}, r"content_type is empty"),
        ({"api": "bedrock"}, r"content_type 'text/event-stream' is another format's; the bedrock API answers"),
        ({"content_type": "application/x-ndjson"}, r"content_type 'application/x-ndjson' is another format's"),
        (
            {"api": "bedrock", "content_type": "application/vnd.amazon.eventstream"},
            r"writes\[0\]\.events\[0\]\.data is not one eventstream frame of the bedrock API",
        ),
        (
            {"writes": [{"at_ms": 5, "events": [{"kind": "content", "data": "x"}]}]},
            r"writes\[0\]\.events\[0\]\.data is not one sse frame of the openai API",
        ),
        (
            {"writes": [{"at_ms": 5, "events": [{"kind": "content", "data": "data: a\n\ndata: b\n\n"}]}]},
            r"writes\[0\]\.events\[0\]\.data is not one sse frame",
        ),
        ({"api": "realtime"}, r"api realtime is WebSocket only"),
        ({"headers": [["X-A", 5]]}, r"headers\[0\] must be a \[name, value\] pair of strings, not \['X-A', 5\]"),
        ({"headers": [[7, "y"]]}, r"headers\[0\] must be a \[name, value\] pair of strings"),
        ({"head_ms": 3000}, r"head_ms 3000 is later than the first write's at_ms 1"),
    ],
)
def test_a_malformed_recording_is_one_usage_error(change: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        Recording.from_json(doc(**change))


def test_a_malformed_recording_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc(content_type="")))
    with pytest.raises(UsageError, match=r"^recording \S*edited\.json: content_type is empty") as e:
        load(path)
    assert "\n" not in str(e.value)


def test_a_content_type_with_parameters_or_of_no_known_format_is_kept() -> None:
    """A real server's own Content-Type is what the replay sends: only an empty one or another format's is refused."""
    for content_type in ("text/event-stream; charset=utf-8", "Text/Event-Stream", "text/plain"):
        assert Recording.from_json(doc(content_type=content_type)).content_type == content_type


def test_a_recorded_bedrock_stream_passes_the_frame_check() -> None:
    """A redacted event-stream message (the same size) is still one whole message, its CRC its bytes' again: what a
    client's CRC check of the replay reads."""
    messages = [
        event_message("messageStart", b'{"role":"assistant"}'),
        event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"Hello there"}}'),
        event_message("messageStop", b'{"stopReason":"end_turn"}'),
    ]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\nContent-Length: %d\r\n\r\n"
    recorder = TraceRecorder("s", 0, api=Api.BEDROCK)
    recorder.on_read(1_000_000, head % sum(map(len, messages)) + b"".join(messages))
    recording = recording_from(recorder.trace, ANSWER, name="b", api=Api.BEDROCK, source={})
    assert [len(e.data) for e in recording.events] == [len(m) for m in messages]
    assert b"Hello" not in recording.events[1].data  # redacted
    assert Recording.from_json(json.loads(recording.dumps())) == recording
    for event in recording.events:  # each message's CRC is its bytes' (the redacted one's too)
        (crc,) = struct.unpack(">I", event.data[-4:])
        assert crc == zlib.crc32(event.data[:-4])
    assert (
        len(frame_reader(Api.BEDROCK).feed(b"".join(e.data for e in recording.events))) == 3
    )  # the client's parser: no CRC error


def test_a_recording_survives_its_own_file() -> None:
    recording = recorded([HEAD + BODY[:40], BODY[40:]])
    assert Recording.from_json(json.loads(recording.dumps())) == recording


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 3000 + "1" + "}" * 3000])
def test_json_nested_too_deep_for_the_parser_is_one_usage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=r"deep\.json: not a recording \(JSON nested too deeply\)"):
        load(path)


def recorded_from(raw: bytes, limits: TraceLimits = RECORD_LIMITS) -> Recording:
    recorder = TraceRecorder("s", 0, limits, api=Api.OPENAI)
    recorder.on_read(1_000_000, raw)
    return recording_from(recorder.trace, ANSWER, name="t", api=Api.OPENAI, source={})


def test_a_stream_the_trace_did_not_keep_whole_is_refused_not_cut() -> None:
    assert RECORD_LIMITS.frames == MAX_EVENTS  # the trace keeps every event a replay takes, and no fewer
    assert RECORD_LIMITS.frame_bytes <= MAX_RECORDING_BYTES
    with pytest.raises(UsageError, match=r"sent 5 events and the trace kept 3; a recording holds at most 100000") as e:
        recorded_from(HEAD + BODY, replace(RECORD_LIMITS, frames=3))
    assert "\n" not in str(e.value)


def test_a_recording_too_large_for_the_replay_is_refused_when_recorded() -> None:
    event = b'data: {"choices":[{"delta":{"content":"' + b"b" * 2000 + b'"}}]}\n\n'
    body = b"".join(chunk(event) for _ in range(2040)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    assert 2040 * len(event) < MAX_RECORDING_BYTES  # the trace keeps it all: its file, escaped, is larger
    with pytest.raises(UsageError, match=r"recording t: \d+ bytes as a file, larger than the 4194304 bytes a replay"):
        recorded_from(HEAD + body)
    with pytest.raises(UsageError, match=r"larger than the 4194304 bytes a replay reads") as e:
        recorded_from(HEAD + body, replace(RECORD_LIMITS, frame_bytes=32 << 20))
    assert "\n" not in str(e.value)


def test_what_is_recorded_replays_from_its_file(tmp_path: Path) -> None:
    event = b'data: {"choices":[{"delta":{"content":"' + b"b" * 2000 + b'"}}]}\n\n'
    body = b"".join(chunk(event) for _ in range(1900)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    path = tmp_path / "r.json"
    path.write_text(recorded_from(HEAD + body).dumps())
    assert len(load(path).events) == 1901


def test_a_gzip_stream_is_recorded_decoded_and_without_its_encoding() -> None:
    z = zlib.compressobj(wbits=31)
    body = b"".join(chunk(z.compress(e) + z.flush(zlib.Z_SYNC_FLUSH)) for e in EVENTS) + chunk(z.flush())
    head = HEAD.replace(b"Date: today\r\n", b"Content-Encoding: gzip\r\n")
    recording = recorded_from(head + body + b"0\r\n\r\n")
    assert [len(e.data) for e in recording.events] == [len(e) for e in EVENTS]  # plain events
    assert recording.headers == (("X-Accel-Buffering", "no"),)
    with pytest.raises(UsageError, match=r"^recording: header Content-Encoding: a recording's events are stored"):
        Recording.from_json(doc(headers=[["Content-Encoding", "gzip"]]))


def test_a_header_the_stub_cannot_send_is_dropped_and_named() -> None:
    long = b"Content-Security-Policy: " + b"a" * 2000 + b"\r\n"
    head = HEAD.replace(b"Date: today\r\n", long + b"X-Name: caf\xc3\xa9\r\n")
    recording = recorded_from(head + BODY)
    assert recording.headers == (("X-Accel-Buffering", "no"),)
    dropped = recording.source["dropped_headers"]
    assert [d.split(":")[0] for d in dropped] == ["header Content-Security-Policy", "header X-Name"]
    assert all("at most 1024 characters" in d for d in dropped)
    assert Recording.from_json(json.loads(recording.dumps())) == recording


def test_an_interim_head_is_not_the_recorded_heads_time() -> None:
    """A 103 Early Hints at 1 ms and the 200's head at 2 ms: the replay sends its head at 2 ms (the 103 is the
    response's first byte, its TTFB, but not the head the stub sends), and records the 200's headers."""
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
    recording = recorded([hints, HEAD, BODY])
    assert recording.head_ms == 2.0
    assert ("X-Accel-Buffering", "no") in recording.headers
    assert recorded([HEAD, BODY]).head_ms == 1.0


def test_a_cookie_is_never_recorded_and_a_repeated_header_is_named_not_lost() -> None:
    """A file to share: a Set-Cookie is a session's. A repeated header (a recording's headers are a table) lost its
    first value unsaid."""
    extra = b"Set-Cookie: session=SECRET\r\nX-Trace: one\r\nX-Trace: two\r\n"
    recording = recorded_from(HEAD.replace(b"Date: today\r\n", extra) + BODY)
    assert b"SECRET" not in recording.dumps().encode()
    assert ("X-Trace", "one") in recording.headers
    assert ("X-Trace", "two") not in recording.headers
    assert recording.source["dropped_headers"] == [
        "header X-Trace: repeated; a replay sends each name once (the first kept)"
    ]


def test_a_stream_longer_than_a_recording_holds_ends_as_it_passes_that() -> None:
    """A flood was read for the probe's 600 s and refused after: the trace's bound on the stream's bytes ends it."""
    assert RECORD_LIMITS.response_bytes is not None
    assert MAX_RECORDING_BYTES < RECORD_LIMITS.response_bytes < 2 * MAX_RECORDING_BYTES
    recorder = TraceRecorder("s", 0, RECORD_LIMITS, api=Api.OPENAI)
    recorder.on_read(1, HEAD)
    piece = chunk(EVENTS[1] * 1000)
    reads = RECORD_LIMITS.response_bytes // len(piece)
    for i in range(reads):  # within the bound: read
        recorder.on_read(2 + i, piece)
    with pytest.raises(ResponseTooLarge):
        recorder.on_read(2 + reads, piece * 2)  # past it


@pytest.mark.parametrize(
    ("raw", "hidden"),
    [
        # escapes no usual encoder writes: a solidus, an escaped ASCII letter, an upper-case hex digit
        (b'data: {"choices":[{"delta":{"content":"\\u0068i\\/there"}}]}\n\n', b'"xxxxxxxxxxxxxx"'),
        (b'data: {"content":"h\xc3\xa9 \\u00E9","id":"content"}\n\n', b'{"content":"xxxxxxxxxx","id":"content"}'),
        # an array under a text member: each of its strings, as _texts reads them; other members kept
        (
            b'{"message":{"content":["a","b",{"text":"zz","x":"keep"}]},"done":false}\n',
            b'{"message":{"content":["x","x",{"text":"xx","x":"keep"}]},"done":false}',
        ),
        (b'data: {"a": [ ] , "text" : "q\\"" }\n\n', b'"text" : "xxx" }'),  # spaces around, an escaped quote
    ],
)
def test_text_however_it_is_escaped_is_hidden(raw: bytes, hidden: bytes) -> None:
    """Text a server escaped another way than JSON's usual encoders (it was kept, only warned about): the JSON is
    walked for its string tokens, so each is found whatever its spelling, and filled to the same byte length."""
    data = raw.removeprefix(b"data: ").rstrip()
    out, whole = redacted(raw, data)
    assert whole
    assert len(out) == len(raw)
    assert hidden in out
    json.loads(out.removeprefix(b"data: "))  # still JSON


def test_an_event_whose_data_spans_lines_is_hidden_the_usual_way_and_says_what_it_kept() -> None:
    raw = b'data: {"content":\ndata: "two"}\n\n'  # SSE joins the lines with a line end: not in raw as it is
    out, whole = redacted(raw, b'{"content":\n"two"}')
    assert whole  # as JSON's encoders spell it: found
    assert b"two" not in out
    odd = b'data: {"content":\ndata: "\\u0074wo"}\n\n'
    out, whole = redacted(odd, b'{"content":\n"\\u0074wo"}')
    assert not whole  # an unusual escape across lines: kept, and said (record warns on stderr)
    assert out == odd


def test_every_copy_of_an_event_s_json_is_hidden() -> None:
    """A server that repeats the payload on another line of the event (a comment, an `event:` line)."""
    raw = b'event: {"content":"SECRET"}\ndata: {"content":"SECRET"}\n\n'
    out, whole = redacted(raw, b'{"content":"SECRET"}')
    assert whole
    assert b"SECRET" not in out
    assert len(out) == len(raw)


def test_json_too_deep_to_read_is_counted_as_kept_and_bytes_json_takes_are_hidden() -> None:
    deep = b'{"content":"SECRET","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    out, whole = redacted(b"data: " + deep + b"\n\n", deep)
    assert not whole  # counted in the recording and said on stderr, never reported as hidden
    lone = b'{"content":"ab\xed\xa0\x80cd"}'  # a lone surrogate's bytes: json.loads takes them, UTF-8 does not
    out, whole = redacted(b"data: " + lone + b"\n\n", lone)
    assert whole
    assert out == b'data: {"content":"xxxxxxx"}\n\n'
