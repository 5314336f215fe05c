"""Bedrock ConverseStream (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html), as
tokenpath reads and writes it.

- Frames (wire/eventstream.py): `:message-type` event with `:event-type` messageStart, contentBlockStart,
  contentBlockDelta, contentBlockStop, messageStop, metadata; the payload is the event's JSON; a contentBlockDelta's
  `delta.text` / `delta.toolUse` is content, `delta.reasoningContent` reasoning; `:message-type` exception
  (throttlingException, modelStreamErrorException, ...) or error is an error (API_runtime_ConverseStreamOutput.html,
  API_runtime_ContentBlockDelta.html). The token text is the delta's `text`.
- The error before a head: `{"message"}` with the exception's name in `x-amzn-ErrorType`, as botocore reads it
  (API_runtime_ConverseStream.html#API_runtime_ConverseStream_Errors).
- The error after the head: an exception message, `:exception-type` modelStreamErrorException ("A streaming error
  occurred. Retry your request."), internalServerException or serviceUnavailableException, payload
  `{"message": ...}`; botocore raises EventStreamError with the exception type as its code.
- The request: Converse's `messages[].content[].text`, `inferenceConfig.maxTokens`; the modelId is in the path; an
  API key is a bearer token (docs.aws.amazon.com/bedrock/latest/userguide/api-keys-use.html; SigV4 is not done).
"""

from __future__ import annotations

import json
from typing import Any

from tokenpath.wire.apispec import (
    JSON_HEADERS,
    Api,
    ApiSpec,
    ErrorReply,
    Fault,
    Framing,
    Shape,
    StreamAsk,
    StreamFailure,
)
from tokenpath.wire.eventstream import EventMessage, exception_message
from tokenpath.wire.formats.shared import compact_json, get_path, json_value, tagged
from tokenpath.wire.kinds import FrameKind

EVENTS = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)
EXCEPTIONS = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    405: "UnknownOperationException",
    413: "ValidationException",
    429: "ThrottlingException",
    500: "InternalServerException",
    502: "ServiceUnavailableException",
    503: "ServiceUnavailableException",
    504: "ServiceUnavailableException",
}
# Why a stream broke off -> the exception it ends with: the model's stream broke (retry, as Bedrock says of it), the
# service is going away, or something else.
_FAULT_EXCEPTIONS = {
    Fault.TIMEOUT: "modelStreamErrorException",
    Fault.UPSTREAM_BROKE: "modelStreamErrorException",
    Fault.SHUTDOWN: "serviceUnavailableException",
    Fault.INTERNAL: "internalServerException",
}


def classify(message: EventMessage) -> FrameKind:
    message_type = message.header(":message-type")
    if message_type in ("exception", "error"):
        return FrameKind.ERROR
    event_type = message.header(":event-type")
    if message_type != "event" or event_type not in EVENTS:
        return FrameKind.FOREIGN  # e.g. InvokeModelWithResponseStream's `chunk` events: another Bedrock API
    if event_type == "messageStop":
        return FrameKind.DONE
    if event_type == "contentBlockDelta":
        obj = json_value(message.payload)
        delta = obj.get("delta") if isinstance(obj, dict) else None
        if isinstance(delta, dict):
            if delta.get("text") or delta.get("toolUse"):
                return FrameKind.CONTENT
            if delta.get("reasoningContent"):
                return FrameKind.REASONING
    return FrameKind.CONTROL


def recognises(shape: Shape) -> bool:
    return shape.name in EVENTS


def content_text(obj: Any) -> object:
    return get_path(obj, "delta", "text")


def error_reply(status: int, message: str, code: str | None) -> ErrorReply:
    name = EXCEPTIONS.get(status, "ValidationException" if status < 500 else "InternalServerException")
    return ErrorReply(status, compact_json({"message": message}), (*JSON_HEADERS, ("x-amzn-ErrorType", name)))


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    payload = json.dumps({"message": tagged(failure.message, failure.code)}).encode()
    return exception_message(_FAULT_EXCEPTIONS[failure.fault], payload)


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": [{"text": ask.prompt}]}]}
    if ask.max_tokens is not None:
        body["inferenceConfig"] = {"maxTokens": ask.max_tokens}
    return body


SPEC = ApiSpec(
    api=Api.BEDROCK,
    framing=Framing.EVENTSTREAM,
    route="/model/{model}/converse-stream",
    content_type="application/vnd.amazon.eventstream",
    display_name="Bedrock",
    otel_operation="chat",
    otel_provider="aws.bedrock",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    # None: ConverseStream defines no keep-alive event and AWS sends none. A message of a type the API does not
    # define would be one invented here (botocore happens to skip unknown event types; other clients need not).
    keepalive=None,
)
