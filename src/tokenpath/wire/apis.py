"""The streaming API formats tokenpath speaks, and the route each one streams on: one table that the stub (which
writes them), the probe/load/monitor clients (which read them) and the gateway (which relays them) share.

Routes are the providers' own documented paths; `{model}` is filled with the request's model.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Api(StrEnum):
    OPENAI = "openai"  # chat completions, SSE, `data: [DONE]` at the end
    RESPONSES = "responses"  # OpenAI Responses API, SSE with `event:` names and sequence numbers
    ANTHROPIC = "anthropic"  # Messages API, SSE with `event:` names, no [DONE]
    GEMINI = "gemini"  # streamGenerateContent?alt=sse, SSE of GenerateContentResponse objects
    BEDROCK = "bedrock"  # ConverseStream, binary application/vnd.amazon.eventstream messages with CRCs
    OLLAMA = "ollama"  # /api/chat, NDJSON: one JSON object per line


class Framing(StrEnum):
    SSE = "sse"
    EVENTSTREAM = "eventstream"  # AWS event stream: prelude (total length, headers length, CRC), headers, payload, CRC
    NDJSON = "ndjson"


@dataclass(frozen=True)
class ApiSpec:
    api: Api
    framing: Framing
    route: str  # the path a request streams on; `{model}` is replaced by the model
    content_type: str  # what a conforming server answers with

    def path(self, model: str) -> str:
        return self.route.replace("{model}", model)


SPECS: dict[Api, ApiSpec] = {
    Api.OPENAI: ApiSpec(Api.OPENAI, Framing.SSE, "/v1/chat/completions", "text/event-stream"),
    Api.RESPONSES: ApiSpec(Api.RESPONSES, Framing.SSE, "/v1/responses", "text/event-stream"),
    Api.ANTHROPIC: ApiSpec(Api.ANTHROPIC, Framing.SSE, "/v1/messages", "text/event-stream"),
    Api.GEMINI: ApiSpec(
        Api.GEMINI, Framing.SSE, "/v1beta/models/{model}:streamGenerateContent?alt=sse", "text/event-stream"
    ),
    Api.BEDROCK: ApiSpec(
        Api.BEDROCK, Framing.EVENTSTREAM, "/model/{model}/converse-stream", "application/vnd.amazon.eventstream"
    ),
    Api.OLLAMA: ApiSpec(Api.OLLAMA, Framing.NDJSON, "/api/chat", "application/x-ndjson"),
}


def parse_api(text: str) -> Api:
    """An --api value, or a ValueError that lists the accepted ones."""
    try:
        return Api(text.strip().lower())
    except ValueError:
        raise ValueError(f"unknown API format {text!r}; expected one of: {', '.join(a.value for a in Api)}") from None
