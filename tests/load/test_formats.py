"""The load client in every API format and under compression: the lean recorder finds the same first content
arrival as the probe's TraceRecorder in the stub's own frames of each format (plain and gzip/br/zstd, flushed per
frame), the frame's token joins to the stub's first content write of that format, and integrity compares content."""

from __future__ import annotations

import random

import pytest

from tests.helpers import HTTP_APIS
from tests.wire.battery import encoded
from tokenpath.audit import StreamLog, completion_id
from tokenpath.errors import ContentEncodingError
from tokenpath.load.integrity import check_body
from tokenpath.load.lean import LeanRecorder
from tokenpath.load.runner import content_write
from tokenpath.load.tokens import content_text, token_number
from tokenpath.probe.trace import TraceRecorder
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats import FORMATS
from tokenpath.stub.frames import StreamRequest
from tokenpath.wire.apis import SPECS, Api

SID, MODEL, TOKENS = "tp-formats", "tokenpath-stub", 6


def stub_frames(api: Api) -> tuple[list[bytes], int]:
    """What the stub writes for this stream in `api`, one frame per write, and its first content write."""
    req = StreamRequest(api.value if api is not Api.OPENAI else "chat", MODEL, SID, TOKENS, prompt_tokens=3)
    shape = FORMATS[api].shape(req, Pacing(20.0, 10.0, TOKENS, None, "openai"))
    return shape.wire(False, completion_id(SID)), shape.first_content


def head(api: Api, coding: str | None = None) -> bytes:
    enc = f"Content-Encoding: {coding}\r\n" if coding else ""
    ctype = SPECS[api].content_type
    return f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\n{enc}Transfer-Encoding: chunked\r\n\r\n".encode()


def chunked(pieces: list[bytes]) -> list[bytes]:
    return [b"%x\r\n%b\r\n" % (len(p), p) for p in pieces if p]


def replay(api: Api, reads: list[bytes]) -> tuple[TraceRecorder, LeanRecorder]:
    trace, lean = TraceRecorder(SID, 0, api=api), LeanRecorder(SID, 0, api=api)
    for i, data in enumerate(reads, 1):
        trace.on_read(i * 1000, data)
        lean.on_read(i * 1000, data)
    return trace, lean


@pytest.mark.parametrize("api", HTTP_APIS)
def test_the_first_content_arrival_and_its_write_in_each_format(api: Api) -> None:
    frames, first_write = stub_frames(api)
    response = head(api) + b"".join(chunked(frames)) + b"0\r\n\r\n"
    rng = random.Random(api.value)
    cases = [[response], [response[i : i + 1] for i in range(len(response))]]
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(response)), 12))
        cases.append([response[a:b] for a, b in zip([0, *cuts], [*cuts, len(response)], strict=True)])
    for reads in cases:
        trace, lean = replay(api, reads)
        got = lean.result()
        assert lean.complete
        assert got.first_content_t_ns == trace.trace.t_first_content_ns is not None
        assert got.first_content is not None
        assert got.body == b"".join(frames)
        token = token_number(content_text(api, got.first_content))
        assert token == 0
        log = StreamLog(SID, 10.0, 0, first_content=first_write)
        assert content_write(log, token) == first_write  # the stub's write of the first content frame
    integrity = check_body(got.body, SID, MODEL, TOKENS, api)
    assert (integrity.lost, integrity.out_of_order) == (0, 0)
    assert integrity.received == integrity.expected  # OpenAI: every frame; the others: every content frame
    assert integrity.ok
    assert integrity.byte_exact is (True if api is Api.OPENAI else None)


@pytest.mark.parametrize("api", [Api.ANTHROPIC, Api.BEDROCK, Api.OLLAMA])
def test_a_lost_content_frame_is_named_in_other_formats(api: Api) -> None:
    frames, first_write = stub_frames(api)
    del frames[first_write + 2]
    integrity = check_body(b"".join(frames), SID, MODEL, TOKENS, api)
    assert integrity.lost == 1
    assert not integrity.ok


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("api", [Api.OPENAI, Api.ANTHROPIC, Api.BEDROCK])
def test_compressed_and_flushed_per_frame_the_arrival_is_the_read_that_decoded_it(api: Api, coding: str) -> None:
    frames, first_write = stub_frames(api)
    body, ends = encoded(coding, frames, flush=True)
    pieces = [body[a:b] for a, b in zip([0, *ends], [*ends, len(body)], strict=True)]
    reads = [head(api, coding), *chunked(pieces), b"0\r\n\r\n"]
    trace, lean = replay(api, reads)
    got = lean.result()
    assert got.content_encoding == coding
    assert got.body == b"".join(frames)  # decoded
    assert got.first_content_t_ns == trace.trace.t_first_content_ns == (2 + first_write) * 1000


def test_held_by_the_compressor_the_first_content_arrives_with_the_end() -> None:
    frames, _ = stub_frames(Api.ANTHROPIC)
    body, _ = encoded("gzip", frames, flush=False)
    reads = [head(Api.ANTHROPIC, "gzip"), *chunked([body[:10], body[10:]]), b"0\r\n\r\n"]
    _, lean = replay(Api.ANTHROPIC, reads)
    assert lean.result().first_content_t_ns == 3000  # not the read that only fed the decompressor its header


def test_an_encoding_it_cannot_decode_is_named() -> None:
    lean = LeanRecorder(SID, 0, api=Api.ANTHROPIC)
    with pytest.raises(ContentEncodingError, match="compress") as info:
        lean.on_read(1, head(Api.ANTHROPIC, "compress"))
    assert info.value.reason == "unsupported"


def test_a_json_error_answer_is_kept_for_its_preview_not_read_as_frames() -> None:
    lean = LeanRecorder(SID, 0, api=Api.BEDROCK)
    error = b'{"message":"nope"}'
    lean.on_read(1, b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                 % (len(error), error))  # fmt: skip
    got = lean.result()
    assert (got.status, got.first_content, got.error_preview) == (400, None, '{"message":"nope"}')
