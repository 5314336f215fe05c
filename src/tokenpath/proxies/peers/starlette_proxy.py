"""A Starlette streaming endpoint in the shape users write it: httpx relays the upstream's stream through a
`StreamingResponse`, optionally behind Starlette's `GZipMiddleware`. Run by uvicorn, with the project's Python
(the `peers` extra installs starlette, uvicorn and httpx):

    python starlette_proxy.py --listen 127.0.0.1:8081 --upstream http://127.0.0.1:8000 \
        [--read-timeout S|none] [--gzip-minimum-size 500 [--compress-event-streams]]

--read-timeout S   httpx's read timeout, a silence between two reads from the upstream (the head's wait included);
                   `none` lifts it. Unset: httpx's default, 5 s, as `httpx.AsyncClient()` users get it

--gzip-minimum-size N   app.add_middleware(GZipMiddleware, minimum_size=N)
--compress-event-streams   ... and exclude_content_types=() (Starlette >= 1.5): compress text/event-stream too,
                           which the middleware's defaults exclude
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MAX_BODY = 1 << 20  # a chat request is a few KB; anything past this is refused, not held
# Request headers the relay passes on (the stream id rides in X-Tokenpath-Stream and in the body's `user`).
FORWARD_REQUEST = ("content-type", "authorization", "x-tokenpath-stream")
FORWARD_RESPONSE = ("content-type", "cache-control")


def build_app(
    upstream: str,
    gzip_minimum_size: int | None = None,
    compress_event_streams: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,  # tests script the upstream; None: the network
    timeout: httpx.Timeout = httpx.Timeout(5.0),  # noqa: B008 - httpx's default (DEFAULT_TIMEOUT_CONFIG), frozen
) -> Starlette:
    # httpx's timeouts as users get them unless told (5 s, its read timeout a silence between two reads): a silence
    # longer than that ends the stream. `--read-timeout none` is the line that lifts it (the long_streams variant).
    client = httpx.AsyncClient(base_url=upstream, timeout=timeout, transport=transport)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    async def relay(request: Request) -> Response:
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > MAX_BODY:
                return JSONResponse({"error": {"message": f"request body over {MAX_BODY} bytes"}}, 413)
        headers = {k: v for k, v in request.headers.items() if k in FORWARD_REQUEST}
        outgoing = client.build_request(
            request.method, request.url.path, params=request.query_params, headers=headers, content=bytes(body)
        )
        try:
            answer = await client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            return JSONResponse({"error": {"message": f"upstream failed: {exc}", "type": "bad_gateway"}}, 502)
        return StreamingResponse(
            answer.aiter_bytes(),  # each chunk as httpx reads it: one event per upstream write
            status_code=answer.status_code,
            headers={k: v for k, v in answer.headers.items() if k in FORWARD_RESPONSE},
            background=BackgroundTask(answer.aclose),
        )

    middleware: list[Middleware] = []
    if gzip_minimum_size is not None:
        options: dict[str, Any] = {"minimum_size": gzip_minimum_size}
        if compress_event_streams:
            options["exclude_content_types"] = ()
        middleware.append(Middleware(GZipMiddleware, **options))
    route = Route("/{path:path}", relay, methods=["GET", "POST"])
    return Starlette(routes=[route], middleware=middleware, lifespan=lifespan)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:8081")
    ap.add_argument("--upstream", default="http://127.0.0.1:8000")
    ap.add_argument("--gzip-minimum-size", type=int, default=None)
    ap.add_argument("--compress-event-streams", action="store_true")
    ap.add_argument("--read-timeout", default=None, help="seconds, or none (default: httpx's 5 s)")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    timeout = httpx.Timeout(5.0)
    if args.read_timeout is not None:
        timeout = httpx.Timeout(5.0, read=None if args.read_timeout == "none" else float(args.read_timeout))
    app = build_app(args.upstream, args.gzip_minimum_size, args.compress_event_streams, timeout=timeout)
    uvicorn.run(app, host=host.strip("[]"), port=int(port), log_level="warning")


if __name__ == "__main__":
    main()
