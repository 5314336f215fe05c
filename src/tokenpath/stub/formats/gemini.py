"""Gemini (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`): SSE `data:` events, each one whole
GenerateContentResponse; no `[DONE]`, no event names.

As documented in the Gemini API reference (ai.google.dev/api/generate-content: models.streamGenerateContent
"returns a stream of GenerateContentResponse"; GenerateContentResponse = candidates[] (content.parts[].text,
content.role "model", finishReason, index), usageMetadata (promptTokenCount, candidatesTokenCount,
totalTokenCount), modelVersion, responseId), with `alt=sse` for server-sent events (the SDKs' choice). As the API
writes them (a captured stream: github.com/junjihashimoto/louter, test-data/gemini/streaming_long/log): every event
carries the running usageMetadata, the last one the finishReason (STOP, or MAX_TOKENS when
generationConfig.maxOutputTokens ended it), JSON with `": "` after keys and `,` bare, events ended by CRLF CRLF.
Requests: `contents` (non-empty), `generationConfig.maxOutputTokens`. Errors: `{"error": {"code", "message",
"status"}}` (ai.google.dev/gemini-api/docs/troubleshooting). Without alt=sse the API streams one JSON array;
the stub does not, and says so. The API serves the same method under /v1 too (google-genai's default since 3.x).

Every event carries text: the first is the first content, due at the TTFT, nothing leads it. With reasoning
(ai.google.dev/gemini-api/docs/thinking, includeThoughts): the thought summaries come first, each event one part
with `"thought": true`, usageMetadata counting them as thoughtsTokenCount.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, unquote

from tokenpath.audit import stream_label
from tokenpath.errors import BadRequest
from tokenpath.serve.http import Request
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats.base import (
    ApiFormat,
    Ask,
    Route,
    cached_render,
    full_text,
    message_list,
    object_field,
    positive_int,
    text_chars,
)
from tokenpath.stub.frames import (
    PLACEHOLDER_LABEL,
    StreamRequest,
    StreamShape,
    build_shape,
    extend_steps,
    padded,
    reasoning_text,
    token_bytes,
    token_text,
)
from tokenpath.stub.loopshare import Steps
from tokenpath.wire.apis import Api

ROUTE = re.compile(r"/v1(?:beta)?/models/([^/]+):streamGenerateContent")  # the API serves both versions


class GeminiFormat(ApiFormat):
    api = Api.GEMINI
    max_tokens_field = "generationConfig.maxOutputTokens"
    # Keep-alive: an SSE comment, in the CRLF line ends the API writes its events with, only when asked. Google
    # documents none for streamGenerateContent, and google-genai (3.6.1) reads a line that is not `data: ` as JSON and
    # fails on it (tests/gateway/test_keepalive_e2e.py): a Gemini heartbeat shows what a path that injects one does.
    heartbeat = b": ping\r\n\r\n"

    def routes(self) -> dict[str, str]:
        return {}

    def match(self, path: str) -> Route | None:
        m = ROUTE.fullmatch(path)
        return Route(self.api, self.api.value, unquote(m.group(1))) if m else None

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        if parse_qs(request.query).get("alt") != ["sse"]:
            raise BadRequest("this stub streams only server-sent events: add ?alt=sse (the SDKs do)")
        contents = message_list(body, "contents")
        config = object_field(body, "generationConfig")
        system = object_field(body, "systemInstruction")
        return Ask(
            model=route.model or default_model,
            stream=True,
            max_tokens=positive_int(config.get("maxOutputTokens"), self.max_tokens_field),
            prompt_chars=sum(text_chars(c.get("parts")) for c in contents) + text_chars(system.get("parts")),
        )

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        return cached_render((self.name, req.model, req.tokens, req.prompt_tokens, req.truncated), req, pacing, render)

    def whole(self, req: StreamRequest) -> bytes:
        response = _response(req, stream_label(req.stream_id), full_text(req.tokens), req.tokens, _finish(req))
        return _json(response)


def render(
    req: StreamRequest, frame_bytes: int | None, reasoning: int = 0, first_event_bytes: int | None = None
) -> Steps[StreamShape]:
    last = req.tokens - 1
    frames: list[bytes] = []
    yield from extend_steps(
        frames,
        (
            padded(
                event, _response(req, PLACEHOLDER_LABEL, reasoning_text(i), 0, None, thoughts=i + 1), frame_bytes, "pad"
            )
            for i in range(reasoning)
        ),
        req.max_bytes,
    )
    yield from extend_steps(
        frames,
        (
            padded(
                event,
                _response(
                    req,
                    PLACEHOLDER_LABEL,
                    token_text(i),
                    i + 1,
                    _finish(req) if i == last else None,
                    thoughts=reasoning,
                ),
                token_bytes(i, frame_bytes, first_event_bytes),
                "pad",
            )
            for i in range(req.tokens)
        ),
        req.max_bytes,
    )
    return (yield from build_shape(frames, lead=0, first_content=reasoning, relabel=True, reasoning=range(reasoning)))


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + _json(data) + b"\r\n\r\n"


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ": ")).encode()


def _finish(req: StreamRequest) -> str:
    return "MAX_TOKENS" if req.truncated else "STOP"


def _response(
    req: StreamRequest, label: str, text: str, so_far: int, finish: str | None, *, thoughts: int = 0
) -> dict[str, Any]:
    """One event (or the whole answer); `so_far` 0 with `thoughts`: a thought summary part."""
    part: dict[str, Any] = {"text": text, "thought": True} if thoughts and not so_far else {"text": text}
    candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    usage = {
        "promptTokenCount": req.prompt_tokens,
        "candidatesTokenCount": so_far,
        "totalTokenCount": req.prompt_tokens + so_far + thoughts,
    }
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": req.model, "responseId": label}
