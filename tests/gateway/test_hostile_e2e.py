"""The gateway against hostile clients and faulty peers: each test is a way it was broken (issue 10), on a real
gateway process with real sockets on loopback."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest
from cryptography.hazmat.primitives import hashes, hmac

from tests.gateway.test_gateway_e2e import (
    CHAT,
    SECRET,
    Services,
    hostport,
    metric,
    pool,
    read_response,
    request,
    roundtrip,
    token,
)
from tokenpath.procs import ServiceProcess, tokenpath_argv
from tokenpath.proxies.base import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


class ScriptedUpstream:
    """A raw-socket upstream: records every request head it gets and answers with `script(sock, head)`."""

    def __init__(self, script: Callable[[socket.socket, bytes], None]) -> None:
        self.script = script
        self.heads: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
            while len(rest) < length:
                rest += conn.recv(65536)
            self.heads.append(head)
            self.script(conn, head)

    @property
    def targets(self) -> list[str]:
        return [h.split(b" ")[1].decode() for h in self.heads]

    def close(self) -> None:
        self._listener.close()


def sse_head(extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n" + extra + b"\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def content_event(text: str, crlf: bool = False) -> bytes:
    body = json.dumps({"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})  # fmt: skip
    end = b"\r\n\r\n" if crlf else b"\n\n"
    return b"data: " + body.encode() + end


ROLE_EVENT = (b'data: {"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
              b'"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n')  # fmt: skip


def ok_json(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")


@pytest.fixture
def recorder() -> Iterator[ScriptedUpstream]:
    upstream = ScriptedUpstream(ok_json)
    yield upstream
    upstream.close()


def wait_for_log(proc: ServiceProcess, text: str, timeout_s: float = 3.0) -> bool:
    """The gateway logs a request after answering it: give the line a moment to land."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in proc.log_path.read_text():
            return True
        time.sleep(0.05)
    return False


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / (1 << 20)


# 1. bodies are refused on the head, never buffered ------------------------------------------------------------


def test_unauthenticated_bodies_are_refused_on_the_head_and_never_buffered(
    svc: Services, recorder: ScriptedUpstream
) -> None:
    gw = svc.gateway(pool(recorder.url), auth=True)
    assert gw.pid is not None
    # The head alone gets the answer: nothing of the announced 8 MiB has been sent.
    with socket.create_connection(hostport(gw.url), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 8388608\r\n\r\n")
        t0 = time.monotonic()
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 401 "), reply[:80]
        assert time.monotonic() - t0 < 3
    before = rss_mib(gw.pid)
    body = b"x" * (8 << 20)

    def hostile(results: list[bytes]) -> None:
        with socket.create_connection(hostport(gw.url), timeout=10) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 8388608\r\n\r\n")
            with contextlib.suppress(OSError):
                sock.sendall(body)  # the gateway drops it (or resets once it has had enough)
            with contextlib.suppress(OSError):
                results.append(sock.recv(65536))

    results: list[bytes] = []
    threads = [threading.Thread(target=hostile, args=(results,)) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    grown = rss_mib(gw.pid) - before
    assert grown < 64, f"RSS grew {grown:.0f} MiB for 40 refused 8 MiB bodies"  # was ~320 MiB
    assert sum(r.startswith(b"HTTP/1.1 401 ") for r in results) >= 30  # the rest may see the reset after it
    assert recorder.heads == []


def _signed(header: dict[str, Any]) -> str:
    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    now = int(time.time())
    signing_input = f"{b64(header)}.{b64({'sub': 'x', 'exp': now + 300})}"
    mac = hmac.HMAC(SECRET.encode(), hashes.SHA256())
    mac.update(signing_input.encode())
    return f"{signing_input}.{base64.urlsafe_b64encode(mac.finalize()).rstrip(b'=').decode()}"


def test_crafted_tokens_are_a_401_and_a_good_one_passes(svc: Services, recorder: ScriptedUpstream) -> None:
    gw = svc.gateway(pool(recorder.url), auth=True)
    for header in ({"alg": "HS256", "crit": ["exp"]}, {"alg": "HS256", "kid": 7}, {"alg": ["HS256"]}):
        parser, _ = roundtrip(gw.url, request(CHAT, headers=f"Authorization: Bearer {_signed(header)}\r\n"
                                                            "Connection: close\r\n"))  # fmt: skip
        assert parser.head is not None
        assert parser.head.status == 401, header
    parser, _ = roundtrip(gw.url, request(CHAT, headers=f"Authorization: Bearer {token()}\r\nConnection: close\r\n"))
    assert parser.head is not None
    assert parser.head.status == 200
    assert "Traceback" not in gw.log_path.read_text()


# 2. workers die with their parent; a new group never shares a port with orphans ---------------------------------


def test_workers_die_with_their_parent_and_a_new_gateway_will_not_share_their_port(
    svc: Services, recorder: ScriptedUpstream, tmp_path: Path
) -> None:
    orphan_dir = Path(tempfile.gettempdir()) / "tokenpath-gw-metrics-999999999-left"
    orphan_dir.mkdir(exist_ok=True)
    port = free_port()
    metrics_port = free_port()
    gw = svc.gateway(f'workers = 2\nmetrics_listen = "127.0.0.1:{metrics_port}"\n' + pool(recorder.url))
    assert not orphan_dir.exists()  # a dead gateway's multiprocess dir is swept at start
    assert gw.pid is not None
    parent = psutil.Process(gw.pid)
    workers = [p for p in parent.children(recursive=True) if "resource_tracker" not in " ".join(p.cmdline())]
    assert len(workers) >= 2
    parent.kill()  # SIGKILL: no handler runs in the parent
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"workers outlived their parent: {[p.pid for p in alive]}"

    # A socket sharing the port by SO_REUSEPORT (what an orphan would hold): a new worker group must refuse it.
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    try:
        path = tmp_path / "again.toml"
        path.write_text(f'listen = "127.0.0.1:{port}"\nworkers = 2\n[auth]\nmode = "none"\n' + pool(recorder.url))
        proc = ServiceProcess(tokenpath_argv("gateway", "--config", str(path)), "gateway-again")
        with pytest.raises(Exception, match=r"already\s+listens"):
            proc.start(timeout_s=15)
        proc.stop()
    finally:
        squatter.close()


# 3. targets: normalised or refused, never forwarded unrouted ---------------------------------------------------


def test_targets_methods_and_headers_that_could_reach_elsewhere_are_refused(
    svc: Services, recorder: ScriptedUpstream
) -> None:
    gw = svc.gateway(pool(recorder.url + "/api"))
    url = gw.url

    def send(raw: bytes) -> int:
        parser, _ = roundtrip(url, raw)
        assert parser.head is not None
        return parser.head.status

    body = b"{}"
    post = b"Content-Length: 2\r\nConnection: close\r\n\r\n" + body
    assert send(b"POST /v1/../internal/reset HTTP/1.1\r\nHost: t\r\n" + post) == 400
    assert send(b"POST /v1/%2e%2e/internal/reset HTTP/1.1\r\nHost: t\r\n" + post) == 400
    assert send(b"POST /v1/chat%2fcompletions HTTP/1.1\r\nHost: t\r\n" + post) == 400
    assert send(b"TRACE /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n") == 405
    assert send(b"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n") == 400  # no Host
    assert send(b"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n") == 400
    websocket = b"GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    assert send(websocket) == 400
    assert recorder.heads == []  # none of those reached the upstream

    # absolute-form: routed on its path, forwarded in origin-form under the member's base path
    assert send(b"POST http://gw.example/v1/chat/completions HTTP/1.1\r\nHost: gw.example\r\n" + post) == 200
    assert recorder.targets[-1] == "/api/v1/chat/completions"
    # an h2c offer (curl --http2 http://...) is answered in HTTP/1.1 and the offer is not forwarded
    h2c = (b"GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")  # fmt: skip
    with socket.create_connection(hostport(url), timeout=5) as sock:
        sock.sendall(h2c)
        parser, _ = read_response(sock)
        assert parser.head is not None
        assert parser.head.status == 200
    forwarded = recorder.heads[-1].lower()
    assert b"upgrade" not in forwarded
    assert b"http2-settings" not in forwarded
    # trailers of a chunked body never become upstream headers
    chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close"
               b"\r\n\r\n2\r\n{}\r\n0\r\nX-Smuggled: 1\r\n\r\n")  # fmt: skip
    assert send(chunked) == 200
    assert b"x-smuggled" not in recorder.heads[-1].lower()


def test_more_than_16_pipelined_requests_get_answers_then_the_429(svc: Services, recorder: ScriptedUpstream) -> None:
    gw = svc.gateway(pool(recorder.url))
    with socket.create_connection(hostport(gw.url), timeout=10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n" * 20)
        out = b""
        deadline = time.monotonic() + 10
        while b" 429 " not in out and time.monotonic() < deadline:
            piece = sock.recv(65536)
            if not piece:
                break
            out += piece
    assert out.count(b"HTTP/1.1 200 OK") >= 15
    assert b"HTTP/1.1 429 " in out  # was: the connection dropped with no answer


def test_expect_100_continue_is_answered(svc: Services, recorder: ScriptedUpstream) -> None:
    gw = svc.gateway(pool(recorder.url))
    data = json.dumps(CHAT).encode()
    with socket.create_connection(hostport(gw.url), timeout=5) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode())  # fmt: skip
        t0 = time.monotonic()
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        assert time.monotonic() - t0 < 0.9  # curl gives up waiting after 1 s
        sock.sendall(data)
        parser, _ = read_response(sock)
        assert parser.head is not None
        assert parser.head.status == 200
    assert b"expect" not in recorder.heads[-1].lower()


# 8. an upstream dying mid-event -----------------------------------------------------------------------------------


def _dies_mid_event(sock: socket.socket, head: bytes) -> None:
    sock.sendall(sse_head() + chunk(ROLE_EVENT + content_event("hello")))
    time.sleep(0.05)
    sock.sendall(chunk(b'data: {"id":"cmpl-1","object":"chat.compl'))
    time.sleep(0.05)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset


def test_an_upstream_dying_mid_event_is_an_api_error_for_the_openai_client(svc: Services) -> None:
    upstream = ScriptedUpstream(_dies_mid_event)
    try:
        gw = svc.gateway(pool(upstream.url))
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        got: list[str | None] = []
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
        with pytest.raises(openai.APIError) as info:
            got.extend(part.choices[0].delta.content for part in stream)
        assert not isinstance(info.value, json.JSONDecodeError)
        assert "upstream failed mid-response" in str(info.value)
        assert "hello" in got
        _, body = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert b"chat.compl" not in body.split(b"\n\n")[-2]  # the half event never reached the client
        assert body.split(b"\n\n")[-2].startswith(b"event: error\ndata: ")
    finally:
        upstream.close()


# 9. a client that stops reading is not the member's fault ---------------------------------------------------------


def test_a_client_that_stops_reading_is_named_and_the_member_keeps_its_health(svc: Services) -> None:
    stub = svc.stub("--tokens", "20000", "--frame-bytes", "2048", "--ttft-ms", "1", "--interval-ms", "0.05")
    metrics_port = free_port()
    gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n[limits]\nidle_timeout_s = 1.0\n'
                     "[health]\neject_after = 1\n" + pool(stub))  # fmt: skip
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(hostport(gw.url))
        sock.sendall(request(CHAT))
        time.sleep(3.5)  # read nothing: the buffers fill, the gateway pauses the upstream, then gives up
    murl = f"http://127.0.0.1:{metrics_port}/metrics"
    assert metric(murl, 'tokenpath_gateway_errors_total{reason="client_stalled"}') == 1
    assert metric(murl, 'tokenpath_gateway_errors_total{reason="idle_timeout"}') == 0  # was: blamed the upstream
    assert metric(murl, 'tokenpath_gateway_member_healthy{member="' + stub) == 1
    assert wait_for_log(gw, "the client read nothing")


# upstream TTFT means the first token; frames are counted by the SSE rules ------------------------------------------


def _slow_first_token(sock: socket.socket, head: bytes) -> None:
    sock.sendall(sse_head() + chunk(ROLE_EVENT) + chunk(b": keep-alive\n\n"))  # head, role, heartbeat at once
    time.sleep(0.5)
    first = content_event("one", crlf=True)
    sock.sendall(chunk(first[:20]))  # one CRLF event split across two reads
    time.sleep(0.05)
    sock.sendall(chunk(first[20:]) + chunk(content_event("two", crlf=True) + b"data: [DONE]\r\n\r\n") + b"0\r\n\r\n")


def test_upstream_ttft_is_the_first_content_frame_and_frames_are_counted_by_sse_rules(svc: Services) -> None:
    upstream = ScriptedUpstream(_slow_first_token)
    try:
        metrics_port = free_port()
        gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n' + pool(upstream.url))
        parser, body = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert body.endswith(b"data: [DONE]\r\n\r\n")
        murl = f"http://127.0.0.1:{metrics_port}/metrics"
        assert metric(murl, "tokenpath_gateway_upstream_head_seconds_sum") < 0.3
        assert metric(murl, "tokenpath_gateway_upstream_ttft_seconds_sum") >= 0.5  # was: time to the head
        assert metric(murl, "tokenpath_gateway_frames_relayed_total") == 5  # role, comment, one, two, [DONE]
    finally:
        upstream.close()


def _endless_head(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\n")
    with contextlib.suppress(OSError):
        for _ in range(100_000):
            sock.sendall(b"X-Filler: " + b"a" * 1000 + b"\r\n")


def test_an_endless_upstream_head_is_a_502_not_memory(svc: Services) -> None:
    upstream = ScriptedUpstream(_endless_head)
    try:
        gw = svc.gateway(pool(upstream.url))
        parser, _ = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 502
        assert wait_for_log(gw, "head larger than")
    finally:
        upstream.close()


# 11. what else was found ------------------------------------------------------------------------------------------


def test_running_out_of_descriptors_is_a_503_and_the_member_stays_healthy(
    svc: Services, recorder: ScriptedUpstream
) -> None:
    metrics_port = free_port()
    gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n[health]\neject_after = 1\n' + pool(recorder.url))
    assert gw.pid is not None
    proc = psutil.Process(gw.pid)
    spare = 6
    limit = proc.num_fds() + spare
    proc.rlimit(psutil.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    conns = [socket.create_connection(hostport(gw.url), timeout=5) for _ in range(spare)]
    try:
        time.sleep(0.2)  # every descriptor the gateway may open is now taken by an accepted client
        conns[-1].sendall(request(CHAT, headers="Connection: close\r\n"))
        parser, body = read_response(conns[-1])
        assert parser.head is not None
        assert parser.head.status == 503
        assert json.loads(body)["error"]["code"] == "overloaded"
    finally:
        for c in conns:
            c.close()
    time.sleep(0.2)
    murl = f"http://127.0.0.1:{metrics_port}/metrics"
    assert metric(murl, 'tokenpath_gateway_member_healthy{member="' + recorder.url) == 1  # was: ejected


def test_idle_metrics_connections_cost_no_thread_each(svc: Services, recorder: ScriptedUpstream) -> None:
    metrics_port = free_port()
    gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n' + pool(recorder.url))
    assert gw.pid is not None
    proc = psutil.Process(gw.pid)
    baseline = proc.num_threads()
    idle = [socket.create_connection(("127.0.0.1", metrics_port), timeout=5) for _ in range(40)]
    try:
        time.sleep(0.5)
        assert proc.num_threads() <= baseline + 4  # was one thread per idle connection (40 more)
    finally:
        for c in idle:
            c.close()
    time.sleep(0.3)
    assert metric(f"http://127.0.0.1:{metrics_port}/metrics", "tokenpath_gateway_streams_active") == 0


def test_health_says_503_while_draining(svc: Services) -> None:
    stub = svc.stub()
    gw = svc.gateway("[limits]\ndrain_s = 10\n" + pool(stub))
    assert gw.pid is not None
    body = {**CHAT, "tokenpath": {"ttft_ms": 5, "interval_ms": 50, "tokens": 40}}
    health = b"GET /_tokenpath/health HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.create_connection(hostport(gw.url), timeout=20) as keep, \
         socket.create_connection(hostport(gw.url), timeout=20) as stream:  # fmt: skip
        keep.sendall(health)
        parser, _ = read_response(keep)
        assert parser.head is not None
        assert parser.head.status == 200
        stream.sendall(request(body))
        read_response(stream, until=lambda b: b.count(b"content") >= 2)
        os.killpg(gw.pid, signal.SIGTERM)
        time.sleep(0.3)
        keep.sendall(health)
        parser, answer = read_response(keep)
        assert parser.head is not None
        assert parser.head.status == 503  # a load balancer stops sending new work here
        assert json.loads(answer)["status"] == "draining"
