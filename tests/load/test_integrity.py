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
