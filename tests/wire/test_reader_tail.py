"""FrameReader.last_word_of: what a body's end says, the common case (an SSE body ending on a blank line with its
final or error event) read from that one event alone, is what last_word(tail(body)) says of every body: the
samples' events of each SSE format in any order, with an error event, frames after the final one, each event's
line ends LF, CRLF or CR, cut anywhere. (Not generated: an event over MAX_EVENT_BYTES before the final one, where
tail gives up and last_word_of still reads the final event; its docstring says so.)"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpath.wire.apis import SPECS, Api, Framing
from tokenpath.wire.ending import LastWord
from tokenpath.wire.reader import frame_reader

from .samples import ERRORS, STREAMS

SSE_APIS = [api for api in STREAMS if SPECS[api].framing is Framing.SSE]


def _events(api: Api) -> list[bytes]:
    """The sample stream's events (each with its blank line), the format's error events, and each of those with a
    data line before it: one event whose last line alone would read as a final one, and does not end the stream."""
    body, _ = STREAMS[api]
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    events += [e for e in ERRORS.get(api, []) if e.endswith(b"\n\n")]
    # and each with a BOM before it: mid-stream, no BOM to the parser (the event's first field is not `data`)
    return events + [b'data: {"x":1}\n' + e for e in events] + [b"\xef\xbb\xbf" + e for e in events]


def _with_line_ends(event: bytes, eol: bytes) -> bytes:
    return re.sub(rb"\n", eol, event)


@settings(max_examples=300)
@given(st.data())
def test_last_word_of_is_last_word_of_the_tail(data: st.DataObject) -> None:
    api = data.draw(st.sampled_from(SSE_APIS))
    events = _events(api)
    picked = data.draw(st.lists(st.sampled_from(events), min_size=0, max_size=8))
    eols = data.draw(st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=len(picked), max_size=len(picked)))
    body = b"".join(_with_line_ends(e, eol) for e, eol in zip(picked, eols, strict=True))
    if body and data.draw(st.booleans()):
        body = body[: data.draw(st.integers(min_value=0, max_value=len(body)))]
    reader = frame_reader(api)
    assert reader.last_word_of(body) is reader.last_word(reader.tail(body)), (api, body[-200:])


def test_the_common_end_takes_the_short_way_and_says_the_same() -> None:
    """A body ending on its final event, and one whose final event is followed by a usage chunk (tail's way)."""
    body, _ = STREAMS[Api.OPENAI]
    reader = frame_reader(Api.OPENAI)
    assert reader.last_word_of(body) is LastWord.FINAL
    usage = b'data: {"choices":[],"usage":{"total_tokens":3}}\n\n'
    assert reader.last_word_of(body + usage) is reader.last_word(reader.tail(body + usage)) is LastWord.FINAL
    error = ERRORS[Api.OPENAI][0]
    assert reader.last_word_of(body[: body.rindex(b"data: [DONE]")] + error) is LastWord.ERROR
    assert reader.last_word_of(body[:-1]) is LastWord.NOTHING  # ended inside the final event
    # A last event whose last line alone would be [DONE]: the event is `{"x":1}` and `[DONE]` in one data, no final.
    content = body[: body.index(b"\n\n") + 2]
    tricky = content + b'data: {"x":1}\ndata: [DONE]\n\n'
    assert reader.last_word_of(tricky) is reader.last_word(reader.tail(tricky)) is not LastWord.FINAL
    bom = content + b"\xef\xbb\xbfdata: [DONE]\n\n"  # a BOM only the stream's first bytes may be
    assert reader.last_word_of(bom) is reader.last_word(reader.tail(bom)) is not LastWord.FINAL


def test_a_final_event_remembered_is_remembered_for_its_format_only_and_the_memory_is_bounded() -> None:
    """last_word_of remembers what a small final event said (wire/reader.py _FINAL_SAID): per format, since the same
    bytes may end one format's stream and not another's; never more than FINAL_SAID_MAX_EVENTS, never a large one."""
    from tokenpath.wire import reader as reader_module

    reader_module._FINAL_SAID.clear()  # what other tests left: this one's answers are remembered from here
    done = b'data: {"x":1}\n\ndata: [DONE]\n\n'
    assert frame_reader(Api.OPENAI).last_word_of(done) is LastWord.FINAL
    assert frame_reader(Api.OPENAI).last_word_of(done) is LastWord.FINAL  # the remembered answer
    assert frame_reader(Api.ANTHROPIC).last_word_of(done) is not LastWord.FINAL  # not Anthropic's final event
    anthropic = frame_reader(Api.ANTHROPIC)
    for i in range(2 * reader_module.FINAL_SAID_MAX_EVENTS):  # each a different error event: a final one
        body = b'data: {"x":1}\n\nevent: error\ndata: {"type":"error","error":{"message":"m%d"}}\n\n' % i
        assert anthropic.last_word_of(body) is anthropic.last_word(anthropic.tail(body)) is LastWord.ERROR
    assert len(reader_module._FINAL_SAID) <= reader_module.FINAL_SAID_MAX_EVENTS
    big = b'data: {"x":1}\n\nevent: error\ndata: {"type":"error","error":{"message":"%s"}}\n\n' % (b"m" * 300)
    reader_module._FINAL_SAID.clear()
    assert anthropic.last_word_of(big) is LastWord.ERROR
    assert not reader_module._FINAL_SAID
