"""The application peers' own code (issue 24 §2): the Starlette relay (proxies/peers/starlette_proxy.py) honours its
GZipMiddleware options and its body limit, with the upstream scripted (httpx.MockTransport) and the app called in
process (httpx.ASGITransport). The Express peer runs on Node: tests/e2e/test_catalogue_compression.py."""

from __future__ import annotations

import asyncio
import gzip
from types import ModuleType

import httpx
import pytest

from tests.helpers import load_script
from tokenpath.proxies.starlette_app import SCRIPT

EVENTS = b"".join(f"data: {i} {'.' * 50}\n\n".encode() for i in range(5))


def peer() -> ModuleType:
    return load_script(SCRIPT, "starlette_proxy")


def upstream(request: httpx.Request) -> httpx.Response:
    assert request.headers["x-tokenpath-stream"] == "s1"  # the stream id is passed on
    assert request.content == b'{"stream":1}'
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=EVENTS)


def relay(gzip_minimum_size: int | None, sse: bool = False, body: bytes = b'{"stream":1}') -> tuple[int, str, bytes]:
    """Status, Content-Encoding and the body as sent (not decoded)."""
    app = peer().build_app("http://stub", gzip_minimum_size, sse, httpx.MockTransport(upstream))

    async def run() -> tuple[int, str, bytes]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://peer") as client:
            headers = {"accept-encoding": "gzip", "x-tokenpath-stream": "s1", "content-type": "application/json"}
            async with client.stream("POST", "/v1/chat/completions", content=body, headers=headers) as response:
                raw = b"".join([part async for part in response.aiter_raw()])
                return response.status_code, response.headers.get("content-encoding", "identity"), raw

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("minimum_size", "sse", "encoding"),
    [(None, False, "identity"), (500, False, "identity"), (500, True, "gzip")],
    ids=["stock", "gzip: event streams excluded", "gzip_sse: exclude_content_types=()"],
)
def test_the_middleware_options_decide_the_encoding(minimum_size: int | None, sse: bool, encoding: str) -> None:
    status, content_encoding, raw = relay(minimum_size, sse)
    assert status == 200
    assert content_encoding == encoding
    assert (gzip.decompress(raw) if encoding == "gzip" else raw) == EVENTS


def test_gzip_sse_takes_the_exclusion_off_and_gzip_keeps_the_defaults() -> None:
    module = peer()
    assert module.build_app("http://stub", None).user_middleware == []
    (plain,) = module.build_app("http://stub", 500).user_middleware
    assert plain.kwargs == {"minimum_size": 500}
    (sse,) = module.build_app("http://stub", 500, True).user_middleware
    assert sse.kwargs == {"minimum_size": 500, "exclude_content_types": ()}


def test_a_body_over_the_limit_is_refused_not_held() -> None:
    status, _, _ = relay(None, body=b"x" * (peer().MAX_BODY + 1))
    assert status == 413
