"""The stub's routes: OpenAI-compatible completions with paced SSE, the model list, and the audit endpoints."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs

from tokenpath.clock import NS_PER_MS, Clock, monotonic_ns
from tokenpath.errors import UsageError
from tokenpath.stub.audit import AuditStore, State, StreamLog, audit_stream
from tokenpath.stub.config import Format, StubConfig
from tokenpath.stub.frames import StreamRequest, completion_id, render_completion, render_stream
from tokenpath.stub.http_server import Request, Response, error_body
from tokenpath.stub.pacing import Pacer, schedule_offsets_ns
from tokenpath.wire.request import STREAM_HEADER

AUDIT_PREFIX = "/_tokenpath/audit"
AUDIT_LOOKUP_WAIT_S = 0.5  # another worker writes a finished log within microseconds of its last write
_PLACEHOLDER_ID = completion_id("")  # same length as every completion id, so padding stays exact

_ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/chat/completions": ("POST",),
    "/v1/completions": ("POST",),
    "/v1/models": ("GET",),
    "/_tokenpath/health": ("GET",),
    AUDIT_PREFIX: ("GET", "POST"),
}


class PacedStream:
    """One streamed response: each frame is written at started + offset on the pacer and logged."""

    def __init__(
        self,
        response: Response,
        frames: list[bytes],
        offsets: list[int],
        log: StreamLog,
        pacer: Pacer,
        audit: AuditStore,
        clock: Clock,
        on_done: Callable[[PacedStream], None],
    ) -> None:
        self._response = response
        self._on_done = on_done
        self._frames = frames
        self._offsets = offsets
        self._log = log
        self._pacer = pacer
        self._audit = audit
        self._clock = clock
        self._next = 0
        self._token: int | None = None
        self.done = False

    def start(self, head: bytes) -> None:
        self._response.on_abort = self.abort
        self._response.write(head)
        self._schedule()

    def abort(self) -> None:
        """The client left: drop the pending write now, so the stream costs nothing more."""
        if self._token is not None:
            self._pacer.cancel(self._token)
            self._token = None
        if not self.done:
            self._end("client_gone")

    def _end(self, state: State) -> None:
        self.done = True
        self._audit.close(self._log, state)
        self._on_done(self)

    def _schedule(self) -> None:
        self._token = self._pacer.call_at(self._log.started_ns + self._offsets[self._next], self._fire)

    def _fire(self, deadline_ns: int) -> None:
        self._token = None
        i = self._next
        frame = self._frames[i]
        last = i == len(self._frames) - 1
        wire = self._response.encode(frame, last=last)
        actual = self._clock()
        self._log.record(deadline_ns, actual, len(frame))
        self._response.write(wire, last=last)
        self._next = i + 1
        if last:
            self._end("complete")
        else:
            self._schedule()


class StubApp:
    def __init__(
        self, cfg: StubConfig, pacer: Pacer, audit: AuditStore, clock: Clock = monotonic_ns
    ) -> None:
        self.cfg = cfg
        self.pacer = pacer
        self.audit = audit
        self.clock = clock
        self._rng = random.Random(cfg.seed)
        self.streams: set[PacedStream] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, request: Request, response: Response) -> None:
        path = request.path
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
        if route == "/v1/chat/completions":
            self._completion(request, response, "chat")
        elif route == "/v1/completions":
            self._completion(request, response, "completion")
        elif route == "/v1/models":
            model = {"id": self.cfg.model, "object": "model", "created": 0, "owned_by": "tokenpath"}
            response.send_json(200, {"object": "list", "data": [model]})
        elif route == "/_tokenpath/health":
            response.send_json(200, {"status": "ok", "active_streams": len(self.streams)})
        else:
            self._audit_lookup(request, response)

    # completions ------------------------------------------------------------------------------------
    def _completion(self, request: Request, response: Response, kind: str) -> None:
        started = self.clock()
        try:
            body = _json_object(request.body)
            stream_req, streaming = self._parse_completion(body, request, kind)
            frames = _rendered(stream_req, self.cfg.format, self.cfg.frame_bytes) if streaming else []
        except UsageError as exc:
            response.send_json(400, error_body(str(exc), "invalid_request_error"))
            return
        headers = [(STREAM_HEADER, stream_req.stream_id), *self.cfg.headers]
        log = self.audit.open(stream_req.stream_id, self.cfg.interval_ms, started)
        if not streaming:
            self._whole_completion(response, stream_req, log, headers)
            return
        lead = 1 if kind == "chat" and self.cfg.format == "openai" else 0
        offsets = schedule_offsets_ns(
            len(frames),
            lead_frames=lead,
            ttft_ms=self.cfg.ttft_ms,
            interval_ms=self.cfg.interval_ms,
            jitter=self.cfg.jitter,
            rng=self._rng,
        )
        sse_headers = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), *headers]
        stream = PacedStream(
            response, frames, offsets, log, self.pacer, self.audit, self.clock, self.streams.discard
        )
        self.streams.add(stream)
        stream.start(response.start_stream(200, sse_headers))

    def _whole_completion(
        self, response: Response, req: StreamRequest, log: StreamLog, headers: list[tuple[str, str]]
    ) -> None:
        """stream: false: the JSON arrives when the last token would have."""
        body = json.dumps(render_completion(req), separators=(",", ":")).encode()
        offset = round((self.cfg.ttft_ms + (req.tokens - 1) * self.cfg.interval_ms) * NS_PER_MS)

        def send(deadline_ns: int) -> None:
            log.record(deadline_ns, self.clock(), len(body))
            response.send(200, [("Content-Type", "application/json"), *headers], body)
            self.audit.close(log, "complete")

        token = self.pacer.call_at(log.started_ns + offset, send)

        def abort() -> None:
            self.pacer.cancel(token)
            self.audit.close(log, "client_gone")

        response.on_abort = abort

    def _parse_completion(self, body: dict[str, Any], request: Request, kind: str) -> tuple[StreamRequest, bool]:
        if kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise UsageError("'messages' must be a non-empty list")
            prompt_chars = sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str | list):
                raise UsageError("'prompt' must be a string or a list")
            prompt_chars = len(str(prompt))
        model = body.get("model", self.cfg.model)
        if not isinstance(model, str) or not model:
            raise UsageError("'model' must be a non-empty string")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise UsageError("'stream' must be true or false")
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        tokens = self.cfg.tokens
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise UsageError("'max_tokens' must be a positive integer")
            tokens = min(tokens, limit)
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise UsageError("'stream_options' must be an object")
        user = body.get("user")
        stream_id = request.header(STREAM_HEADER) or (user if isinstance(user, str) and user else None)
        req = StreamRequest(
            kind=kind,
            model=model,
            stream_id=stream_id or uuid.uuid4().hex[:16],
            tokens=tokens,
            include_usage=bool(options.get("include_usage")),
            prompt_tokens=max(1, prompt_chars // 4),
        )
        return req, stream

    # audit ------------------------------------------------------------------------------------------
    def _audit_lookup(self, request: Request, response: Response) -> None:
        """GET /_tokenpath/audit/{id}; GET /_tokenpath/audit?ids=a,b or POST {"ids": [...]}; no ids: all."""
        query = parse_qs(request.query)
        with_log = query.get("log", ["1"])[0] not in ("0", "false")
        if request.path.startswith(AUDIT_PREFIX + "/"):
            ids = [request.path[len(AUDIT_PREFIX) + 1 :]]
            single = True
        else:
            single = False
            try:
                ids = _requested_ids(request, query)
            except UsageError as exc:
                response.send_json(400, error_body(str(exc), "invalid_request_error"))
                return
        task = asyncio.get_running_loop().create_task(self._answer_audit(response, ids, single, with_log))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_audit(self, response: Response, ids: list[str] | None, single: bool, with_log: bool) -> None:
        if ids is None:
            logs = self.audit.all()
            missing: list[str] = []
        else:
            found = {i: self.audit.get(i) for i in ids}
            if self.audit.shared and any(v is None for v in found.values()):
                found = await self._wait_for_other_workers(found)
            logs = [v for v in found.values() if v is not None]
            missing = [k for k, v in found.items() if v is None]
        if response.client_gone:
            return
        entries = [_audit_entry(log, with_log) for log in logs]
        if single:
            if not entries:
                message = f"no stream {missing[0]!r} on this stub (never seen, or dropped as too old)"
                response.send_json(404, error_body(message, "invalid_request_error", "not_found"))
            else:
                response.send_json(200, entries[0])
            return
        passed = sum(1 for e in entries if e["verdict"]["passed"])
        summary = {"streams": len(entries), "passed": passed, "failed": len(entries) - passed}
        response.send_json(200, {"streams": entries, "missing": missing, "summary": summary})

    async def _wait_for_other_workers(self, found: dict[str, StreamLog | None]) -> dict[str, StreamLog | None]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + AUDIT_LOOKUP_WAIT_S
        while loop.time() < deadline:
            await asyncio.sleep(0.01)
            found = {k: v or self.audit.get(k) for k, v in found.items()}
            if all(v is not None and v.state != "running" for v in found.values()):
                break
        return found


def _audit_entry(log: StreamLog, with_log: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"verdict": audit_stream(log).to_json()}
    if with_log:
        entry["log"] = log.to_json()
    return entry


def _requested_ids(request: Request, query: dict[str, list[str]]) -> list[str] | None:
    if request.method == "POST":
        body = _json_object(request.body)
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise UsageError("'ids' must be a list of stream id strings")
        return ids
    if "ids" in query:
        return [i for part in query["ids"] for i in part.split(",") if i]
    return None


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise UsageError("request body must be a JSON object")
    return obj


def _rendered(req: StreamRequest, fmt: Format, frame_bytes: int | None) -> list[bytes]:
    """Frames for this request; rendered once per shape and re-labelled with the stream's completion id."""
    prompt_tokens = req.prompt_tokens if req.include_usage else 0  # only the usage chunk shows it
    template = _template(req.kind, req.model, req.tokens, req.include_usage, prompt_tokens, fmt, frame_bytes)
    if fmt == "plain":
        return list(template)
    placeholder, real = _PLACEHOLDER_ID.encode(), completion_id(req.stream_id).encode()
    return [f.replace(placeholder, real) for f in template]


@lru_cache(maxsize=256)
def _template(
    kind: str, model: str, tokens: int, usage: bool, prompt_tokens: int, fmt: Format, frame_bytes: int | None
) -> tuple[bytes, ...]:
    req = StreamRequest(kind, model, "", tokens, usage, prompt_tokens)
    return tuple(render_stream(req, fmt, frame_bytes))
