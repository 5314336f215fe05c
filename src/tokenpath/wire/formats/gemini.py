"""Gemini `streamGenerateContent?alt=sse` (ai.google.dev/api/generate-content), as tokenpath reads and writes it.

- Frames: each event's data is a whole GenerateContentResponse; content is the first candidate part with `text` (or
  a `functionCall`), a part with `"thought": true` is reasoning (ai.google.dev/gemini-api/docs/thinking); there is no
  end event: the last response names a candidate's `finishReason`; an error is `{"error": {code, message, status}}`.
  The token text is the first non-thought part's `text`.
- The error before a head: google.rpc.Status, `{"error": {code, message, status}}`
  (ai.google.dev/gemini-api/docs/troubleshooting).
- The error after the head: an SSE data object of the same shape (500 INTERNAL, 503 UNAVAILABLE, 504
  DEADLINE_EXCEEDED); google-genai raises APIError on a chunk that starts with `{"error":`.
- The request: `contents[].parts[].text`, `generationConfig.maxOutputTokens`; the model is in the path; the key goes
  in `x-goog-api-key` (ai.google.dev/api#authentication). The REST API serves v1 beside v1beta, and google-genai 1.x+
  calls v1 unless told otherwise (GOOGLE_AI_API_DEFAULT_VERSION): both are this format's routes.
"""

from __future__ import annotations

import json
from typing import Any

from tokenpath.wire.apispec import Api, ApiSpec, ErrorReply, Fault, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.formats.shared import get_path, json_value, sse_event, tagged
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.sse import Frame

RESPONSE_KEYS = frozenset({"candidates", "usageMetadata", "promptFeedback"})  # a GenerateContentResponse has one
RPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# Why a stream broke off -> the status its error frame carries.
_FAULT_STATUS = {
    Fault.TIMEOUT: (504, "DEADLINE_EXCEEDED"),
    Fault.UPSTREAM_BROKE: (503, "UNAVAILABLE"),
    Fault.SHUTDOWN: (503, "UNAVAILABLE"),
    Fault.INTERNAL: (500, "INTERNAL"),
}


def classify(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    obj = json_value(frame.data)
    if not isinstance(obj, dict):
        return FrameKind.FOREIGN
    if "error" in obj:
        return FrameKind.ERROR
    if not RESPONSE_KEYS & obj.keys():
        return FrameKind.FOREIGN
    kind = FrameKind.CONTROL
    candidates = obj.get("candidates")
    for candidate in candidates if isinstance(candidates, list) else ():
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            if part.get("thought") is True:
                if part.get("text"):
                    kind = FrameKind.REASONING  # unless a later part carries content
            elif part.get("text") or part.get("functionCall"):
                return FrameKind.CONTENT
    return kind


def finished(frame: Frame) -> bool:
    """Gemini has no end event: the stream's last GenerateContentResponse names a candidate's `finishReason`
    (ai.google.dev/api/generate-content#FinishReason); a stream that stops before one did not finish."""
    obj = json_value(frame.data)
    candidates = obj.get("candidates") if isinstance(obj, dict) else None
    return any(isinstance(c, dict) and c.get("finishReason") for c in candidates or () if isinstance(candidates, list))


def recognises(shape: Shape) -> bool:
    return isinstance(shape.obj, dict) and bool(RESPONSE_KEYS & shape.obj.keys())


def content_text(obj: Any) -> object:
    parts = get_path(obj, "candidates", 0, "content", "parts")
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and part.get("thought") is not True and part.get("text"):
            return part["text"]
    return None


def error_reply(status: int, message: str, code: str | None) -> ErrorReply:
    rpc = RPC_STATUS.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")
    body = json.dumps({"error": {"code": status, "message": message, "status": rpc}}, separators=(",", ": "))
    return ErrorReply(status, body.encode(), (("Content-Type", "application/json; charset=UTF-8"),))


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    status, name = _FAULT_STATUS[failure.fault]
    return sse_event({"error": {"code": status, "message": tagged(failure.message, failure.code), "status": name}})


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": ask.prompt}]}]}
    if ask.max_tokens is not None:
        body["generationConfig"] = {"maxOutputTokens": ask.max_tokens}
    return body


SPEC = ApiSpec(
    api=Api.GEMINI,
    framing=Framing.SSE,
    route="/v1beta/models/{model}:streamGenerateContent?alt=sse",
    content_type="text/event-stream",
    display_name="Gemini",
    # The conventions' well-known values: streamGenerateContent is `generate_content` on `gcp.gemini` (AI Studio).
    otel_operation="generate_content",
    otel_provider="gcp.gemini",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    ends_also=finished,
    key_header="x-goog-api-key",
    key_query="key",
    aliases=("/v1/models/{model}:streamGenerateContent",),
    # None, though Gemini's stream is SSE: Google documents no keep-alive, and its Python SDK (google-genai 3.6.1,
    # _api_client's line iterator) reads every line that is not `data: ` as JSON, so a comment line ends the stream
    # in an error (tests/gateway/test_keepalive_e2e.py holds it to that).
    keepalive=None,
)
