"""Did every frame arrive, in order, byte for byte? The stub's frames are deterministic for a stream id, so the
client re-renders what the stub sent and compares: no parsing on the hot path, and any loss, reordering or change
is named. A proxy that re-serialises chunks (LiteLLM) fails the byte check; its content is then compared.

The other API formats are compared by content only (`byte_exact` None): their frames carry the prompt's size and
the pacing (Anthropic's usage, Ollama's durations), which the client would have to re-derive as the stub does."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tokenpath.audit import completion_id
from tokenpath.errors import PeerError
from tokenpath.load.tokens import content_text as format_text
from tokenpath.stub.formats.openai import openai_shape
from tokenpath.stub.frames import StreamShape, token_text
from tokenpath.wire.apis import Api
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.openai import content_text
from tokenpath.wire.reader import frame_reader
from tokenpath.wire.sse import Frame, SSEParser


@dataclass(frozen=True, slots=True)
class Integrity:
    expected: int
    received: int
    byte_exact: bool | None  # None: not compared byte for byte (a format other than OpenAI chat)
    lost: int  # content frames missing
    out_of_order: int  # content frames present but not where they belong
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.out_of_order == 0 and self.received >= self.expected


@dataclass(frozen=True, slots=True)
class BeforeFirstToken:
    """What the stub sends before and around the first token that changes its bytes (stub/config.py Pacing):
    reasoning deltas and a padded first event are in its frames; keep-alives are writes of their own, between them
    (the audit's `heartbeats`), which the comparison skips. `head_at` moves no byte."""

    reasoning: int = 0
    first_event_bytes: int | None = None
    keepalives: bool = False


PLAIN = BeforeFirstToken()


def expected_frames(stream_id: str, model: str, tokens: int, extra: BeforeFirstToken = PLAIN) -> list[bytes]:
    """What the stub sent: its cached frames for this shape, relabelled with this stream's completion id."""
    return _shape(model, tokens, extra).wire(False, completion_id(stream_id))


def _shape(model: str, tokens: int, extra: BeforeFirstToken) -> StreamShape:
    return openai_shape(
        "chat",
        model,
        tokens,
        False,
        0,
        "openai",
        None,
        reasoning=extra.reasoning,
        first_event_bytes=extra.first_event_bytes,
    )


def check_body(
    body: bytes, stream_id: str, model: str, tokens: int, api: Api = Api.OPENAI, extra: BeforeFirstToken = PLAIN
) -> Integrity:
    """The same verdict from a whole body: one comparison of bytes when nothing changed them (the usual case,
    and the load client's, against the stub's frames joined and relabelled at once), the frames parsed out only
    when something did (or keep-alives sit between them)."""
    if api is not Api.OPENAI:
        return check_content(body, api, tokens)  # content texts only: reasoning and keep-alives are not content
    shape, cid = _shape(model, tokens, extra), completion_id(stream_id)
    if not extra.keepalives and body == shape.wire_body(False, cid):
        return Integrity(len(shape.sizes), len(shape.sizes), True, 0, 0)
    expected = shape.wire(False, cid)
    frames = SSEParser().feed(body)
    if extra.keepalives:  # the stub's `: ping` writes: comment-only events, never a frame of the stream's own
        frames = [f for f in frames if not is_keepalive(f)]
    return check([f.raw for f in frames], stream_id, model, tokens, expected)


def is_keepalive(frame: Frame) -> bool:
    """A comment-only event (`: ping`): what a server writes to keep a connection alive, with no event in it."""
    return frame.data is None and frame.event is None and frame.id is None and bool(frame.comments)


def check(
    received: list[bytes], stream_id: str, model: str, tokens: int, expected: list[bytes] | None = None
) -> Integrity:
    if expected is None:
        expected = expected_frames(stream_id, model, tokens)
    if received == expected:
        return Integrity(len(expected), len(received), True, 0, 0)
    texts = [content_text(f) for f in received]
    seen = [t for t in texts if t is not None]
    want = [token_text(i) for i in range(tokens)]
    positions = {t: i for i, t in enumerate(want)}
    lost = len(set(want) - set(seen))
    indexes = [positions[t] for t in seen if t in positions]
    out_of_order = sum(1 for a, b in itertools.pairwise(indexes) if b < a)
    detail = f"{lost} content frames lost, {out_of_order} out of order" if lost or out_of_order else "re-serialised"
    return Integrity(len(expected), len(received), False, lost, out_of_order, detail)


def check_content(body: bytes, api: Api, tokens: int) -> Integrity:
    """A body of another format: its content frames' texts against the stub's tokens, in order."""
    reader = frame_reader(api)
    try:
        frames = [*reader.feed(body), *reader.close()]
    except PeerError as exc:  # a frame past its limit, a bad CRC, a last message cut short
        return Integrity(tokens, 0, None, tokens, 0, f"unreadable {api.value} body: {exc}")
    texts = [format_text(api, f) for f in frames if reader.kind(f) is FrameKind.CONTENT]
    seen = [t for t in texts if t is not None]
    want = [token_text(i) for i in range(tokens)]
    positions = {t: i for i, t in enumerate(want)}
    lost = len(set(want) - set(seen))
    indexes = [positions[t] for t in seen if t in positions]
    out_of_order = sum(1 for a, b in itertools.pairwise(indexes) if b < a)
    detail = f"{lost} content frames lost, {out_of_order} out of order" if lost or out_of_order else ""
    return Integrity(tokens, len(seen), None, lost, out_of_order, detail)
