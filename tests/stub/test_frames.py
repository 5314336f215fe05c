from __future__ import annotations

import json
from itertools import pairwise

import pytest

from tokenpath.errors import UsageError
from tokenpath.stub.formats.openai import DONE_FRAME, minimum_frame_bytes, render_stream
from tokenpath.stub.frames import StreamRequest, token_text
from tokenpath.wire.openai import FrameKind
from tokenpath.wire.sse import SSEParser


def chat(tokens: int = 5, usage: bool = False) -> StreamRequest:
    return StreamRequest("chat", "m", "s1", tokens, usage, 7)


def test_openai_chat_stream_shape() -> None:
    frames = render_stream(chat(3, usage=True), "openai", None)
    kinds = [SSEParser().feed(f)[0].kind for f in frames]
    assert kinds == [
        FrameKind.CONTROL,
        *[FrameKind.CONTENT] * 3,
        FrameKind.CONTROL,
        FrameKind.CONTROL,
        FrameKind.DONE,
    ]
    role = json.loads(frames[0][6:])
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    finish = json.loads(frames[4][6:])
    assert finish["choices"][0]["finish_reason"] == "length"
    usage = json.loads(frames[5][6:])
    assert usage["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert frames[-1] == DONE_FRAME


def test_token_text_never_repeats_its_neighbour() -> None:
    texts = [token_text(i) for i in range(1000)]
    assert all(a != b for a, b in pairwise(texts))
    assert len(set(texts)) == 1000


@pytest.mark.parametrize("size", [60, 61, 1100])
def test_plain_frames_are_padded_exactly(size: int) -> None:
    frames = render_stream(StreamRequest("chat", "m", "s", 12), "plain", size)
    assert {len(f) for f in frames} == {size}
    assert [SSEParser().feed(f)[0].data.split()[0] for f in frames] == [str(i).encode() for i in range(12)]  # type: ignore[union-attr]


@pytest.mark.parametrize("size", [300, 1100])
def test_openai_frames_are_padded_exactly_and_stay_valid_json(size: int) -> None:
    frames = render_stream(chat(4), "openai", size)
    assert {len(f) for f in frames[:-1]} == {size}
    for f in frames[:-1]:
        json.loads(f[6:])


def test_frame_bytes_too_small_is_a_clear_error() -> None:
    need = minimum_frame_bytes(chat(), "openai")
    with pytest.raises(UsageError, match='"format": "plain"'):
        render_stream(chat(), "openai", need - 1)
    render_stream(chat(), "openai", need)


def test_a_shape_s_whole_body_is_its_frames_relabelled_and_joined() -> None:
    """StreamShape.wire_body (the load client's integrity check: one replace per body) is `wire` joined, in both
    codings, for every stream; where the placeholder spans two frames it falls back to relabelling each frame."""
    from tokenpath.audit import completion_id
    from tokenpath.stub.formats.openai import openai_shape
    from tokenpath.stub.frames import PLACEHOLDER_LABEL, StreamShape

    shape = openai_shape("chat", "m", 6, False, 0, "openai", None)
    for chunked in (False, True):
        for sid in ("s1", "s2", "s1"):
            cid = completion_id(sid)
            assert shape.wire_body(chunked, cid) == b"".join(shape.wire(chunked, cid))
    label = PLACEHOLDER_LABEL.encode()
    half = len(label) // 2
    spanning = StreamShape([b"a" + label[:half], label[half:] + b"b", b"c" + label + b"d"], relabel=True)
    cid = completion_id("s3")
    assert spanning.wire_body(False, cid) == b"".join(spanning.wire(False, cid))
    assert label in spanning.wire_body(False, cid)  # the spanning one is not a label: the stub leaves it
