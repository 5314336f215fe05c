"""The probe under compression: Accept-Encoding is sent as asked, the answer is decoded between the HTTP framing and
the frame reader, frames are counted in the decoded stream, and a read that only fed the decompressor is a read,
not an arrival. Scripted through the transport seam (tests/probe/test_client.py's ScriptedTransport)."""

from __future__ import annotations

import json

import pytest

from tests.probe.test_client import MS, FakeClock, ScriptedTransport, chunk
from tests.wire.battery import CODINGS, encoded
from tokenpath.errors import ContentEncodingError, HTTPStatusError, UsageError
from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING, ProbeConfig, request_bytes
from tokenpath.probe.metrics import probe_results, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.probe.transport import Target
from tokenpath.wire.apis import Api

EVENTS = [
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":" world"}}]}\n\n',
    b"data: [DONE]\n\n",
]
URL = "http://127.0.0.1:9/v1"


def head(coding: str | None, status: str = "200 OK", content_type: str = "text/event-stream") -> bytes:
    enc = f"Content-Encoding: {coding}\r\n" if coding else ""
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{enc}Transfer-Encoding: chunked\r\n\r\n").encode()


def probe(steps: list[tuple[float, bytes | None]], **cfg: object) -> tuple[ScriptedTransport, Trace]:
    clock = FakeClock()
    transport = ScriptedTransport(clock, steps)
    config = ProbeConfig(url=URL, **cfg)  # type: ignore[arg-type]

    def connect(target: Target, c: ProbeConfig) -> ScriptedTransport:
        return transport

    return transport, probe_stream(config, stream_id="s1", clock=clock, connect=connect)


def reads_of(body: bytes, ends: list[int]) -> list[bytes]:
    """The body cut where each event's compressed bytes end (one read per flushed event), the rest the last read."""
    starts = [0, *ends]
    pieces = [body[a:b] for a, b in zip(starts, [*ends, len(body)], strict=True)]
    return [p for p in pieces if p]


def header(coding: str) -> str:
    return "deflate" if coding == "deflate-raw" else coding


@pytest.mark.parametrize("coding", CODINGS)
def test_flushed_per_event_each_event_is_its_own_arrival(coding: str) -> None:
    body, ends = encoded(coding, EVENTS, flush=True)
    pieces = reads_of(body, ends)
    steps: list[tuple[float, bytes | None]] = [(1, head(header(coding)))]
    steps += [(50, chunk(p)) for p in pieces[:-1]]
    steps.append((50, chunk(pieces[-1]) + b"0\r\n\r\n") if len(pieces) > len(EVENTS) else (0, b"0\r\n\r\n"))
    _, trace = probe(steps, accept_encoding="gzip, deflate, br, zstd")
    m = run_metrics(trace)
    assert trace.content_encoding == header(coding)
    assert m.content_encoding == header(coding)
    assert m.frames == len(EVENTS)
    assert m.frames_per_read == 1.0
    assert m.ttft_ms == pytest.approx(1 + 2 * 50)  # the read that decoded "Hello": the second event's
    assert m.reads is not None
    assert m.reads > m.arrivals  # the head and the end marker complete no frame


@pytest.mark.parametrize("coding", CODINGS)
def test_held_by_the_compressor_everything_is_one_arrival(coding: str) -> None:
    """The same events compressed without a flush, each read carrying what the server's compressor had emitted by
    then (the gzip-hold relay's shape): only the end of the compressed stream decodes the events, in one arrival."""
    body, ends = encoded(coding, EVENTS, flush=False)
    emitted = sorted({e for e in ends if 0 < e < len(body)})
    pieces = [body[a:b] for a, b in zip([0, *emitted], [*emitted, len(body)], strict=True)]
    steps: list[tuple[float, bytes | None]] = [(1, head(header(coding)))]
    steps += [(50, chunk(p)) for p in pieces]
    steps.append((1, b"0\r\n\r\n"))
    _, trace = probe(steps, accept_encoding="gzip, deflate, br, zstd")
    m = run_metrics(trace)
    assert m.frames == len(EVENTS)
    assert m.arrivals == 1
    assert m.bursts == {len(EVENTS): 1}
    assert m.reads == len(pieces) + 2  # the head, each piece, the chunked end
    assert m.ttft_ms == pytest.approx(1 + 50 * len(pieces))


def test_a_read_that_only_moves_the_decompressor_is_a_read_not_an_arrival() -> None:
    body, ends = encoded("gzip", EVENTS, flush=True)
    gzip_header = body[:10]  # the gzip header alone decodes to nothing
    steps: list[tuple[float, bytes | None]] = [
        (1, head("gzip")),
        (5, chunk(gzip_header)),
        (5, chunk(body[10 : ends[0]])),  # completes the role delta
        (5, chunk(body[ends[0] :]) + b"0\r\n\r\n"),  # the rest, in one read
    ]
    _, trace = probe(steps, accept_encoding="gzip")
    assert [r.frames for r in trace.reads] == [0, 0, 1, len(EVENTS) - 1]
    m = run_metrics(trace)
    assert (m.reads, m.arrivals, m.frames) == (4, 2, len(EVENTS))
    assert m.ttft_ms == pytest.approx(16)  # TTFT is the arrival that decoded the first content, not a byte before


def test_first_token_and_ttft_are_read_in_the_decoded_stream_of_each_format() -> None:
    from tests.wire.samples import STREAMS

    events, kinds = STREAMS[Api.ANTHROPIC]
    body, _ = encoded("br", [events], flush=True)
    content_type = "text/event-stream"
    _, trace = probe(
        [(1, head("br", content_type=content_type)), (7, chunk(body) + b"0\r\n\r\n")],
        accept_encoding="br",
        api=Api.ANTHROPIC,
    )
    assert trace.frame_count == len(kinds)
    assert trace.t_first_content_ns == 8 * MS


def test_accept_encoding_is_sent_as_given_and_not_when_unset() -> None:
    sent, _ = probe([(1, head(None) + chunk(EVENTS[1]) + b"0\r\n\r\n")], accept_encoding="gzip;q=1, br;q=0.5")
    assert b"\r\nAccept-Encoding: gzip;q=1, br;q=0.5\r\n" in sent.sent
    plain, _ = probe([(1, head(None) + chunk(EVENTS[1]) + b"0\r\n\r\n")])
    assert b"accept-encoding" not in plain.sent.lower()


def test_browser_is_the_browsers_header() -> None:
    cfg = ProbeConfig(url=URL, accept_encoding="browser")
    assert cfg.accept_encoding == BROWSER_ACCEPT_ENCODING == "gzip, deflate, br, zstd"
    assert b"Accept-Encoding: gzip, deflate, br, zstd\r\n" in request_bytes(cfg, cfg.target, "s1")


def test_accept_encoding_twice_or_with_a_line_break_is_refused() -> None:
    with pytest.raises(UsageError, match="twice"):
        ProbeConfig(url=URL, accept_encoding="gzip", headers=(("accept-encoding", "br"),))
    with pytest.raises(UsageError, match="line break"):
        ProbeConfig(url=URL, accept_encoding="gzip\r\nX-Evil: 1")


def test_an_unknown_encoding_is_named_not_crashed_on() -> None:
    with pytest.raises(ContentEncodingError, match="compress") as info:
        probe([(1, head("compress") + chunk(b"\x1f\x9d...") + b"0\r\n\r\n")], accept_encoding="compress")
    assert info.value.reason == "unsupported"


def test_an_error_answer_in_an_unknown_encoding_is_reported_by_its_status() -> None:
    with pytest.raises(HTTPStatusError, match="HTTP 502"):
        probe([(1, head("compress", "502 Bad Gateway") + chunk(b"oops") + b"0\r\n\r\n")])


def test_a_compressed_body_cut_short_is_truncated() -> None:
    body, ends = encoded("gzip", EVENTS, flush=True)
    with pytest.raises(ContentEncodingError) as info:
        probe([(1, head("gzip") + chunk(body[: ends[-1]]) + b"0\r\n\r\n")], accept_encoding="gzip")
    assert info.value.reason == "truncated"


def test_json_and_table_show_the_encoding_reads_and_what_was_asked() -> None:
    body, _ = encoded("zstd", EVENTS, flush=True)
    steps: list[tuple[float, bytes | None]] = [(1, head("zstd")), (2, chunk(body) + b"0\r\n\r\n")]
    _, trace = probe(steps, accept_encoding="browser")
    results = probe_results(URL, [run_metrics(trace)], Api.OPENAI, BROWSER_ACCEPT_ENCODING)
    doc = json.loads(json.dumps(results.to_json()))
    assert doc["accept_encoding"] == BROWSER_ACCEPT_ENCODING
    assert doc["content_encoding"] == "zstd"
    assert doc["runs"][0]["content_encoding"] == "zstd"
    assert doc["runs"][0]["reads"] == 2
    assert doc["runs"][0]["arrivals"] == 1

    from rich.console import Console

    from tokenpath.probe.table import probe_table

    console = Console(width=250, record=True)
    console.print(probe_table(results))
    text = console.export_text()
    assert "zstd" in text
    assert "Accept-Encoding: gzip, deflate, br, zstd" in text
