"""The gateway's keep-alives as real processes (issue 36 §6): behind an nginx whose proxy_read_timeout is 2 s, a stream
whose upstream pauses 5 s mid-stream is cut with keep-alives off and survives with them on; the official SDKs read
streams with keep-alives through the gateway; Gemini gets none, because its SDK fails on them; an upstream silent
past the total timeout gets keep-alives, then the error frame, and nothing after it."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from tests.gateway.test_gateway_e2e import CHAT, Services, count_tokens, hostport, metric, pool, request
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir
from tokenpath.proxies.base import start as start_proxy
from tokenpath.proxies.nginx import Nginx
from tokenpath.proxies.timeouts import StreamTimeouts
from tokenpath.stub.frames import token_text
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.sse import Frame, SSEParser

pytestmark = pytest.mark.e2e

READ_TIMEOUT_S = 2  # nginx's, in front of the gateway
PAUSE = {"ttft_ms": 5, "interval_ms": 10, "tokens": 6, "pause_ms": 5000, "pause_after": 2}  # 5 s after token 2
KEEPALIVE = b": keep-alive\n\n"


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


@pytest.fixture
def nginx_in_front() -> Iterator[list[RunningProxy]]:
    started: list[RunningProxy] = []
    yield started
    for proxy in started:
        proxy.stop()


def front(started: list[RunningProxy], gateway_url: str | None) -> RunningProxy:
    proxy = Nginx()  # the catalogue's, proxy_buffering off (ingress-nginx's profile), its read timeout 2 s
    if proxy.binary() is None:
        pytest.skip("nginx is not installed (scripts/install-proxies, as root)")
    site = Site(
        listen=Endpoint("127.0.0.1", free_port()),
        upstream=Endpoint(*hostport(gateway_url)),
        workdir=new_workdir("nginx-keepalive"),
        variant=proxy.variant("proxy_buffering_off"),
    )
    # The idle timer between two reads from the gateway that cuts a silent stream: the stock 60 s made 2 s.
    site.timeouts = StreamTimeouts(idle_s=READ_TIMEOUT_S)
    running = start_proxy(proxy, site)
    started.append(running)
    assert f"proxy_read_timeout {READ_TIMEOUT_S}s;" in running.effective
    return running


def stream_through(url: str, body: dict[str, object], timeout_s: float = 30) -> tuple[bytes, bool, float]:
    """One streamed request, read to its end (or to the close that cuts it): the body, whether it ended whole, and
    how long it took."""
    parser = ResponseParser()
    got = b""
    t0 = time.monotonic()
    with socket.create_connection(hostport(url), timeout=timeout_s) as sock:
        sock.sendall(request(body, headers="Connection: close\r\n"))
        while not parser.complete:
            data = sock.recv(65536)
            if not data:
                with contextlib.suppress(Exception):  # a chunked body the close cut short: what we have is it
                    parser.feed_eof()
                break
            got += parser.feed(data)
    return got, parser.complete, time.monotonic() - t0


# A reasoning model's two silences: before its first token (the head already sent, as vLLM's server sends it), and
# between two tokens; each 5 s, so nginx's 2 s read timeout cuts it unless something fills it. Tokens before it:
SILENCES = {
    "before_the_first_token": ({"ttft_ms": 5000, "interval_ms": 10, "tokens": 6}, 0),
    "mid_stream": (PAUSE, 2),
}


@pytest.mark.parametrize("silence", SILENCES)
def test_the_gateways_keepalives_carry_a_silent_stream_through_an_nginx_idle_timeout(
    svc: Services, nginx_in_front: list[RunningProxy], silence: str
) -> None:
    """The issue's done-when. With keep-alives off the 5 s silence outlasts nginx's 2 s read timeout: nginx cuts the
    stream (its error log says why) with the tokens after the silence never sent. With a keep-alive every 0.5 s the
    same stream arrives whole, the silence filled with comment lines."""
    pacing, before = SILENCES[silence]
    stub = svc.stub()
    body = {**CHAT, "tokenpath": pacing}
    fronts = {}
    for every in (0, 0.5):
        gw = svc.gateway(f"[limits]\nkeepalive_interval_s = {every}\n" + pool(stub))
        fronts[every] = front(nginx_in_front, gw.url)

    def outcome(every: float) -> tuple[bytes, bool, str]:
        got, whole, _ = stream_through(fronts[every].url, body)
        return got, whole, (fronts[every].site.workdir / "error.log").read_text()

    with ThreadPoolExecutor(2) as streams:  # the cut and the whole silence side by side: one wait, not two
        outcomes = dict(zip((0, 0.5), streams.map(outcome, (0, 0.5)), strict=True))
    got, whole, log = outcomes[0]
    assert not whole, got
    assert count_tokens(got) == before  # the tokens before the silence, and none after it
    assert b"[DONE]" not in got
    assert KEEPALIVE not in got
    assert "upstream timed out" in log  # nginx's read timeout cut it, nothing else
    got, whole, log = outcomes[0.5]
    assert whole, got
    assert got.endswith(b"data: [DONE]\n\n")
    assert count_tokens(got) == 6
    assert got.count(KEEPALIVE) >= 3  # ~9 in 5 s; a loaded host may fire some late, none is needed early
    assert "upstream timed out" not in log
    chunks = [json.loads(f.data) for f in SSEParser().feed(got) if f.data not in (None, b"[DONE]")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == TEXT  # every frame whole


# the official SDKs ---------------------------------------------------------------------------------------------
SDK_PAUSE = ("--tokens", "6", "--ttft-ms", "5", "--interval-ms", "5", "--pause-ms", "1500", "--pause-after", "2")
TEXT = "".join(token_text(k) for k in range(6))


def test_the_openai_and_anthropic_sdks_read_streams_with_keepalives_without_error(svc: Services) -> None:
    stub = svc.stub(*SDK_PAUSE)
    metrics_port = free_port()
    gw = svc.gateway(
        f'metrics_listen = "127.0.0.1:{metrics_port}"\n[limits]\nkeepalive_interval_s = 0.2\n' + pool(stub)
    )
    murl = f"http://127.0.0.1:{metrics_port}/metrics"
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="tokenpath-stub", messages=[{"role": "user", "content": "x"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == TEXT
        events = list(client.responses.create(model="tokenpath-stub", input="x", stream=True))
        assert events[-1].type == "response.completed"
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TEXT
    with (
        anthropic.Anthropic(base_url=gw.url or "", api_key="unused", max_retries=0) as claude,
        claude.messages.stream(
            model="tokenpath-stub", max_tokens=64, messages=[{"role": "user", "content": "x"}]
        ) as answer,
    ):
        assert "".join(answer.text_stream) == TEXT
        assert answer.get_final_message().stop_reason == "end_turn"
    for api in ("openai", "responses", "anthropic"):  # each stream got keep-alives through its silence
        assert metric(murl, f'tokenpath_gateway_keepalives_total{{format="{api}",pool="default"}}') >= 2, api


def test_an_http2_client_gets_the_keepalives_as_data_of_its_own_stream(svc: Services) -> None:
    """h2c with prior knowledge: the keep-alive is DATA on the stream the silence is in, the stream ends whole."""
    stub = svc.stub(*SDK_PAUSE)
    gw = svc.gateway("[limits]\nkeepalive_interval_s = 0.2\n" + pool(stub))
    with (
        httpx.Client(http1=False, http2=True, timeout=20) as client,
        client.stream("POST", f"{gw.url}/v1/chat/completions", json=CHAT) as response,
    ):
        got = response.read()
        assert response.http_version == "HTTP/2"
    assert got.count(KEEPALIVE) >= 2
    assert got.endswith(b"data: [DONE]\n\n")
    assert count_tokens(got) == 6


def gemini_text(url: str) -> str:
    client = genai.Client(api_key="unused", http_options=genai_types.HttpOptions(base_url=url))
    return "".join(c.text or "" for c in client.models.generate_content_stream(model="tokenpath-stub", contents="x"))


def test_gemini_gets_no_keepalive_because_its_sdk_fails_on_a_comment_line(svc: Services) -> None:
    """Why Gemini's ApiSpec has no keepalive: google-genai, read straight from a stub that sends SSE
    comment keep-alives, raises on the first one. Through the gateway the same silence gets none, and it reads."""
    beating = svc.stub("--api", "gemini", "--heartbeat-ms", "100", *SDK_PAUSE)
    with pytest.raises(genai_errors.UnknownApiResponseError, match="ping"):
        gemini_text(beating)
    stub = svc.stub(*SDK_PAUSE)
    metrics_port = free_port()
    gw = svc.gateway(
        f'metrics_listen = "127.0.0.1:{metrics_port}"\n[limits]\nkeepalive_interval_s = 0.2\n' + pool(stub)
    )
    assert gemini_text(gw.url or "") == TEXT
    assert metric(f"http://127.0.0.1:{metrics_port}/metrics", "tokenpath_gateway_keepalives_total") == 0


# hostile --------------------------------------------------------------------------------------------------------
def test_an_upstream_silent_past_the_total_timeout_gets_keepalives_then_the_error_frame_and_nothing_after(
    svc: Services,
) -> None:
    stub = svc.stub()
    gw = svc.gateway("[limits]\nkeepalive_interval_s = 0.2\ntotal_timeout_s = 1.5\n" + pool(stub))
    got, whole, _ = stream_through(gw.url or "", {**CHAT, "tokenpath": PAUSE})
    assert whole  # the gateway ends its chunked body properly, with the error frame last
    kinds = [kind(frame) for frame in SSEParser().feed(got)]
    data, beats = kinds.count("data"), kinds.count("keep-alive")
    assert kinds == ["data"] * data + ["keep-alive"] * beats + ["error"]  # the tokens, the silence filled, the end
    assert beats >= 2
    assert b"total_timeout" in got.rsplit(b"\n\n", 2)[-2]
    assert count_tokens(got) == 2


def kind(frame: Frame) -> str:
    if frame.comments == [b" keep-alive"]:
        return "keep-alive"
    return "error" if b'"error"' in (frame.data or b"") else "data"
