"""Closed-loop virtual users on one event loop: each opens the next stream when its previous one ends.

Runs in-process or as one of several client processes (--client-workers); everything it returns is plain data so
it crosses a process boundary. Streams are counted when they *start* inside the measured window.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import random
import signal
import ssl
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import jwt

from tokenpath.errors import TokenpathError
from tokenpath.load.h2conn import H2LoadPool, StreamFlow, h2_request
from tokenpath.load.integrity import PLAIN, BeforeFirstToken, check_body
from tokenpath.load.lean import H2LeanRecorder, LeanRecorder
from tokenpath.load.tokens import content_text, token_number
from tokenpath.probe.aio import stream_with
from tokenpath.probe.client import ProbeConfig, StreamRequests, new_stream_id, request_bytes, request_parts
from tokenpath.probe.transport import TLSOptions
from tokenpath.serve.loops import new_event_loop
from tokenpath.stats import percentile
from tokenpath.stopsignals import STOP_SIGNALS
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.carrier import SSE, WEBSOCKET
from tokenpath.wire.ending import STREAM_END, EndKind
from tokenpath.wire.h2client import parse_h2_window
from tokenpath.wire.httpversion import HttpVersion
from tokenpath.wire.openai import chunk_id

if TYPE_CHECKING:  # HTTP/3 (aioquic) and WebSocket clients are imported by the streams that use them
    from aioquic.quic.configuration import QuicConfiguration

    from tokenpath.load.h3conn import H3StreamFigures
    from tokenpath.load.wsconn import WsStreamFigures

LAG_TICK_S = 0.05  # how often the client checks its own event-loop lag
RAMP_S = 0.5  # virtual users start spread over this, so streams do not run in lock-step
YOUNG_GC_THRESHOLD = 7000  # the collector's generation-0 threshold while a worker runs (run_worker says why)
STREAM_TIMEOUT_S = 120.0  # one stream, connect to last byte: far beyond any load-test stream (128 tokens x 14 ms)
STREAM_MARGIN_S = 10.0  # beyond three times the stream's own length: a path that holds it still ends within this


@dataclass(frozen=True, slots=True)
class Workload:
    url: str
    model: str
    prompt: str
    tokens: int
    max_streams: int  # the most streams open at once: closed loop keeps exactly this many (one per virtual user)
    warmup_s: float
    duration_s: float
    rate: float | None = None  # open loop: Poisson arrivals per second (wrk2-style, from the schedule)
    seed: int = 1
    api_key: str | None = field(default=None, repr=False)  # for targets that need one (LiteLLM)
    tls: TLSOptions = field(default_factory=TLSOptions)  # for an https target
    headers: tuple[tuple[str, str], ...] = ()  # sent with every stream (--header)
    request_model: str | None = None  # the name the target wants for `model` (a gateway's naming scheme)
    id_in_prompt: bool = False  # the stream id rides in the prompt too (a gateway that drops every other carrier)
    jwt: JWTMinter | None = field(default=None, repr=False)  # a fresh token per stream, for a JWT proxy
    api: Api = Api.OPENAI  # the streaming format: its route, body, and where its first content frame is
    accept_encoding: str | None = None  # sent as Accept-Encoding; the answer is decoded (ProbeConfig's rule)
    before_first_token: BeforeFirstToken = PLAIN  # what the stub's frames carry besides tokens (integrity re-renders)
    # HTTP/2 (load/h2conn.py): h2 by ALPN over TLS, h2c with prior knowledge over cleartext; never a fallback.
    http_version: HttpVersion = HttpVersion.HTTP11
    h2_window: str = "default"  # wire/h2client.parse_h2_window: "default", "browser", BYTES or STREAM:CONNECTION
    streams_per_connection: int = 1  # streams at once on one connection (fewer if the peer allows fewer)
    h3_window: str = "default"  # HTTP/3 (load/h3conn.py): probe/h3figures.parse_h3_window's spelling
    transport: str = SSE  # wire/carrier.py: `websocket` is the format's WebSocket mode (load/wsconn.py)
    # One stream, connect to last byte (stream_timeout_s(): from the stub's pacing). A target that accepts and never
    # answers held each level's streams, and so the level, for STREAM_TIMEOUT_S whatever --duration said.
    stream_timeout_s: float = STREAM_TIMEOUT_S


def stream_timeout_s(stream_ms: float) -> float:
    """How long one stream of the stub's pacing (`stream_ms`: its last token's time) may take before it counts as
    failed: three times its length and STREAM_MARGIN_S (a proxy that holds the whole answer ends well within), at
    most STREAM_TIMEOUT_S."""
    return min(STREAM_TIMEOUT_S, STREAM_MARGIN_S + 3 * stream_ms / 1000)


@dataclass(frozen=True, slots=True)
class JWTMinter:
    """Mints one HS256 token per stream (PyJWT): `exp` a few minutes out, `iat` now, plus the given claims."""

    secret: str = field(repr=False)
    claims: tuple[tuple[str, Any], ...] = ()
    lifetime_s: float = 300.0

    def token(self) -> str:
        now = int(time.time())
        return jwt.encode(
            {"iat": now, "exp": now + int(self.lifetime_s), **dict(self.claims)}, self.secret, algorithm="HS256"
        )


SAME_FAILURE_MIN = 50  # streams seen before a worker may give up on a level
SAME_FAILURE_SHARE = 0.9  # ... when at least this share of them failed with one and the same error


class FailureTally:
    """Streams of one worker run: when nearly all fail the same way (every request a 401), going on only piles up
    the same error; the worker stops the level and the runner says why, in one line."""

    def __init__(self) -> None:
        self.seen = 0
        self.errors: Counter[str] = Counter()
        self.examples: dict[str, str] = {}  # the first full message of each kind
        self.refused: list[StreamResult] = []  # streams whose WebSocket upgrade the path did not carry

    def add(self, result: StreamResult) -> None:
        self.seen += 1
        if result.ws is not None and not result.ws.upgraded and len(self.refused) < SAME_FAILURE_MIN:
            self.refused.append(result)
        if result.error is not None:
            kind = _error_kind(result.error)
            self.errors[kind] += 1
            self.examples.setdefault(kind, result.error)

    @property
    def stop_reason(self) -> str | None:
        if self.seen < SAME_FAILURE_MIN or not self.errors:
            return None
        kind, count = self.errors.most_common(1)[0]
        if count < SAME_FAILURE_SHARE * self.seen:
            return None
        example = self.examples[kind]
        detail = f"; e.g. {example}" if example != kind else ""
        return f"{count} of {self.seen} streams failed the same way ({kind}): level stopped early{detail}"

    def counted(self, results: list[StreamResult]) -> list[StreamResult]:
        """The level's streams: those started in its measured window; or, when refused WebSocket upgrades stopped
        it before that window began, those refusals (up to SAME_FAILURE_MIN): each is reported not upgraded, with
        its status, rather than a level of no streams at all."""
        if results or self.stop_reason is None:
            return results
        return list(self.refused)


def _error_kind(error: str) -> str:
    return error.split(":", 1)[0][:80]


@dataclass(slots=True)
class StreamResult:
    stream_id: str
    error: str | None = None
    first_token: int | None = None  # the stub's token number the first content frame carries (0 unless lost)
    first_content_t_ns: int | None = None
    first_token_t_ns: int | None = None  # the first reasoning or content frame's arrival (the first-token figure)
    audit_key: str = ""  # what to ask the stub's audit for: the chunks' completion id, else the stream id
    dispatch_lag_ns: int = 0  # open loop: how late the stream started against its schedule
    frames: int = 0
    lost: int = 0
    out_of_order: int = 0
    byte_exact: bool | None = False  # None: not compared byte for byte (formats other than OpenAI chat)
    content_encoding: str = "identity"  # the response's Content-Encoding, as decoded
    read_marks: array[int] | None = None  # LeanTrace.marks: each frame's arrival, once joined to the write sizes
    flow: StreamFlow | None = None  # over HTTP/2: DATA frames, reads, flow-control stalls of the stream
    end: EndKind | None = None  # how the stream ended (wire/ending.py); None: it never began (no connection...)
    h3: H3StreamFigures | None = None  # over HTTP/3: the handshake (apart from TTFT), datagrams, DATA reads
    ws: WsStreamFigures | None = None  # over WebSocket: the upgrade (status, time), messages per read, the close


@dataclass(slots=True)
class WorkerReport:
    results: list[StreamResult]
    cpu_s: float
    wall_s: float
    lag_p99_ms: float
    stopped: str | None = None  # why the worker ended the level early (FailureTally), else None
    # SIGINT/SIGTERM stopped the run (run_worker): the streams in flight were cancelled, never counted; `results`
    # holds those that ended before it.
    interrupted: bool = False
    connections: int = 0  # HTTP/2: connections opened
    peer_limit: int | None = None  # HTTP/2: the peer's SETTINGS_MAX_CONCURRENT_STREAMS, when below what was asked


async def closed_loop(work: Workload) -> WorkerReport:
    cfg = _probe_config(work)
    requests = StreamRequests(cfg)
    target = requests.target
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from, stop_at = start + work.warmup_s, start + work.warmup_s + work.duration_s
    results: list[StreamResult] = []
    lags: list[float] = []
    tally = FailureTally()
    pool = _h2_pool(work, cfg)

    async def user(k: int) -> None:
        await asyncio.sleep(k * min(RAMP_S, work.warmup_s or RAMP_S) / max(1, work.max_streams))
        while loop.time() < stop_at and tally.stop_reason is None:
            counted = loop.time() >= measure_from
            result = await one_stream(cfg, target.host, target.port, work, pool, requests)
            tally.add(result)
            if counted:
                results.append(result)

    cpu, wall = time.process_time(), time.monotonic()
    lag_task = asyncio.ensure_future(loop_lag(measure_from, stop_at, lags))
    users = [asyncio.ensure_future(user(k)) for k in range(work.max_streams)]
    interrupted = False
    try:
        await asyncio.gather(*users)
    except asyncio.CancelledError:  # run_worker's SIGINT/SIGTERM: the streams in flight are cancelled, not counted
        interrupted = await _interrupted(users)
    finally:
        if pool is not None:
            await pool.aclose()
    lag_task.cancel()  # the users may have stopped early (FailureTally): the lag monitor ends with them
    with contextlib.suppress(asyncio.CancelledError):
        await lag_task
    lags.sort()
    return _with_pool(
        WorkerReport(
            tally.counted(results),
            time.process_time() - cpu,
            time.monotonic() - wall,
            percentile(lags, 99) if lags else 0.0,
            tally.stop_reason,
            interrupted,
        ),
        pool,
    )


async def _interrupted(tasks: list[asyncio.Task[None]] | set[asyncio.Task[None]]) -> bool:
    """The run's task was cancelled (run_worker's signal handler): every stream task is cancelled too and waited
    for, so each closes its connection before the loop does (a stream left pending at loop.close() ran its cleanup
    with no loop: "no running event loop"). The task's cancel is taken back: the report is still made."""
    current = asyncio.current_task()
    if current is not None:
        current.uncancel()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return True


def _h2_pool(work: Workload, cfg: ProbeConfig) -> H2LoadPool | None:
    """The worker's HTTP/2 connections to its target (None over HTTP/1.1: a connection per stream, as always)."""
    if work.http_version is not HttpVersion.HTTP2:
        return None
    target = cfg.target
    ctx = _h2_tls_context(work.tls) if target.scheme == "https" else None
    per_connection, window = work.streams_per_connection, parse_h2_window(work.h2_window)
    return H2LoadPool(target.host, target.port, per_connection=per_connection, window=window, ssl_context=ctx)


def _with_pool(report: WorkerReport, pool: H2LoadPool | None) -> WorkerReport:
    if pool is not None:
        report.connections, report.peer_limit = pool.opened, pool.peer_limit
    return report


async def loop_lag(measure_from: float, stop_at: float, lags: list[float]) -> None:
    """The event loop's lateness (ms) every LAG_TICK_S, appended to `lags`, in the measured window only: during
    warm-up every user opens its first connection at once, and that lag says nothing about the figures reported."""
    loop = asyncio.get_running_loop()
    expected = loop.time() + LAG_TICK_S
    while loop.time() < stop_at:
        await asyncio.sleep(LAG_TICK_S)
        now = loop.time()
        if now >= measure_from:
            lags.append((now - expected) * 1000)
        expected = now + LAG_TICK_S


def _probe_config(work: Workload) -> ProbeConfig:
    return ProbeConfig(
        url=work.url,
        model=work.request_model or work.model,
        prompt=work.prompt,
        max_tokens=work.tokens,
        api_key=work.api_key,
        headers=work.headers,
        api=work.api,
        accept_encoding=work.accept_encoding,
        transport=work.transport,  # the request's parts only: the streams go through this module's own clients
    )


async def one_stream(
    cfg: ProbeConfig,
    host: str,
    port: int,
    work: Workload,
    pool: H2LoadPool | None = None,
    requests: StreamRequests | None = None,
) -> StreamResult:
    """One stream of `work`; `requests`: the config's requests built once (the worker's loops pass it), for a
    stream whose request differs only by its id (not one with its own token or its id in the prompt)."""
    sid = new_stream_id()
    result = StreamResult(sid)
    if work.jwt is not None:
        cfg = replace(cfg, api_key=work.jwt.token())
        requests = None
    if work.id_in_prompt:
        cfg = replace(cfg, prompt=f"{cfg.prompt} [tokenpath-stream:{sid}]")
        requests = None
    try:
        if work.transport == WEBSOCKET:
            from tokenpath.load.wsconn import WsLeanRecorder, ws_request, ws_stream

            ctx = _tls_context(work.tls) if cfg.target.scheme == "https" else None
            headers, body = request_parts(cfg, sid)
            offer = ws_request(cfg.api, cfg.target.host_header, cfg.target.path, headers, body)
            make_ws = functools.partial(WsLeanRecorder, api=cfg.api)
            trace, result.ws = await ws_stream(
                host, port, offer, sid, make_ws, api=cfg.api, timeout_s=work.stream_timeout_s, ssl_context=ctx
            )
        elif work.http_version is HttpVersion.HTTP3:
            from tokenpath.load.h3conn import h3_request, h3_stream

            headers, body = request_parts(cfg, sid)
            target = cfg.target
            request3 = h3_request(target.host_header, target.path, headers, body, SPECS[cfg.api].content_type)
            trace, result.h3 = await h3_stream(
                host,
                port,
                _quic_config(work.tls, work.url, work.h3_window),
                request3,
                sid,
                functools.partial(H2LeanRecorder, api=cfg.api),
                connect_timeout_s=cfg.connect_deadline_s,
                timeout_s=work.stream_timeout_s,
            )
        elif pool is not None:
            request = h2_request(requests.of(sid) if requests is not None else request_bytes(cfg, cfg.target, sid))
            make = functools.partial(H2LeanRecorder, api=cfg.api)
            trace, result.flow = await pool.stream(request, sid, make, timeout_s=work.stream_timeout_s)
        else:
            target = requests.target if requests is not None else cfg.target
            ctx = _tls_context(work.tls) if target.scheme == "https" else None
            trace = await stream_with(
                host,
                port,
                requests.of(sid) if requests is not None else request_bytes(cfg, target, sid),
                sid,
                functools.partial(LeanRecorder, api=cfg.api),
                timeout_s=work.stream_timeout_s,
                ssl_context=ctx,
            )
    except (TokenpathError, OSError, TimeoutError) as exc:
        result.error = str(exc) or type(exc).__name__
        cut = STREAM_END.of(exc)
        result.end = cut.kind if cut is not None else None
        return result
    result.end = trace.end.kind if trace.end is not None else None
    if result.ws is not None and not result.ws.upgraded:  # a path that did not carry the upgrade: never a stream
        from tokenpath.load.wsconn import NOT_CARRIED

        status = result.ws.upgrade_status
        said = f"HTTP {status} instead of 101" if status else "no valid answer"
        preview = " ".join(trace.error_preview.split())[:160]
        result.error = f"{NOT_CARRIED}: {said}" + (f": {preview}" if preview else "")
        return result
    if trace.status != (101 if result.ws is not None else 200):
        preview = " ".join(trace.error_preview.split())[:160]
        result.error = f"HTTP {trace.status or 'no response'}" + (f": {preview}" if preview else "")
        return result
    if trace.end is not None and trace.end.cut:  # never a complete stream, never in the TTFT figures
        result.error = f"{trace.end.kind.value}: {trace.end.detail}"
        return result
    result.content_encoding = trace.content_encoding
    result.read_marks = trace.marks
    if trace.first_content is not None:
        result.first_content_t_ns = trace.first_content_t_ns
        result.first_token_t_ns = trace.first_token_t_ns
        # Joined to the stub's write by what the frame says, not where it is: a gateway may drop or add frames,
        # and drop the stream id (then an OpenAI chunk's completion id still names the stub's stream).
        result.first_token = token_number(content_text(cfg.api, trace.first_content))
        openai_id = chunk_id(trace.first_content.raw) if cfg.api is Api.OPENAI else None
        result.audit_key = openai_id or sid
    integrity = check_body(trace.body, sid, work.model, work.tokens, cfg.api, work.before_first_token)
    result.frames = integrity.received
    result.lost = integrity.lost
    result.out_of_order, result.byte_exact = integrity.out_of_order, integrity.byte_exact
    return result


async def open_loop(work: Workload) -> WorkerReport:
    """Streams start on a Poisson schedule whatever the target does; latency counts from the scheduled start.

    When `max_streams` streams are already in flight the next one waits, and that wait is its dispatch lag: added
    to its TTFT in the corrected figure (coordinated omission), reported on its own too."""
    # LoadConfig refuses rates that are not finite, not > 0 or past MAX_RATE_PER_CLIENT: expovariate(inf) is 0,
    # and a schedule that never advances never ends.
    assert work.rate is not None
    assert 0 < work.rate < float("inf")
    cfg = _probe_config(work)
    requests = StreamRequests(cfg)
    target = requests.target
    loop = asyncio.get_running_loop()
    rng = random.Random(work.seed)
    start = loop.time()
    measure_from, stop_at = start + work.warmup_s, start + work.warmup_s + work.duration_s
    slots = asyncio.Semaphore(work.max_streams)
    results: list[StreamResult] = []
    tasks: set[asyncio.Task[None]] = set()
    tally = FailureTally()
    pool = _h2_pool(work, cfg)

    async def one(scheduled: float, counted: bool) -> None:
        async with slots:
            lag_ns = int(max(0.0, loop.time() - scheduled) * 1e9)
            result = await one_stream(cfg, target.host, target.port, work, pool, requests)
            result.dispatch_lag_ns = lag_ns
            tally.add(result)
            if counted:
                results.append(result)

    cpu, wall = time.process_time(), time.monotonic()
    scheduled = start
    lags: list[float] = []
    interrupted = False
    try:
        while True:
            scheduled += rng.expovariate(work.rate)
            if scheduled >= stop_at or tally.stop_reason is not None:
                break
            delay = scheduled - loop.time()
            # Behind the schedule the loop is still given a turn per arrival: the streams read, a signal is handled.
            await asyncio.sleep(max(0.0, delay))
            if scheduled >= measure_from:  # the measured window only, as in the closed loop
                lags.append(max(0.0, loop.time() - scheduled) * 1000)
            task = asyncio.create_task(one(scheduled, scheduled >= measure_from))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
    except asyncio.CancelledError:  # run_worker's SIGINT/SIGTERM: as closed_loop
        interrupted = await _interrupted(set(tasks))
    finally:  # as closed_loop: an exception (a cancel) must not leave the HTTP/2 connections open
        if pool is not None:
            await pool.aclose()
    lags.sort()
    lag_p99 = percentile(lags, 99) if lags else 0.0
    wall_s = time.monotonic() - wall
    report = WorkerReport(
        tally.counted(results), time.process_time() - cpu, wall_s, lag_p99, tally.stop_reason, interrupted
    )
    return _with_pool(report, pool)


@functools.lru_cache(maxsize=4)
def _quic_config(tls: TLSOptions, url: str, window: str) -> QuicConfiguration:
    """One QUIC configuration per client process (the CA bundle read once), shared by its connections."""
    from tokenpath.probe.h3figures import parse_h3_window
    from tokenpath.probe.h3stream import quic_configuration

    cfg = ProbeConfig(url=url, tls=tls)
    return quic_configuration(cfg, cfg.target, parse_h3_window(window))


@functools.lru_cache(maxsize=4)
def _tls_context(tls: TLSOptions) -> ssl.SSLContext:
    """One context per client process: it carries the TLS session cache."""
    return tls.context()


def _h2_tls_context(tls: TLSOptions) -> ssl.SSLContext:
    """The same, offering h2 by ALPN (TLSOptions.http2): a server that picks anything else fails the connection
    (load/h2conn.py checks the choice; never a fallback)."""
    return _tls_context(replace(tls, http2=True))


def ignore_stop_signals() -> None:
    """A client process's initializer (the runner's process pool): between runs SIGINT and SIGTERM are ignored, so
    a Ctrl-C that reaches the whole process group never breaks the pool; while a run goes, run_worker's handlers
    stop it cleanly, and the parent passes its own stop on to each process (runner.py _pool_clients)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def run_worker(work: Workload, stoppable: Callable[[Callable[[], None]], None] | None = None) -> WorkerReport:
    """Entry point of a client process (and of the in-process client).

    SIGINT and SIGTERM are the loop's own while it runs (in the main thread: an in-process client, a pool's process):
    the run's task is cancelled, its streams in flight with it (never counted), and the report of the streams that
    ended comes back with `interrupted` set. Without a handler, Python's KeyboardInterrupt was raised inside whatever
    ran (uvloop logged it from a transport's data_received, counted that stream an error, and the run went on).
    Whatever handlers were there before (the runner's, a pool process's SIG_IGN) are put back after. `stoppable` is
    given a function any thread may call to stop the run as a signal does (a Ray actor's, whose thread has none)."""
    loop = new_event_loop("uvloop")
    main = loop.create_task(open_loop(work) if work.rate else closed_loop(work))
    stopping: list[int] = []

    def stop(sig: int) -> None:
        if not stopping:  # once: a second signal must not cut the first's cleanup short
            stopping.append(sig)
            main.cancel()

    previous = _on_signals(loop, stop)
    if stoppable is not None:
        stoppable(lambda: _call_soon(loop, stop))
    # Every collector pass stops the loop with every stream in flight (their reads stamped late). A loaded client's
    # young objects are its streams' own, alive while they stream: at the default 700 the young generation filled
    # ~5 times a second with them, each pass ~1-2 ms and every tenth a generation-1 pass of ~10-20 ms (300 streams).
    # At YOUNG_GC_THRESHOLD they die (reference counting) before it fills: 3 passes in 9 s. Put back after the run:
    # an in-process client leaves the collector as it found it.
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *thresholds[1:])
    try:
        return loop.run_until_complete(main)
    except asyncio.CancelledError:  # stopped before the run's task began: nothing measured
        return WorkerReport([], 0.0, 0.0, 0.0, interrupted=True)
    finally:
        gc.set_threshold(*thresholds)
        _cancel_pending(loop)
        for sig in previous:
            loop.remove_signal_handler(sig)
        loop.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _call_soon(loop: asyncio.AbstractEventLoop, stop: Callable[[int], None]) -> None:
    """`stop` on `loop`'s thread, from another (RuntimeError once the loop is closed)."""
    loop.call_soon_threadsafe(stop, signal.SIGINT)


def _on_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[int], None]) -> dict[int, Any]:
    """SIGINT and SIGTERM to `stop` on `loop`; the handlers they had, to put back. None outside the main thread
    (a Ray actor's): signals are the main thread's."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        previous[sig] = signal.getsignal(sig)
        loop.add_signal_handler(sig, stop, sig)
    return previous


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    """Tasks still pending (the run failed with an exception) are cancelled and run to their end, as asyncio.run
    does, so none runs its cleanup after the loop is closed."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
