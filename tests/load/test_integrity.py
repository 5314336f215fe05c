from __future__ import annotations

import json

from tokenpath.load.integrity import check, expected_frames


def frames() -> list[bytes]:
    return expected_frames("s1", "m", 8)


def test_intact_stream_is_byte_exact() -> None:
    result = check(frames(), "s1", "m", 8)
    assert result.ok
    assert result.byte_exact


def test_a_dropped_frame_is_reported() -> None:
    got = frames()
    del got[3]
    result = check(got, "s1", "m", 8)
    assert not result.ok
    assert result.lost == 1
    assert "1 content frames lost" in result.detail


def test_a_reordered_frame_is_reported() -> None:
    got = frames()
    got[2], got[4] = got[4], got[2]
    result = check(got, "s1", "m", 8)
    assert not result.ok
    assert result.lost == 0
    assert result.out_of_order >= 1


def test_reserialised_chunks_keep_their_content() -> None:
    # A gateway that parses and re-serialises (LiteLLM) changes bytes, not content: intact, not byte-exact.
    got = []
    for f in frames():
        if f.startswith(b"data: {"):
            obj = json.loads(f[6:])
            obj["system_fingerprint"] = "fp"
            f = b"data: " + json.dumps(obj).encode() + b"\n\n"
        got.append(f)
    result = check(got, "s1", "m", 8)
    assert result.ok
    assert not result.byte_exact
    assert result.detail == "re-serialised"


def test_first_content_frame_is_joined_to_its_write_by_token_text() -> None:
    from tokenpath.audit import StreamLog
    from tokenpath.load.runner import content_write
    from tokenpath.load.tokens import content_text, token_number
    from tokenpath.wire.apis import Api
    from tokenpath.wire.sse import SSEParser

    def write_of(raw: bytes, first_content: int | None = 1) -> int | None:
        (frame,) = SSEParser().feed(raw)
        token = token_number(content_text(Api.OPENAI, frame))
        return content_write(StreamLog("s1", 10.0, 0, first_content=first_content), token)

    got = frames()
    assert write_of(got[0]) is None  # the role delta carries no content
    assert [write_of(f) for f in got[1:9]] == list(range(1, 9))  # token k is the stub's write k + 1
    assert [write_of(f, None) for f in got[1:9]] == list(range(1, 9))  # a log without first_content: OpenAI chat
    # a gateway that dropped the role delta and re-serialised still maps to the right write
    reserialised = b"data: " + json.dumps(json.loads(got[3][6:]), indent=1).replace("\n", "").encode() + b"\n\n"
    assert write_of(reserialised) == 3
