"""AWS Bedrock ConverseStream (`POST /model/{modelId}/converse-stream`): binary `application/vnd.amazon.eventstream`
messages, not SSE.

The events, as documented in the Bedrock API reference (docs.aws.amazon.com/bedrock/latest/APIReference/
API_runtime_ConverseStream.html and API_runtime_ConverseStreamOutput.html): `messageStart` {role}, one
`contentBlockDelta` {contentBlockIndex, delta: {text}} per token, `contentBlockStop` {contentBlockIndex},
`messageStop` {stopReason: end_turn, or max_tokens when inferenceConfig.maxTokens ended it}, `metadata` {usage:
{inputTokens, outputTokens, totalTokens}, metrics: {latencyMs}}. Each is one event-stream message (the framing:
docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream, "Event stream
encoding"): prelude (total length, headers length, both big-endian u32) and its CRC32, headers, payload, and the
CRC32 of everything before it; the headers `:event-type`, `:content-type` application/json and `:message-type`
event, each a string (type 7, u16 length). Requests: `messages` (non-empty), `inferenceConfig.maxTokens`.
Errors: the status, `x-amzn-ErrorType` naming the exception, and `{"message": ...}` (what botocore's rest-json
error parser reads).

Encoded with tokenpath.wire.eventstream's event_message: botocore has only a parser (botocore.eventstream.
EventStreamBuffer, which the tests decode these with), no encoder, and the stub should not need botocore to run. A
padded token message (--frame-bytes) pads with a `p` member, the member AWS itself pads its event payloads with.

messageStart leaves with the head; the first contentBlockDelta is the first content. With reasoning
(API_runtime_ReasoningContentBlockDelta.html): block 0 streams `delta.reasoningContent.text`, closed by a
`reasoningContent.signature` delta and contentBlockStop (both leave with the first text delta); the text is
block 1.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from tokenpath.serve.http import Request
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats.base import (
    ApiFormat,
    Ask,
    Route,
    cached_render,
    compact_json,
    full_text,
    message_list,
    object_field,
    positive_int,
    text_chars,
)
from tokenpath.stub.frames import (
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
from tokenpath.wire.eventstream import event_message

ROUTE = re.compile(r"/model/([^/]+)/converse-stream")
SIGNATURE = "dG9rZW5wYXRoLXN0dWI="  # the reasoning block's signature (opaque to clients)


class BedrockFormat(ApiFormat):
    api = Api.BEDROCK
    max_tokens_field = "inferenceConfig.maxTokens"
    heartbeat = None
    no_heartbeat = "Bedrock ConverseStream's event stream has no keep-alive message (AWS sends none); use an SSE API"

    def routes(self) -> dict[str, str]:
        return {}

    def match(self, path: str) -> Route | None:
        m = ROUTE.fullmatch(path)
        return Route(self.api, self.api.value, unquote(m.group(1))) if m else None

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        messages = message_list(body, "messages")
        config = object_field(body, "inferenceConfig")
        system = body.get("system")
        return Ask(
            model=route.model or default_model,
            stream=True,
            max_tokens=positive_int(config.get("maxTokens"), self.max_tokens_field),
            prompt_chars=sum(text_chars(m.get("content")) for m in messages) + text_chars(system),
        )

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        return cached_render(
            (self.name, req.tokens, req.prompt_tokens, req.truncated, _latency_ms(req)), req, pacing, render
        )

    def whole(self, req: StreamRequest) -> bytes:
        """Converse's (not ConverseStream's) answer, for completeness: this route always streams."""
        message = {"role": "assistant", "content": [{"text": full_text(req.tokens)}]}
        return compact_json(
            {
                "output": {"message": message},
                "stopReason": _stop(req),
                "usage": _usage(req),
                "metrics": {"latencyMs": _latency_ms(req)},
            }
        )


def render(
    req: StreamRequest, frame_bytes: int | None, reasoning: int = 0, first_event_bytes: int | None = None
) -> Steps[StreamShape]:
    frames = [message("messageStart", {"role": "assistant"})]
    block = 0
    with_next: set[int] = set()
    if reasoning:
        yield from extend_steps(
            frames,
            (
                padded(
                    _delta,
                    {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": reasoning_text(i)}}},
                    frame_bytes,
                    "p",
                )
                for i in range(reasoning)
            ),
            req.max_bytes,
        )
        with_next.update((len(frames), len(frames) + 1))
        frames += [
            _delta({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": SIGNATURE}}}),
            message("contentBlockStop", {"contentBlockIndex": 0}),
        ]
        block = 1
    first_content = len(frames)
    yield from extend_steps(
        frames,
        (
            padded(
                _delta,
                {"contentBlockIndex": block, "delta": {"text": token_text(i)}},
                token_bytes(i, frame_bytes, first_event_bytes),
                "p",
            )
            for i in range(req.tokens)
        ),
        req.max_bytes,
    )
    frames += [
        message("contentBlockStop", {"contentBlockIndex": block}),
        message("messageStop", {"stopReason": _stop(req)}),
        message("metadata", {"usage": _usage(req), "metrics": {"latencyMs": _latency_ms(req)}}),
    ]
    # no ids in these events: nothing to relabel (or re-CRC)
    return (
        yield from build_shape(
            frames,
            lead=1,
            first_content=first_content,
            reasoning=range(1, 1 + reasoning),
            with_next=frozenset(with_next),
        )
    )


def message(event_type: str, payload: dict[str, Any]) -> bytes:
    """One event-stream `event` message with a JSON payload (the framing: wire/eventstream.py)."""
    return event_message(event_type, compact_json(payload))


def _delta(payload: dict[str, Any]) -> bytes:
    return message("contentBlockDelta", payload)


def _stop(req: StreamRequest) -> str:
    return "max_tokens" if req.truncated else "end_turn"


def _usage(req: StreamRequest) -> dict[str, int]:
    return {"inputTokens": req.prompt_tokens, "outputTokens": req.tokens, "totalTokens": req.prompt_tokens + req.tokens}


def _latency_ms(req: StreamRequest) -> int:
    """The planned time to the last event (metadata: three intervals after the last token)."""
    return round(req.ttft_ms + (req.tokens + 2) * req.interval_ms)
