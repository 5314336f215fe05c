from __future__ import annotations

from tokenpath.stub.formats.openai import prompt_stream_id


def test_the_stream_id_can_ride_in_the_last_message() -> None:
    msgs = [
        {"role": "system", "content": "[tokenpath-stream:not-this]"},
        {"role": "user", "content": "Count to ten. [tokenpath-stream:tp-0123abcd]"},
    ]
    assert prompt_stream_id(msgs) == "tp-0123abcd"
    assert prompt_stream_id([{"role": "user", "content": "no marker"}]) is None
    assert prompt_stream_id([{"role": "user", "content": "[tokenpath-stream:bad id]"}]) is None  # visible ASCII only
    assert prompt_stream_id([{"role": "user", "content": [{"type": "text", "text": "x"}]}]) is None
    assert prompt_stream_id("not a list") is None
