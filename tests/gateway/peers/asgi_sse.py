"""An OpenAI-compatible SSE app for hypercorn (an HTTP/2 server the project did not write): role delta, then
`tokens` content frames every `interval_ms` (padded by `pad` bytes; all from the request's "tokenpath" field), then
[DONE]. Records
client disconnects in the file named by $ASGI_SSE_EVENTS, one line each, so a test can see a stream cancelled."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any


def _event(delta: dict[str, Any]) -> bytes:
    chunk = {"id": "cmpl-h2", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _record(line: str) -> None:
    path = os.environ.get("ASGI_SSE_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["method"] == "GET":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"object":"list","data":[]}'})
        return
    options = json.loads(body or b"{}").get("tokenpath", {})
    tokens, interval = int(options.get("tokens", 3)), float(options.get("interval_ms", 1)) / 1000
    pad = "x" * int(options.get("pad", 0))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"x-http-version",
                                                                      scope["http_version"].encode())]})  # fmt: skip
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()
        _record("disconnect")

    watcher = asyncio.ensure_future(watch())
    try:
        await send({"type": "http.response.body", "body": _event({"role": "assistant"}), "more_body": True})
        for i in range(tokens):
            if gone.is_set():
                return
            await asyncio.sleep(interval)
            await send({"type": "http.response.body", "body": _event({"content": f" t{i}{pad}"}), "more_body": True})
            if i % 1000 == 999:
                _record(f"progress {tokens} {i + 1}")
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        _record(f"complete {tokens}")
    finally:
        watcher.cancel()
