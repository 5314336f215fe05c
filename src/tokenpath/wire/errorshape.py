"""An error answered before a response head (a whole JSON response), in each API format's own shape, as its
provider documents it and its SDK raises on: what the stub answers a bad request with and what the gateway answers
a request it refuses or cannot serve with. (After the head, a stream ends with the format's error *frame*:
gateway/streamformat.py.)

- OpenAI chat and Responses: `{"error": {message, type, param, code}}`, type `invalid_request_error` under 500,
  else `server_error` (platform.openai.com/docs/guides/error-codes).
- Anthropic: `{"type": "error", "error": {"type", "message"}}`, the type named by the status
  (docs.claude.com/en/api/errors: invalid_request_error, authentication_error, permission_error, not_found_error,
  request_too_large, rate_limit_error, api_error, timeout_error, overloaded_error).
- Gemini: google.rpc.Status, `{"error": {code, message, status}}` (ai.google.dev/gemini-api/docs/troubleshooting).
- Bedrock: `{"message"}` with the exception's name in `x-amzn-ErrorType`, as botocore reads it
  (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html#API_runtime_ConverseStream_Errors).
- Ollama: `{"error": "..."}` (docs.ollama.com/api/errors).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tokenpath.wire.apis import Api

JSON = (("Content-Type", "application/json"),)

ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
GEMINI_STATUS = {
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
BEDROCK_EXCEPTIONS = {
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


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error in the format's own shape, as its clients parse it: the body and the headers that type it."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = JSON


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object, which OpenAI clients turn into a readable exception."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_kind(status: int) -> str:
    return "invalid_request_error" if status < 500 else "server_error"


def error_reply(api: Api | None, status: int, message: str, code: str | None = None) -> ErrorReply:
    """`message` (and, where the format has one, `code`) as `api` answers an error of `status`; None: OpenAI's."""
    if api is None or api in (Api.OPENAI, Api.RESPONSES):
        return ErrorReply(status, _compact(error_body(message, openai_kind(status), code)))
    if api is Api.ANTHROPIC:
        kind = ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
        return ErrorReply(status, _compact({"type": "error", "error": {"type": kind, "message": message}}))
    if api is Api.GEMINI:
        rpc = GEMINI_STATUS.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")
        body = json.dumps({"error": {"code": status, "message": message, "status": rpc}}, separators=(",", ": "))
        return ErrorReply(status, body.encode(), (("Content-Type", "application/json; charset=UTF-8"),))
    if api is Api.BEDROCK:
        name = BEDROCK_EXCEPTIONS.get(status, "ValidationException" if status < 500 else "InternalServerException")
        return ErrorReply(status, _compact({"message": message}), (*JSON, ("x-amzn-ErrorType", name)))
    return ErrorReply(status, _compact({"error": message}))  # Ollama


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
