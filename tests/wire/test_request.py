from __future__ import annotations

import json

import pytest

from tokenpath.errors import UsageError
from tokenpath.wire.formats.openai import chat_body
from tokenpath.wire.request import build_json_request, parse_header_arg


def test_json_request_is_exact_http11() -> None:
    raw = build_json_request("h:8", "/v1/chat/completions", {"a": 1}, headers=[("X-Tokenpath-Stream", "s1")])
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert b"Host: h:8" in lines
    assert b"Connection: close" in lines
    assert f"Content-Length: {len(body)}".encode() in lines
    assert json.loads(body) == {"a": 1}


def test_chat_body_carries_stream_id_in_user() -> None:
    body = chat_body(model="m", prompt="p", max_tokens=3, stream_id="s9")
    assert body["user"] == "s9"
    assert body["stream"] is True
    assert body["max_tokens"] == 3


def test_header_arg() -> None:
    assert parse_header_arg("X-A: b:c") == ("X-A", "b:c")
    with pytest.raises(UsageError):
        parse_header_arg("novalue")
    with pytest.raises(UsageError):
        parse_header_arg("Bad Name: x")
