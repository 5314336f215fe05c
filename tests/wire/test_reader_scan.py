"""FrameReader.scan: the frames feed() gives for the same reads, in the same order, whatever the format, the line
ends and the split; and a scan stopped at a frame leaves the rest of its read unparsed (what makes it cheaper for
the first-content search, which stops there)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpath.wire.apis import SPECS, Api, Framing
from tokenpath.wire.reader import frame_reader

from .samples import ERRORS, STREAMS


def _frames(reads: list[bytes], api: Api, scanned: bool) -> list[bytes]:
    reader = frame_reader(api)
    out: list[bytes] = []
    for read in reads:
        try:
            out += [bytes(f.raw) for f in (reader.scan(read) if scanned else reader.feed(read))]
        except Exception as exc:  # a body that breaks the format breaks both the same way, at the same frame
            out.append(f"raised {type(exc).__name__}".encode())
            break
    return [*out, f"pending {reader.pending_bytes()}".encode()]


@settings(max_examples=300)
@given(st.data())
def test_scan_takes_the_frames_feed_takes(data: st.DataObject) -> None:
    api = data.draw(st.sampled_from(sorted(STREAMS, key=lambda a: a.value)))
    body = STREAMS[api][0] + b"".join(ERRORS.get(api, [])[:1])
    eol = data.draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    if SPECS[api].framing is not Framing.EVENTSTREAM:  # the text formats' line ends (event-stream is binary)
        body = re.sub(rb"\n", eol, body)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(body)), max_size=12)))
    reads = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert _frames(reads, api, scanned=True) == _frames(reads, api, scanned=False), (api, reads)


def test_a_stopped_scan_parses_no_further_than_the_frame_it_stopped_at() -> None:
    events = [b'data: {"n":%d}\n\n' % i for i in range(8)]
    reader = frame_reader(Api.OPENAI)
    scan = reader.scan(b"".join(events) + b'data: {"n":8')
    assert bytes(next(scan).raw) == events[0]
    scan.close()
    assert reader.pending_bytes() == 0  # the rest was never fed: the unfinished last event is not held
    lines = frame_reader(Api.OLLAMA)
    ndjson = lines.scan(b'{"a":1}\n{"a":2}\n{"a":3')
    assert bytes(next(ndjson).raw).startswith(b'{"a":1}')
    ndjson.close()
    assert lines.pending_bytes() == 0
    whole = frame_reader(Api.OPENAI)
    assert len(list(whole.scan(b"".join(events) + b'data: {"n":8'))) == 8
    assert whole.pending_bytes() == len(b'data: {"n":8')
