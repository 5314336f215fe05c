"""The same relay as `tokenpath gateway` (no auth, one upstream) written the idiomatic aiohttp way, so the
benchmark can decide the gateway's stack: aiohttp server + aiohttp client session (keep-alive pool), status and
headers forwarded, then every chunk the client session yields written and drained.

    python bench/peers/aiohttp/relay.py --listen 127.0.0.1:8081 --upstream 127.0.0.1:8000
"""

from __future__ import annotations

import argparse

import aiohttp
import uvloop
from aiohttp import web

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "trailer", "upgrade"}


def make_app(upstream: str) -> web.Application:
    async def start_session(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(
            base_url=f"http://{upstream}", connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )

    async def close_session(app: web.Application) -> None:
        await app["session"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        session: aiohttp.ClientSession = request.app["session"]
        async with session.request(request.method, request.rel_url, data=body, headers=headers) as upstream_resp:
            out = web.StreamResponse(status=upstream_resp.status)
            for k, v in upstream_resp.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    out.headers[k] = v
            await out.prepare(request)
            async for chunk in upstream_resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application(client_max_size=8 << 20)
    app.on_startup.append(start_session)
    app.on_cleanup.append(close_session)
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)
    print(f"aiohttp relay: listening on http://{host}:{port}", flush=True)
    web.run_app(make_app(args.upstream), host=host, port=int(port), print=None, access_log=None,
                loop=uvloop.new_event_loop())  # fmt: skip


if __name__ == "__main__":
    main()
