"""The stub's routes: every streaming API format's (stub/formats/), paced, the OpenAI model list, and the audit and
clock endpoints."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from functools import partial
from typing import Any
from urllib.parse import parse_qs

from tokenpath.audit import State, completion_id, reply_json, reply_summary
from tokenpath.clock import NS_PER_MS, Clock, monotonic_ns
from tokenpath.errors import BadRequest, UsageError
from tokenpath.serve.http import Request, Response, compact_json
from tokenpath.stub.audit import AuditStore, StreamRecorder
from tokenpath.stub.auditslices import Encoded
from tokenpath.stub.config import (
    MAX_MODEL_CHARS,
    MAX_STREAM_ID_CHARS,
    Pacing,
    StubConfig,
    response_headers,
    valid_stream_id,
)
from tokenpath.stub.formats import FORMATS, ApiFormat, Route, Router
from tokenpath.stub.formats.base import Ask
from tokenpath.stub.formats.openai import prompt_stream_id
from tokenpath.stub.frames import STEP_FRAMES, StreamRequest, StreamShape
from tokenpath.stub.loopshare import LoopShare, Steps, finish, shared
from tokenpath.stub.pacing import Pacer, schedule_steps
from tokenpath.stub.plan import WritePlan, plan_steps
from tokenpath.stub.presets import OriginBehaviour, parse_http10_framing, relevant_headers
from tokenpath.stub.realtime import RealtimeSession
from tokenpath.stub.replay import Recording
from tokenpath.stub.replay import load as load_recording
from tokenpath.stub.replay import plan as replay_plan
from tokenpath.stub.replywriter import ReplyWriter
from tokenpath.stub.siblings import RECORDS_TYPE, AskerGone, Working, ask_siblings, record_head
from tokenpath.stub.websocket import FrameWriter, MessageWriter, WebSocketSession, sse_data
from tokenpath.wire.apis import Api
from tokenpath.wire.formats.openai import error_body
from tokenpath.wire.limits import WRITE_BUFFER_HIGH
from tokenpath.wire.request import STREAM_HEADER
from tokenpath.wire.websocket import OfferRefused, is_websocket_offer, switching_protocols, websocket_key

__all__ = ["AUDIT_PREFIX", "PacedStream", "StubApp", "prompt_stream_id"]

# A WebSocket session by the client events it takes (ApiFormat.ws_dialect).
SESSIONS: dict[str, type[WebSocketSession]] = {"response.create": WebSocketSession, "conversation": RealtimeSession}

AUDIT_PREFIX = "/_tokenpath/audit"
_NO_STREAMS = b'"streams":[]'  # where a reply made with no entries takes them: no JSON string can hold it
AUDIT_LOOKUP_WAIT_S = 1.0  # how long a lookup waits for a stream still running (or not yet seen) in a sibling
# The `tokenpath` member's keys that say what the origin does besides pacing (read here, not by Pacing).
# `plain_origin`: this answer as a plain origin's (close-delimited to HTTP/1.0, none of the stub's own ORIGIN_HEADERS;
# the member's `http10_framing` and `headers` still go on top): the baseline diagnose measures a path's verdict against.
ORIGIN_MEMBERS = frozenset({"headers", "http10_framing", "replay", "plain_origin"})

log = logging.getLogger(__name__)

_ROUTES: dict[str, tuple[str, ...]] = {  # the control plane's; the formats' routes are found by stub.formats.Router
    "/v1/models": ("GET",),
    "/_tokenpath/health": ("GET",),
    "/_tokenpath/time": ("GET",),  # the stub's CLOCK_MONOTONIC, for a client on another host to estimate its offset
    AUDIT_PREFIX: ("GET", "POST"),
}


# A stream paused on a client that takes nothing for this long is dropped, connection and frames: a client that
# never reads would otherwise hold a whole stream's frames (up to the 32 MB limit) for as long as it stays connected.
STALL_S = 30.0
BATCH_BYTES = WRITE_BUFFER_HIGH  # the most the head takes of the frames due with it (as much as is queued)
# A stream of more frames than this whose shape is not cached is rendered, framed and scheduled in slices
# (stub/loopshare.py) before its head is written. At 3-7 us a frame (Bedrock's the most), 256 frames take ~1-2 ms in
# one step, within the audit's 2 ms; the short streams an experiment sends by the thousand stay synchronous.
SLICED_FRAMES = 256
# A build gives the loop a turn after every step past this (a step: ~0.2-0.5 ms, STEP_FRAMES frames): a stream's
# frame due meanwhile waits for one step, not for LoopShare's 1 ms (a short stream beside 16 builds: its writes'
# worst drift 1.7 ms at the median with 1 ms slices).
BUILD_SLICE_NS = 250_000


def _ended(deadline_ns: int) -> None:
    """An ended stream's frame callback: it has no frame left to write (nothing schedules it)."""


class PacedStream:
    """One streamed response: each frame is written at started + offset on the pacer and logged."""

    def __init__(
        self,
        response: FrameWriter,
        wire: list[bytes],
        sizes: list[int],
        offsets: list[int],
        log: StreamRecorder,
        pacer: Pacer,
        audit: AuditStore,
        clock: Clock,
        on_done: Callable[[PacedStream], None],
    ) -> None:
        self._response = response
        self._on_done = on_done
        self._wire = wire  # each frame as it goes on the wire (chunk-framed when chunked; the last ends the body)
        self._sizes = sizes  # SSE bytes of each frame, for the audit
        self._last = len(wire) - 1
        self._offsets = offsets
        self._log = log
        self._pacer = pacer
        self._audit = audit
        self._clock = clock
        self._next = 0
        self._token: int | None = None
        self._fire_cb = self._fire  # bound once: it is scheduled once per frame
        self.done = False
        # The client's buffer is full (on_pause): a frame that falls due is held, then written on resume, late by as
        # much as the client kept it waiting (the audit logs the real write time). Frames never queue up unread.
        self._paused = False
        self._held = False
        self._stall: asyncio.TimerHandle | None = None

    def start(self, head: bytes, head_offset_ns: int = 0) -> None:
        """Writes the head now, with every frame due at offset 0 (the role delta) in the same write, as a model
        server does; scheduling those through the pacer would make them wait for every other request that
        arrived in the same batch and log that wait as drift. With `head_offset_ns` (the head held for the first
        token) the head and the frames due by then leave at that moment instead, in one write."""
        self._response.on_abort = self.abort
        self._response.on_pause = self._pause
        self._response.on_resume = self._resume
        # A carrier pauses only what is current when its buffer fills: a stream that starts behind a pipelined or
        # earlier response (or on a paused HTTP/2 connection) asks.
        self._paused = self._response.writing_paused
        if head_offset_ns:
            due = self._log.started_ns + head_offset_ns
            self._token = self._pacer.call_at(due, lambda _: self._head(head, head_offset_ns))
        else:
            self._head(head, 0)

    def _head(self, head: bytes, due: int) -> None:
        """The head, and the frames due at its offset `due` with it, up to BATCH_BYTES: any more (a stream paced at
        0 ms) leave one write each, as every later frame does, each only while the client takes them (the whole
        stream in one write would be queued in memory whether the client reads or not)."""
        self._token = None
        out = [head]
        size = len(head)
        started = self._log.started_ns
        while self._next < self._last and self._offsets[self._next] == due and size < BATCH_BYTES:
            wire = self._wire[self._next]
            out.append(wire)
            size += len(wire)
            self._log.record(started + due, self._clock(), self._sizes[self._next])
            self._next += 1
        self._response.write(b"".join(out))
        self._schedule()

    def abort(self) -> None:
        """The client left: drop the pending write now, so the stream costs nothing more."""
        if self._token is not None:
            self._pacer.cancel(self._token)
            self._token = None
        if not self.done:
            self._end("client_gone")

    def _pause(self) -> None:
        self._paused = True

    def _resume(self) -> None:
        self._paused = False
        if self._held and not self.done:
            self._held = False
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None
            self._fire(self._log.started_ns + self._offsets[self._next])

    def _hold(self) -> None:
        """A frame fell due while the client's buffer is full: written on resume; dropped with the client if it
        takes nothing for STALL_S (the stall counts from the first held frame, not from a pause with none due)."""
        self._held = True
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(STALL_S, self._stalled)

    def _stalled(self) -> None:
        self._stall = None
        if not self.done:
            response = self._response
            self.abort()  # first: the stream's callbacks cut, so nothing the reset sets off reaches it
            response.abort_connection()

    def _end(self, state: State) -> None:
        self.done = True
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        # The response's callbacks and the bound _fire refer to this stream: the cycles cut, so reference counting
        # frees the stream and its connection now, not the cyclic collector (tests/load/test_no_cycles.py).
        self._response.on_abort = self._response.on_pause = self._response.on_resume = None
        self._fire_cb = _ended
        self._audit.close(self._log, state)
        self._on_done(self)

    def _schedule(self) -> None:
        self._token = self._pacer.call_at(self._log.started_ns + self._offsets[self._next], self._fire_cb)

    def _fire(self, deadline_ns: int) -> None:
        # The hot path: one call per frame per stream. Everything that can be is computed before the stream.
        self._token = None
        if self._paused:
            self._hold()
            return
        i = self._next
        last = i == self._last
        self._log.record(deadline_ns, self._clock(), self._sizes[i])
        self._response.write(self._wire[i], last=last)
        self._next = i + 1
        if last:
            self._end("complete")
        else:
            self._schedule()


class StubApp:
    def __init__(self, cfg: StubConfig, pacer: Pacer, audit: AuditStore, clock: Clock = monotonic_ns) -> None:
        self.cfg = cfg
        self.pacer = pacer
        self.audit = audit
        self.clock = clock
        self._offset_ns = round(cfg.clock_offset_ms * NS_PER_MS)
        self._rng = random.Random(cfg.seed)
        self._router = Router()
        self._served = frozenset(cfg.apis)
        self._default_pacing = cfg.pacing  # built once: every request without a `tokenpath` member uses it
        self._recordings, self._replays = load_recordings(cfg)
        self.streams: set[PacedStream] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._builds: set[asyncio.Task[None]] = set()  # large streams' shapes being built in slices
        # One build at a time: each gives the loop a turn every SLICE_NS, but 16 built at once each ran a slice
        # between two of the loop's polls, and a short stream's frame due meanwhile waited for all of them (its
        # writes 8 ms late at the median; the builds one after another, on time).
        self._one_build = asyncio.Lock()

    def __call__(self, request: Request, response: Response) -> None:
        path = request.path
        found = self._router.find(path)
        if found is not None:
            self._format_route(request, response, *found)
            return
        route = AUDIT_PREFIX if path.startswith(AUDIT_PREFIX + "/") else path
        methods = _ROUTES.get(route)
        if methods is None:
            response.send_json(404, error_body(f"no route for {path}", "invalid_request_error", "not_found"))
            return
        if request.method not in methods:
            allow = ", ".join(methods)
            message = f"{request.method} is not allowed on {path}; use {allow}"
            response.send_json(405, error_body(message, "invalid_request_error"), [("Allow", allow)])
            return
        if route == "/v1/models":
            model = {"id": self.cfg.model, "object": "model", "created": 0, "owned_by": "tokenpath"}
            response.send_json(200, {"object": "list", "data": [model]})
        elif route == "/_tokenpath/health":
            pacing = self._default_pacing.to_json(with_frame=True)  # what a client must expect
            apis = [a.value for a in self.cfg.apis]
            # What this stub does besides pacing that a path acts on (its preset's, or its flags'): diagnose says
            # when a path's verdict rests on it.
            origin = OriginBehaviour(parse_http10_framing(self.cfg.http10_framing), relevant_headers(self.cfg.headers))
            health = {"status": "ok", "active_streams": len(self.streams), "pacing": pacing, "apis": apis}
            response.send_json(200, {**health, "origin": origin.to_json()})
        elif route == "/_tokenpath/time":
            response.send_json(200, {"t_ns": self.clock() + self._offset_ns})
        else:
            self._audit_lookup(request, response)

    # streaming routes -------------------------------------------------------------------------------
    def _format_route(self, request: Request, response: Response, fmt: ApiFormat, route: Route) -> None:
        if fmt.api not in self._served:
            served = "; ".join(FORMATS[a].describe() for a in self.cfg.apis)
            message = (
                f"{request.path} is the {fmt.api.value} API's route, which this stub does not serve "
                f"(--api {self.cfg.api}: {served}); start it with --api {fmt.api.value} or --api all"
            )
            _refuse(response, fmt, 404, message)
        elif fmt.websocket_only and not is_websocket_offer(request.headers):
            # RFC 9110 15.5.22: a 426 names the protocol to upgrade to.
            message = f"{request.path} is the {fmt.api.value} API's, WebSocket only: GET with Upgrade: websocket"
            _refuse(response, fmt, 426, message, ("Upgrade", "websocket"))
        elif request.method != "POST" and not (fmt.websocket and is_websocket_offer(request.headers)):
            message = f"{request.method} is not allowed on {request.path}; use POST"
            _refuse(response, fmt, 405, message, ("Allow", "POST"))
        elif fmt.websocket and is_websocket_offer(request.headers):
            self._websocket(request, response, fmt, route)
        else:
            self._generate(request, response, fmt, route)

    def _generate(self, request: Request, response: Response, fmt: ApiFormat, route: Route) -> None:
        started = self.clock()
        try:
            body = _json_object(request.body)
            ask = fmt.parse(body, request, route, self.cfg.model)
            pacing, extra_headers, origin = self._pacing(body, fmt)
            req = self._stream_request(request, body, fmt, route, ask, pacing)
            replay = origin.replay if ask.stream else None
            steps = fmt.shape_steps(req, pacing) if ask.stream and replay is None else None
            shape = None if steps is None else _shape_now(steps, req.tokens + pacing.reasoning_tokens)
            if pacing.heartbeat_ms and fmt.heartbeat is None and replay is None:
                raise BadRequest(f"'heartbeat_ms': {fmt.no_heartbeat}")
        except (BadRequest, UsageError) as exc:  # UsageError: a frame size the request asked for cannot hold its frames
            _refuse(response, fmt, 400, str(exc))
            return
        own = [h for h in self.cfg.headers if not (origin.plain and relevant_headers([h]))]
        headers = [(STREAM_HEADER, req.stream_id), *own, *extra_headers]
        if replay is not None:
            self._replay(response, req, replay, started, headers)
            return
        if steps is None:
            log = self.audit.open(req.stream_id, pacing.interval_ms, started, 0, writes=1)
            self._whole(response, fmt, req, log, headers, pacing)
            return
        http10_chunked = origin.http10_framing == "chunked"
        if shape is None:  # large and not cached: the rest of its build in slices, then on as below
            built = self._built_stream(steps, response, fmt, req, pacing, started, headers, http10_chunked)
            self._build(built, response)
            return
        head = response.start_stream(200, _merged(fmt.stream_headers, headers), http10_chunked=http10_chunked)
        wire = shape.wire(response.chunked, completion_id(req.stream_id))
        beat = fmt.heartbeat
        heartbeat = None if beat is None else (response.frame(beat), len(beat))
        self._paced(response, req, pacing, shape, started, head, wire, heartbeat)

    async def _built_stream(
        self,
        steps: Steps[StreamShape],
        response: Response,
        fmt: ApiFormat,
        req: StreamRequest,
        pacing: Pacing,
        started: int,
        headers: list[tuple[str, str]],
        http10_chunked: bool,
    ) -> None:
        """`_generate`'s stream, its shape's build (begun), its framing and its schedule done in slices, then its
        head and frames written exactly as a short stream's: the audit log opened only once it starts."""
        share = LoopShare(self.clock, BUILD_SLICE_NS)
        try:
            shape = await shared(steps, share)
        except UsageError as exc:  # met by a later frame: still before the head
            _refuse(response, fmt, 400, str(exc))
            return
        head = response.start_stream(200, _merged(fmt.stream_headers, headers), http10_chunked=http10_chunked)
        wire = await shared(shape.wire_steps(response.chunked, completion_id(req.stream_id)), share)
        beat = fmt.heartbeat
        heartbeat = None if beat is None else (response.frame(beat), len(beat))
        plan = await shared(self._plan(pacing, shape, wire, heartbeat), share)
        self._start_paced(response, req, pacing, started, head, plan)

    def _build(self, built: Coroutine[Any, Any, None], writer: FrameWriter) -> None:
        """`built` as a task, cancelled if the client leaves first (nothing is open until it starts the stream)."""

        async def guarded() -> None:
            try:
                async with self._one_build:
                    await built
            except Exception:  # a bug costs its request, as the server's handler guard has it: never a silent hang
                log.exception("building a large stream failed")
                writer.abort_connection()
            finally:
                built.close()  # cancelled while it waited its turn: never started (no "never awaited" warning)

        task = asyncio.get_running_loop().create_task(guarded())
        self._builds.add(task)
        task.add_done_callback(self._builds.discard)

        def cancel() -> None:
            task.cancel()

        writer.on_abort = cancel

    def cancel_builds(self) -> None:
        """The stub is closing: streams still being built are dropped (none has written or opened anything)."""
        for task in list(self._builds):
            task.cancel()

    def _paced(
        self,
        writer: FrameWriter,
        req: StreamRequest,
        pacing: Pacing,
        shape: StreamShape,
        started: int,
        head: bytes,
        wire: list[bytes],
        heartbeat: tuple[bytes, int] | None,
    ) -> None:
        """One stream's frames (`wire`, as its transport carries them) on the pacer, audited: every transport's."""
        self._start_paced(writer, req, pacing, started, head, finish(self._plan(pacing, shape, wire, heartbeat)))

    def _plan(
        self, pacing: Pacing, shape: StreamShape, wire: list[bytes], heartbeat: tuple[bytes, int] | None
    ) -> Steps[WritePlan]:
        """Every write of the stream and when: its frames' schedule, and what real servers send around the first
        token, a pause (stub/plan.py) when its pacing asks for them."""
        offsets = yield from schedule_steps(
            len(shape.sizes),
            lead_frames=shape.lead,
            ttft_ms=pacing.ttft_ms,
            interval_ms=pacing.interval_ms,
            jitter=self.cfg.jitter,
            rng=self._rng,
            with_next=shape.with_next,
        )
        if not pacing.planned:  # the hot path: the frames as rendered, audited without reasoning marks
            return WritePlan(wire, shape.sizes, offsets, shape.first_content)
        return (
            yield from plan_steps(
                shape,
                wire,
                offsets,
                heartbeat=heartbeat,
                heartbeat_ms=pacing.heartbeat_ms,
                head_at_first_token=pacing.head_at == "first-token",
                pause_ms=pacing.pause_ms,
                pause_after=pacing.pause_after,
            )
        )

    def _start_paced(
        self, writer: FrameWriter, req: StreamRequest, pacing: Pacing, started: int, head: bytes, plan: WritePlan
    ) -> None:
        """The stream's audit log opened (charged for every write it plans) and its head written: it runs."""
        log = self.audit.open(
            req.stream_id,
            pacing.interval_ms,
            started,
            plan.first_content,
            plan.reasoning,
            plan.heartbeats,
            writes=len(plan.sizes),
        )
        stream = PacedStream(
            writer,
            plan.wire,
            plan.sizes,
            plan.offsets,
            log,
            self.pacer,
            self.audit,
            self.clock,
            self.streams.discard,
        )
        self.streams.add(stream)
        stream.start(head, plan.head_offset_ns)

    # WebSocket mode ---------------------------------------------------------------------------------
    def _websocket(self, request: Request, response: Response, fmt: ApiFormat, route: Route) -> None:
        """An upgrade on a route that speaks WebSocket mode (the Responses API's): 101, then a session that turns
        each response.create into the same events as the SSE stream, one per message."""
        try:
            key = websocket_key(request.method, request.headers)
        except OfferRefused as exc:  # answered in HTTP and closed: the server's core adds its Connection: close
            extra = [("Sec-WebSocket-Version", "13")] if exc.status == 426 else []  # (a second one was sent here)
            _refuse(response, fmt, exc.status, str(exc), *extra)
            return
        session = SESSIONS[fmt.ws_dialect](request, partial(self._ws_response, fmt, route), self.clock)
        response.switch_protocols(switching_protocols(key), session)

    def _ws_response(
        self, fmt: ApiFormat, route: Route, request: Request, body: dict[str, Any], writer: MessageWriter
    ) -> None:
        """One response.create: parsed as the POST body it mirrors (stream implied), paced as the SSE stream is;
        raises BadRequest / UsageError for the session to answer as an error event."""
        started = self.clock()
        ask = replace(fmt.parse(body, request, route, self.cfg.model), stream=True)
        pacing, _, _ = self._pacing(body, fmt)  # headers and origin behaviours are HTTP head things
        if pacing.heartbeat_ms:
            raise BadRequest("'heartbeat_ms': keep-alive comments are SSE's; a WebSocket is kept alive by pings")
        req = self._stream_request(request, body, fmt, route, ask, pacing)
        steps = fmt.shape_steps(req, pacing)
        shape = _shape_now(steps, req.tokens + pacing.reasoning_tokens)
        if shape is None:  # large and not cached: built, encoded and scheduled in slices
            self._build(self._built_ws_response(steps, writer, req, pacing, started), writer)
            return
        wire = [writer.encode(sse_data(frame)) for frame in shape.wire(False, completion_id(req.stream_id))]
        self._paced(writer, req, pacing, shape, started, b"", wire, None)

    async def _built_ws_response(
        self, steps: Steps[StreamShape], writer: MessageWriter, req: StreamRequest, pacing: Pacing, started: int
    ) -> None:
        """`_ws_response`'s, its shape's build (begun), its messages' encoding and its schedule done in slices."""
        share = LoopShare(self.clock, BUILD_SLICE_NS)
        try:
            shape = await shared(steps, share)
        except UsageError as exc:
            writer.refuse(str(exc))
            return
        frames = await shared(shape.wire_steps(False, completion_id(req.stream_id)), share)
        wire = await shared(_ws_messages(writer, frames), share)
        plan = await shared(self._plan(pacing, shape, wire, None), share)
        self._start_paced(writer, req, pacing, started, b"", plan)

    def _replay(
        self, response: Response, req: StreamRequest, recording: Recording, started: int, headers: list[tuple[str, str]]
    ) -> None:
        """A recorded shape (stub/replay.py): its head's headers, its HTTP/1.0 framing, its events written as the
        origin wrote them and when, every event logged as a frame of the audit."""
        own = [("Content-Type", recording.content_type), *recording.headers]
        chunked = recording.http10_framing == "chunked"
        head = response.start_stream(200, _merged(own, headers), http10_chunked=chunked)
        plan = replay_plan(recording, response.chunked)
        log = self.audit.open(req.stream_id, recording.interval_ms, started, plan.first_content, writes=len(plan.sizes))
        stream = PacedStream(
            response, plan.wire, plan.sizes, plan.offsets, log, self.pacer, self.audit, self.clock, self.streams.discard
        )
        self.streams.add(stream)
        stream.start(head)

    def _whole(
        self,
        response: Response,
        fmt: ApiFormat,
        req: StreamRequest,
        log: StreamRecorder,
        headers: list[tuple[str, str]],
        pacing: Pacing,
    ) -> None:
        """stream: false: the JSON arrives when the last token would have."""
        body = fmt.whole(req)
        offset = round((pacing.ttft_ms + (req.tokens - 1) * pacing.interval_ms + pacing.pause_ms) * NS_PER_MS)

        def send(deadline_ns: int) -> None:
            log.record(deadline_ns, self.clock(), len(body))
            response.send(200, [("Content-Type", "application/json"), *headers], body)
            self.audit.close(log, "complete")

        token = self.pacer.call_at(log.started_ns + offset, send)

        def abort() -> None:
            self.pacer.cancel(token)
            self.audit.close(log, "client_gone")

        response.on_abort = abort

    def _pacing(self, body: dict[str, Any], fmt: ApiFormat) -> tuple[Pacing, list[tuple[str, str]], RequestOrigin]:
        """The body's `tokenpath` member: this request's own pacing, its declared response headers, and what else
        the origin does (its HTTP/1.0 framing, a recording to replay: `replay` names one, "" none)."""
        control = body.get("tokenpath")
        extra_headers: dict[str, str] = {}
        origin = RequestOrigin(self.cfg.http10_framing, self._replays.get(fmt.api))
        if isinstance(control, dict) and ORIGIN_MEMBERS & control.keys():
            control = dict(control)
            plain = control.pop("plain_origin", False)
            if not isinstance(plain, bool):
                raise BadRequest("'tokenpath.plain_origin' must be true or false")
            if plain:
                origin = RequestOrigin("close", None, plain=True)  # the stub's own stream, not a replay
            try:
                extra_headers = response_headers(control.pop("headers", {}))
            except UsageError as exc:  # response_headers serves the experiment file too: a usage error there
                raise BadRequest(f"'tokenpath.headers': {exc}") from None
            origin = self._origin(control, fmt, origin)
        if fmt.api is not Api.OPENAI and isinstance(control, dict) and control.get("format", "openai") != "openai":
            raise BadRequest(
                f"'tokenpath.format' {control['format']!r} is for the OpenAI routes; "
                f"the {fmt.api.value} route speaks its own format"
            )
        pacing = self._default_pacing if control is None else self._default_pacing.override(control)
        return pacing, list(extra_headers.items()), origin

    def _origin(self, control: dict[str, Any], fmt: ApiFormat, origin: RequestOrigin) -> RequestOrigin:
        """The member's `http10_framing` and `replay` (popped from `control`), over the stub's own."""
        framing, replay = origin.http10_framing, origin.replay
        if "http10_framing" in control:
            try:
                framing = parse_http10_framing(control.pop("http10_framing"))
            except UsageError as exc:
                raise BadRequest(f"'tokenpath.{exc}'") from None
        if "replay" in control:
            name = control.pop("replay")
            if not isinstance(name, str):
                raise BadRequest("'tokenpath.replay' must be a recording's name (\"\": none)")
            replay = self._recordings.get(name) if name else None
            if name and replay is None:
                known = ", ".join(self._recordings) or "none (start the stub with --recording FILE)"
                raise BadRequest(f"'tokenpath.replay': no recording {name!r} on this stub; recordings: {known}")
            if replay is not None and replay.api is not fmt.api:
                raise BadRequest(
                    f"'tokenpath.replay': recording {name!r} is of the {replay.api.value} API; "
                    f"this is the {fmt.api.value} route"
                )
        return RequestOrigin(framing, replay, origin.plain)

    def _stream_request(
        self, request: Request, body: dict[str, Any], fmt: ApiFormat, route: Route, ask: Ask, pacing: Pacing
    ) -> StreamRequest:
        """The rules every format shares: the model's length, the stream id, the token count (the format's max-tokens
        field can only lower the stub's)."""
        if len(ask.model) > MAX_MODEL_CHARS:
            raise BadRequest(f"'model' is longer than {MAX_MODEL_CHARS} characters")
        stream_id = request.header(STREAM_HEADER) or fmt.body_stream_id(body, route)
        if stream_id is not None and not valid_stream_id(stream_id):
            raise BadRequest(
                f"the stream id (the {STREAM_HEADER} header, else the body's user field) must be "
                f"1-{MAX_STREAM_ID_CHARS} visible ASCII characters: it is echoed in a response header"
            )
        tokens = pacing.tokens if ask.max_tokens is None else min(pacing.tokens, ask.max_tokens)
        return StreamRequest(
            kind=route.kind,
            model=ask.model,
            stream_id=stream_id or uuid.uuid4().hex[:16],
            tokens=tokens,
            include_usage=ask.include_usage,
            prompt_tokens=max(1, ask.prompt_chars // 4),
            truncated=tokens < pacing.tokens,
            ttft_ms=pacing.ttft_ms,
            interval_ms=pacing.interval_ms,
            max_bytes=self.cfg.max_response_bytes,
        )

    # audit ------------------------------------------------------------------------------------------
    def _audit_lookup(self, request: Request, response: Response) -> None:
        """GET /_tokenpath/audit/{id}; GET /_tokenpath/audit?ids=a,b or POST {"ids": [...]}; no ids: all."""
        query = parse_qs(request.query)
        with_log = query.get("log", ["1"])[0] not in ("0", "false")
        local_only = query.get("local", ["0"])[0] == "1"  # a sibling asking: answer from memory only
        ids: list[str] | None
        if request.path.startswith(AUDIT_PREFIX + "/"):
            ids = [request.path[len(AUDIT_PREFIX) + 1 :]]
            single = True
        else:
            single = False
            try:
                ids = _requested_ids(request, query)
            except BadRequest as exc:
                response.send_json(400, error_body(str(exc), "invalid_request_error"))
                return
        answer = self._answer_audit(response, ids, single, with_log, local_only)
        task = asyncio.get_running_loop().create_task(answer)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_audit(
        self, response: Response, ids: list[str] | None, single: bool, with_log: bool, local_only: bool
    ) -> None:
        # Every log at once can be 20,000 logs of 200 writes, seconds of work: built and encoded in slices
        # (stub/loopshare.py), each log as it stands when its slice reaches it, and written only while the client
        # takes it (stub/replywriter.py).
        share = LoopShare(self.clock)
        writer = ReplyWriter(response, share, STALL_S)
        try:
            if local_only:
                await self._answer_sibling(writer, ids, with_log, share)
                return
            entries = await self._local_entries(ids, with_log, share)
            unanswered: list[str] = []
            if self.cfg.audit_dir:
                unanswered = await self._with_siblings(entries, ids, with_log, share)
            if response.client_gone:
                return
            missing = [i for i in ids if i not in entries] if ids is not None else []
            if ids is not None and not missing:
                unanswered = []  # every id found: who did not answer is no matter
            if not single:
                await _send_reply(writer, list(entries.values()), missing, unanswered)
            elif missing:
                writer.detach()
                _send_not_found(response, missing[0], unanswered)
            else:
                await _send_parts(writer, next(iter(entries.values())))
        finally:
            writer.detach()

    async def _answer_sibling(
        self, writer: ReplyWriter, ids: list[str] | None, with_log: bool, share: LoopShare
    ) -> None:
        """A sibling's lookup (stub/siblings.py): each log sent as a record as soon as it is encoded, so a long
        answer keeps coming (the asker gives up on one that sends nothing for a while, not on one that takes long),
        and keep-alive lines while one long log is encoded."""
        logs = self.audit.all() if ids is None else list({log.stream_id: log for _, log in self._found(ids)}.values())
        writer.start(200, [("Content-Type", RECORDS_TYPE)], None)
        working = Working(share, self.clock, writer.write)  # keep-alives while one long log is encoded
        try:
            for log in logs:
                entry = await Encoded.of_log(log, with_log, self._offset_ns, working)
                for piece in (record_head(entry), *entry.parts):
                    if not await writer.write(piece):
                        return
        except AskerGone:
            return
        await writer.end()

    async def _local_entries(self, ids: list[str] | None, with_log: bool, share: LoopShare) -> dict[str, Encoded]:
        """Keyed by the id asked for (a stream id or a completion id); by stream id when all are asked for."""
        found = [(log.stream_id, log) for log in self.audit.all()] if ids is None else self._found(ids)
        entries: dict[str, Encoded] = {}
        for key, log in found:
            entries[key] = await Encoded.of_log(log, with_log, self._offset_ns, share)
            await share.turn()
        return entries

    def _found(self, ids: list[str]) -> list[tuple[str, StreamRecorder]]:
        return [(i, log) for i in ids if (log := self.audit.get(i))]

    async def _with_siblings(
        self, entries: dict[str, Encoded], ids: list[str] | None, with_log: bool, share: LoopShare
    ) -> list[str]:
        """Fill in `entries` with what other workers hold; wait (bounded) for streams not yet finished anywhere.
        Returns the workers that did not answer in whole: of an all-logs lookup, or of any round of an id lookup
        (one found dead is named only in the round that found it; asked ids not found may be theirs)."""
        assert self.cfg.audit_dir is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + AUDIT_LOOKUP_WAIT_S
        named: dict[str, None] = {}  # every round's, in order
        while True:
            wanted = None if ids is None else [i for i in ids if _unsettled(entries.get(i))]
            if wanted == []:
                return []
            found, unanswered = await ask_siblings(self.cfg.audit_dir, wanted, with_log, share)
            named.update(dict.fromkeys(unanswered))
            for encoded in found:
                sid = encoded.verdict.stream_id
                keys = [sid] if wanted is None else [k for k in (sid, completion_id(sid)) if k in wanted]
                for key in keys:
                    if _unsettled(entries.get(key)):
                        entries[key] = encoded
                await share.turn()  # a sibling's 20,000 entries are ~40 ms of this
            if ids is None:
                return unanswered
            if loop.time() >= deadline:
                return list(named)
            await asyncio.sleep(0.02)
            unsettled = [i for i in ids if _unsettled(entries.get(i))]
            entries.update(await self._local_entries(unsettled, with_log, share))


@dataclass(frozen=True, slots=True)
class RequestOrigin:
    """What one request's answer does besides pacing: its HTTP/1.0 framing, and the recording it replays."""

    http10_framing: str
    replay: Recording | None
    plain: bool = False  # `plain_origin`: none of the stub's own ORIGIN_HEADERS on this answer


def load_recordings(cfg: StubConfig) -> tuple[dict[str, Recording], dict[Api, Recording]]:
    """The stub's recordings by name, and by API the one its `--replay` files make every answer on that route."""
    named: dict[str, Recording] = {}
    replays: dict[Api, Recording] = {}
    for path in (*cfg.replays, *cfg.recordings):
        recording = load_recording(path)
        if named.get(recording.name, recording) != recording:
            raise UsageError(f"two recordings are named {recording.name!r}; rename one (its `name`)")
        named[recording.name] = recording
        if path in cfg.replays:
            replays.setdefault(recording.api, recording)
    return named, replays


def _shape_now(steps: Steps[StreamShape], frames: int) -> StreamShape | None:
    """The shape at once, when it is cached or has at most SLICED_FRAMES `frames` (run in one go, as always); else
    None, its first step run now (an error the render meets at once is still raised here), the rest to be run in
    slices."""
    if frames <= SLICED_FRAMES:
        return finish(steps)
    try:
        next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    return None


def _ws_messages(writer: MessageWriter, frames: list[bytes]) -> Steps[list[bytes]]:
    """Each SSE frame as the WebSocket message that carries its data, STEP_FRAMES at a time."""
    out: list[bytes] = []
    for i in range(0, len(frames), STEP_FRAMES):
        out += [writer.encode(sse_data(frame)) for frame in frames[i : i + STEP_FRAMES]]
        yield
    return out


def _merged(
    base: tuple[tuple[str, str], ...] | list[tuple[str, str]], over: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """`base` with `over` after it, a header of `over` replacing any of `base` of the same name (a declared
    Cache-Control replaces the stub's own)."""
    names = {name.lower() for name, _ in over}
    return [*(h for h in base if h[0].lower() not in names), *over]


def _unsettled(entry: Encoded | None) -> bool:
    return entry is None or not entry.verdict.settled


async def _send_reply(writer: ReplyWriter, entries: list[Encoded], missing: list[str], unanswered: list[str]) -> None:
    """The bytes send_json makes of `AuditReply(entries, missing, unanswered).to_json()` (tests/stub/
    test_audit_slices.py holds them equal): its members around the entries as audit.reply_json orders them, the
    entries written piece by piece (never joined: a whole answer can be 150 MB, 20,000 logs of 200 writes, and each
    copy of it holds the loop for tens of ms), each only while the client takes them."""
    around = compact_json(reply_json([], missing, reply_summary(e.verdict for e in entries), unanswered))
    before, marker, after = around.partition(_NO_STREAMS)
    assert marker, "a reply has a streams array"
    opening, tail = before + b'"streams":[', b"]" + after
    length = len(opening) + sum(e.nbytes for e in entries) + max(len(entries) - 1, 0) + len(tail)
    writer.start(200, [("Content-Type", "application/json")], length)
    if not await writer.write(opening):
        return
    for i, entry in enumerate(entries):
        first, *rest = entry.parts
        for piece in (b"," + first if i else first, *rest):
            if not await writer.write(piece):
                return
    await writer.end(tail)


def _send_not_found(response: Response, stream_id: str, unanswered: list[str]) -> None:
    """404 only when every worker answered about the id; else 503: the worker(s) that did not answer may hold it
    (named as an all-logs answer names them, under `unanswered`), and asking again may find it."""
    if not unanswered:
        message = f"no stream {stream_id!r} on this stub (never seen, or dropped as too old)"
        response.send_json(404, error_body(message, "invalid_request_error", "not_found"))
        return
    message = (
        f"stream {stream_id!r} not found, but the stub worker(s) {', '.join(unanswered)} did not answer "
        "and may hold it: ask again"
    )
    response.send_json(503, {**error_body(message, "server_error", "unanswered"), "unanswered": unanswered})


async def _send_parts(writer: ReplyWriter, entry: Encoded) -> None:
    """One log's entry, its pieces (a long log's: stub/auditslices.py) written as the client takes them."""
    writer.start(200, [("Content-Type", "application/json")], entry.nbytes)
    for piece in entry.parts[:-1]:
        if not await writer.write(piece):
            return
    await writer.end(entry.parts[-1])


def _requested_ids(request: Request, query: dict[str, list[str]]) -> list[str] | None:
    if request.method == "POST":
        body = _json_object(request.body)
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise BadRequest("'ids' must be a list of stream id strings")
        return ids
    if "ids" in query:
        return [i for part in query["ids"] for i in part.split(",") if i]
    return None


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes ([[[[...)
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("request body must be a JSON object")
    return obj


def _refuse(response: Response, fmt: ApiFormat, status: int, message: str, *extra: tuple[str, str]) -> None:
    """An error in the format's own shape, so its clients raise it as theirs."""
    reply = fmt.error(status, message)
    response.send(status, [*reply.headers, *extra], reply.body)
