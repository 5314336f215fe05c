"""Builds HTTP/1.1 requests by hand, so the probe knows exactly which bytes it wrote and when."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from tokenpath.errors import UsageError
from tokenpath.wire.framing import request_head

STREAM_HEADER = "X-Tokenpath-Stream"
DEFAULT_PROMPT = "Count slowly from one to one hundred and say nothing else."


def chat_body(
    *, model: str, prompt: str, max_tokens: int | None, stream_id: str, stream: bool = True
) -> dict[str, Any]:
    """An OpenAI chat request. The stream id rides in `user` too, for proxies that drop unknown headers."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": stream,
        "user": stream_id,
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def build_request(
    method: str,
    host: str,
    target: str,
    *,
    body: bytes = b"",
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = False,
) -> bytes:
    fields = [("Host", host)]
    names = set()
    for name, value in headers:
        check_header(name, value)
        names.add(name.lower())
        fields.append((name, value))
    if "connection" not in names:
        fields.append(("Connection", "keep-alive" if keep_alive else "close"))
    if body or method in ("POST", "PUT", "PATCH"):
        fields.append(("Content-Length", str(len(body))))
    return request_head(method, target, fields) + body


def build_json_request(
    host: str,
    target: str,
    payload: Mapping[str, Any],
    *,
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = False,
) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    all_headers = [("Content-Type", "application/json"), ("Accept", "text/event-stream"), *headers]
    return build_request("POST", host, target, body=body, headers=all_headers, keep_alive=keep_alive)


def check_header(name: str, value: str) -> None:
    if not name or any(c in name for c in " \t\r\n:"):
        raise UsageError(f"invalid header name {name!r}")
    if "\r" in value or "\n" in value:
        raise UsageError(f"header {name} has a line break in its value")


def parse_header_arg(arg: str) -> tuple[str, str]:
    """`NAME:VALUE` (as curl's -H takes it) → (name, value)."""
    name, sep, value = arg.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"header {arg!r} is not NAME:VALUE")
    name, value = name.strip(), value.strip()
    check_header(name, value)
    return name, value
