"""The gateway serving HTTP/2 (issue 25 §4), as real processes on loopback: h2c with prior knowledge and h2 over TLS by
ALPN, through httpx[http2] and the official openai SDK; JWT per stream; RST_STREAM cancels the upstream; one stalled
stream holds only itself; and the hostile cases, each bounded, the gateway healthy for another client after."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.errors
import httpx
import httpx2
import jwt
import openai
import psutil
import pytest

from tests.e2e.h2raw import CHAT, RawH2
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.serve.tlscert import self_signed
from tokenpath.stub.control import fetch_audit

pytestmark = pytest.mark.e2e

SECRET = secrets.token_urlsafe(48)


def token() -> str:
    now = int(time.time())
    return jwt.encode({"sub": "h2", "iat": now, "exp": now + 600}, SECRET, algorithm="HS256")


class Gateways:
    """A stub, and gateways in front of it: h2c (clear text) and TLS, each with JWT auth."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[ServiceProcess] = []
        self.tls = self_signed(tmp / "tls", ["127.0.0.1"])

    def start(self, *args: str, name: str) -> str:
        proc = ServiceProcess(tokenpath_argv(*args), name, {"GW_SECRET": SECRET})
        self.procs.append(proc)
        url = proc.start()
        return url

    def stub(self, *args: str) -> str:
        return self.start("stub", "--port", "0", "--ttft-ms", "5", "--interval-ms", "2", "--tokens", "8", *args,
                          name="stub")  # fmt: skip

    def gateway(self, stub: str, extra: str = "", limits: str = "", tls: bool = False) -> str:
        path = self.tmp / f"gw{len(self.procs)}.toml"
        tls_keys = f'tls_cert = "{self.tls.cert}"\ntls_key = "{self.tls.key}"\n' if tls else ""
        path.write_text(
            f'listen = "127.0.0.1:0"\n{tls_keys}{extra}\n[auth]\nsecret_env = "GW_SECRET"\nalgorithms = ["HS256"]\n'
            f"[limits]\n{limits}\n"
            f'[[pool]]\nname = "default"\n[[pool.member]]\nurl = "{stub}"\n'
        )
        return self.start("gateway", "--config", str(path), name="gateway")

    def pid(self, url: str) -> int:
        for proc in self.procs:
            if proc.url == url and proc.pid is not None:
                return proc.pid
        raise AssertionError(url)

    def verify(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.tls.cert))
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        return ctx

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    g = Gateways(tmp_path_factory.mktemp("h2gw"))
    try:
        stub = g.stub()
        yield {"g": g, "stub": stub, "h2c": g.gateway(stub), "tls": g.gateway(stub, tls=True)}
    finally:
        g.stop()


def hostport(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def content_tokens(body: bytes) -> int:
    return body.count(b'"content":" ')


# real clients ----------------------------------------------------------------------------------------------------


def test_httpx_h2c_streams_through_the_gateway_with_a_jwt_per_stream(gw: dict[str, Any]) -> None:
    with httpx.Client(http1=False, http2=True, timeout=20) as client:  # http1=False: h2c with prior knowledge
        url = f"{gw['h2c']}/v1/chat/completions"
        with client.stream("POST", url, json=CHAT, headers={"authorization": f"Bearer {token()}"}) as resp:
            assert (resp.http_version, resp.status_code) == ("HTTP/2", 200)
            body = b"".join(resp.iter_raw())
        assert content_tokens(body) == 8
        assert body.endswith(b"data: [DONE]\n\n")
        # the same connection, a stream without a token: refused on its own, the connection goes on
        refused = client.post(url, json=CHAT)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        again = client.post(url, json={**CHAT, "stream": False}, headers={"authorization": f"Bearer {token()}"})
        assert (again.http_version, again.status_code) == ("HTTP/2", 200)


def test_tls_listener_speaks_h2_and_http1_by_alpn(gw: dict[str, Any]) -> None:
    g: Gateways = gw["g"]
    assert gw["tls"].startswith("https://")
    url = f"{gw['tls']}/v1/chat/completions"
    for http2, version in ((True, "HTTP/2"), (False, "HTTP/1.1")):
        with httpx.Client(http2=http2, verify=g.verify(), timeout=20) as client:
            resp = client.post(url, json=CHAT, headers={"authorization": f"Bearer {token()}"})
            assert (resp.http_version, resp.status_code) == (version, 200)
            assert content_tokens(resp.content) == 8


@pytest.mark.parametrize("lib", ["httpx", "httpx2"])
@pytest.mark.parametrize("listener", ["h2c", "tls"])
def test_the_openai_sdk_on_an_http2_client_streams_through_the_gateway(
    gw: dict[str, Any], listener: str, lib: str
) -> None:
    """The SDK takes the legacy httpx.Client and its successor httpx2.Client (its own default): both, over h2."""
    g: Gateways = gw["g"]
    module: Any = httpx if lib == "httpx" else httpx2
    options: dict[str, Any] = {"verify": g.verify()} if listener == "tls" else {"http1": False}  # h2c: prior knowledge
    http = module.Client(http2=True, timeout=20, **options)
    versions: list[str] = []
    http.event_hooks["response"] = [lambda r: versions.append(r.http_version)]
    with http:
        sdk = openai.OpenAI(base_url=f"{gw[listener]}/v1", api_key=token(), http_client=http, max_retries=0)
        stream = sdk.chat.completions.create(
            model="tokenpath-stub", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert versions == ["HTTP/2"]
    assert len(text.split()) == 8


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_tls_flags_serve_h2_and_the_key_is_never_printed(gw: dict[str, Any], workers: str) -> None:
    g: Gateways = gw["g"]
    proc = ServiceProcess(
        tokenpath_argv("gateway", "--listen", "127.0.0.1:0", "--upstream", gw["stub"], "--no-auth", "--workers",
                       workers, "--tls-cert", str(g.tls.cert), "--tls-key", str(g.tls.key)),
        "gateway",
    )  # fmt: skip
    try:
        url = proc.start()
        assert url.startswith("https://")
        with httpx.Client(http2=True, verify=g.verify(), timeout=20) as client:
            resp = client.post(f"{url}/v1/chat/completions", json=CHAT)
        assert (resp.http_version, resp.status_code) == ("HTTP/2", 200)
        log = proc.log_tail(200)
        key = g.tls.key.read_text()
        assert "PRIVATE KEY" not in log
        assert key.splitlines()[1] not in log
    finally:
        proc.stop()


# the relay rule per stream --------------------------------------------------------------------------------------


def test_rst_stream_from_the_client_cancels_the_upstream(gw: dict[str, Any]) -> None:
    g: Gateways = gw["g"]
    stub = g.stub("--tokens", "2000", "--interval-ms", "20")
    url = g.gateway(stub)
    client = RawH2(*hostport(url))
    try:
        sid = client.request(token=token())
        assert client.wait(lambda: b'"content":" ' in client.data.get(sid, b""))
        stream_id = client.heads[sid][b"x-tokenpath-stream"].decode()
        client.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        state = ""
        for _ in range(100):  # bounded: 10 s
            state = fetch_audit(stub, [stream_id], with_log=False).streams[0].verdict.state
            if state != "running":
                break
            time.sleep(0.1)
        assert state == "client_gone"  # the stub saw the gateway abort its request, long before its 40 s end
        second = client.request({**CHAT, "tokenpath": {"tokens": 3}}, token=token())  # the connection lives
        assert client.wait(lambda: second in client.ended)
    finally:
        client.close()


def test_a_stream_whose_window_stays_closed_holds_only_itself_and_memory_stays_bounded(gw: dict[str, Any]) -> None:
    g: Gateways = gw["g"]
    # 32 MB for the stuck stream, as fast as the stub can write it (without the pause the gateway holds them all)
    stub = g.stub("--tokens", "8000", "--frame-bytes", "4000", "--interval-ms", "0", "--ttft-ms", "1")
    url = g.gateway(stub)
    proc = psutil.Process(g.pid(url))
    rss0 = proc.memory_info().rss
    client = RawH2(*hostport(url), window=1000)
    try:
        stuck = client.request(token=token())
        small = {**CHAT, "tokenpath": {"tokens": 5, "frame_bytes": 200}}
        flowing = client.request(small, token=token())
        # the stuck stream's DATA is never acknowledged: its window stays shut at 1,000 bytes
        assert client.wait(lambda: flowing in client.ended, ack=lambda sid: sid != stuck)
        assert len(client.data.get(stuck, b"")) <= 1000
        other = RawH2(*hostport(url))  # another client, meanwhile
        try:
            sid = other.request(small, token=token())
            assert other.wait(lambda: sid in other.ended)
        finally:
            other.close()
        time.sleep(1.5)  # the stub has written its 32 MB by now; the gateway must not be holding them
        grown = proc.memory_info().rss - rss0
        assert grown < 8 << 20, f"gateway RSS grew {grown >> 20} MiB behind one closed window"
        assert stuck not in client.ended
        assert stuck not in client.resets  # held, not dropped: it goes on when the client opens its window
        client.conn.increment_flow_control_window(1 << 25, stream_id=stuck)  # the client opens its window ...
        client.conn.increment_flow_control_window(1 << 25)
        client.flush()
        assert client.wait(lambda: stuck in client.ended, timeout_s=60)  # ... and gets every byte, in order
        assert content_tokens(bytes(client.data[stuck])) == 8000
    finally:
        client.close()


# hostile clients ------------------------------------------------------------------------------------------------


def healthy(url: str) -> None:
    """Another client gets a whole streamed answer."""
    with httpx.Client(http1=False, http2=True, timeout=20) as client:
        resp = client.post(f"{url}/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {token()}"})
        assert (resp.http_version, resp.status_code) == ("HTTP/2", 200)
        assert content_tokens(resp.content) == 8


def test_streams_past_the_configured_limit_are_refused_and_the_rest_served(gw: dict[str, Any]) -> None:
    g: Gateways = gw["g"]
    url = g.gateway(gw["stub"], limits="h2_max_concurrent_streams = 3")
    client = RawH2(*hostport(url), read_settings=False)  # opens before it has read the limit
    # all five in one write, each holding its first token: the first three are still open when the gateway reads the
    # last two (sent one by one, a client descheduled between them let stream 1 end first and stream 7 in)
    held = {**CHAT, "tokenpath": {"ttft_ms": 500}}
    try:
        sids = [client.request(held, token=token(), flush=False) for _ in range(5)]
        client.flush()
        assert client.wait(lambda: len(client.ended) + len(client.resets) == 5)
        assert client.conn.remote_settings.max_concurrent_streams == 3
        refused = {s for s, code in client.resets.items() if code == h2.errors.ErrorCodes.REFUSED_STREAM}
        assert refused == set(sids[3:])
        assert client.ended == set(sids[:3])
        assert client.goaway is None
        assert all(content_tokens(bytes(client.data[s])) == 8 for s in sids[:3])
    finally:
        client.close()
    healthy(url)


def _flood(client: RawH2, kind: str) -> None:
    conn = client.conn
    if kind == "ping":
        for i in range(3000):
            conn.ping(i.to_bytes(8, "big"))
    elif kind == "settings":
        for _ in range(3000):
            conn.update_settings({h2.settings.SettingCodes.ENABLE_PUSH: 0})
    elif kind == "rapid_reset":
        for _ in range(1000):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(b":method", b"GET"), (b":path", b"/v1/models"), (b":scheme", b"http"),
                                    (b":authority", b"t")], end_stream=True)  # fmt: skip
            conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    elif kind == "continuation":
        block = conn.encoder.encode([(b":method", b"GET"), (b":path", b"/v1/models"), (b":scheme", b"http"),
                                     (b":authority", b"t")])  # fmt: skip
        raw = len(block).to_bytes(3, "big") + b"\x01\x00" + (1).to_bytes(4, "big") + block  # no END_HEADERS
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed on us mid-flood, as below
            client.send_raw(raw + ((0).to_bytes(3, "big") + b"\x09\x00" + (1).to_bytes(4, "big")) * 10_000)
        return
    elif kind == "oversized_headers":
        conn.send_headers(1, [(b":method", b"GET"), (b":path", b"/v1/models"), (b":scheme", b"http"),
                              (b":authority", b"t"), (b"x-big", b"v" * 60_000)], end_stream=True)  # fmt: skip
    data = conn.data_to_send()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed on us mid-flood: what we want
        client.send_raw(data)


@pytest.mark.parametrize("kind", ["ping", "settings", "rapid_reset", "continuation", "oversized_headers"])
def test_floods_end_the_connection_and_the_gateway_stays_healthy(gw: dict[str, Any], kind: str) -> None:
    url = gw["h2c"]
    client = RawH2(*hostport(url))
    try:
        _flood(client, kind)
        assert client.wait(lambda: client.goaway is not None or client.closed, timeout_s=20)
        if client.goaway is not None:
            assert client.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert client.wait(lambda: client.closed, timeout_s=20)  # the gateway ended the connection
    finally:
        client.close()
    healthy(url)
    models = httpx.get(f"{url}/_tokenpath/health", timeout=10)  # and HTTP/1.1 on the same port
    assert models.status_code == 200
    assert json.loads(models.content)["status"] == "ok"


def test_sigterm_lets_an_open_h2_stream_finish_whole_then_says_goaway(gw: dict[str, Any]) -> None:
    g: Gateways = gw["g"]
    stub = g.stub("--tokens", "40", "--interval-ms", "20")
    url = g.gateway(stub)  # its own gateway: this one stops
    client = RawH2(*hostport(url))
    try:
        sid = client.request(token=token())
        assert client.wait(lambda: b'"content":" ' in client.data.get(sid, b""))
        os.kill(g.pid(url), signal.SIGTERM)
        assert client.wait(lambda: client.closed, timeout_s=20)  # the gateway ends the connection once drained
        body = bytes(client.data[sid])
        assert sid in client.ended
        assert sid not in client.resets
        assert content_tokens(body) == 40
        assert body.endswith(b"data: [DONE]\n\n")
        assert client.goaway is not None  # the last GOAWAY read: the final one, naming the stream it took
        assert (client.goaway.error_code, client.goaway.last_stream_id) == (h2.errors.ErrorCodes.NO_ERROR, sid)
    finally:
        client.close()
