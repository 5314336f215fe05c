"""`tokenpath record URL`: a real server's response shape, into a small file the stub replays (stub/replay.py).

Two requests, both direct to the server (record it on its own host, not through a path: the write times are the
ones a client sees on loopback, as near to the origin's socket as a client gets): one in HTTP/1.0 for how it frames
a stream there, and the stream itself in HTTP/1.1 through the probe, whose trace keeps every read's time and every
frame's bytes. The events a read completed are one write of the origin (on loopback a reader that keeps up wakes
once per write); an event split across reads belongs to the read that completed it.

Text is redacted by default: every string a format carries the model's words in (content, text, delta, thinking,
arguments...) becomes filler of the same bytes, so sizes, kinds and JSON stay exact and no answer is kept.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from tokenpath import __version__
from tokenpath.clock import ns_to_ms
from tokenpath.errors import ServiceError, UsageError
from tokenpath.hostport import redacted as redacted_url
from tokenpath.origins.behaviour import Http10Answer, http10_answer
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import DEFAULT_LIMITS, Trace, TraceLimits
from tokenpath.stub.config import RESERVED_HEADERS, response_headers
from tokenpath.stub.replay import (
    MAX_EVENTS,
    MAX_RECORDING_BYTES,
    SENT_HEADERS,
    RecordedEvent,
    RecordedWrite,
    Recording,
)
from tokenpath.wire.apis import Api
from tokenpath.wire.eventstream import EventMessage, with_message_crc
from tokenpath.wire.reader import frame_reader

# JSON members the formats carry model output in (wire/formats/: OpenAI's content, reasoning_content, arguments;
# Anthropic's text, thinking, partial_json; the Responses API's delta and text); their string values are redacted.
TEXT_MEMBERS = frozenset(
    {"content", "text", "delta", "thinking", "reasoning", "reasoning_content", "refusal", "arguments", "partial_json"}
)
# Headers not worth replaying: the date changes every time; Content-Encoding described a body the trace decoded (the
# events are stored, and replayed, as plain bytes); the rest are the stub's own to set (framing, hop by hop).
DROPPED_HEADERS = frozenset({"date", "content-encoding", "set-cookie", *RESERVED_HEADERS})  # a cookie: a session's
# What the probe's trace keeps of the stream: every event a replay takes (MAX_EVENTS), and bytes up to the file's cap
# (a file holds every event's bytes, escaped, and more). A stream past either is refused, never cut short.
# The stream's bytes too: a file holds them escaped and more, so a longer stream cannot fit (a flood was read for the
# probe's 600 s and refused after).
RECORD_LIMITS: TraceLimits = replace(
    DEFAULT_LIMITS, frames=MAX_EVENTS, frame_bytes=MAX_RECORDING_BYTES, response_bytes=MAX_RECORDING_BYTES + (64 << 10)
)
FILLER = b"x"
MIN_SECRET_CHARS = 8  # a --header value this long is looked for in the recording (a shorter one is no secret)
# A --header whose name holds one of these carries a credential (Authorization, X-Api-Key, Cookie, X-Auth-Token...);
# another (a request id a server echoes by design) is not looked for.
SECRET_NAME_WORDS = ("auth", "key", "token", "secret", "cookie", "password")


@dataclass(frozen=True, slots=True)
class RecordRequest:
    """What `tokenpath record` asks: the probe's request (URL, format, model, prompt, max tokens, key, headers),
    sampled deterministically so a second recording has the same token count."""

    probe: ProbeConfig
    name: str
    seed: int = 1
    redact: bool = True
    source: dict[str, Any] = field(default_factory=dict)

    def config(self) -> ProbeConfig:
        """The probe's config with fixed sampling: temperature 0 and a seed (both servers honour them)."""
        sampling = (("seed", self.seed), ("temperature", 0))
        return replace(self.probe, extra_body=(*self.probe.extra_body, *sampling))


def record(request: RecordRequest) -> Recording:
    """Both requests, then the recording (RemoteProtocolError / PeerError on a server that does not answer)."""
    cfg = request.config()
    answer = http10_answer(cfg)
    if answer.status != 200:  # its framing there is an error page's: no behaviour of the stream's to replay
        raise ServiceError(f"{cfg.target.origin} answered {answer.status} to the HTTP/1.0 request: nothing to record")
    trace = probe_stream(cfg, limits=RECORD_LIMITS)
    if trace.head is None or trace.head.status != 200:
        status = trace.head.status if trace.head is not None else "none"
        raise ServiceError(f"{cfg.target.origin} answered {status} to a streaming request: nothing to record")
    source = {
        "url": redacted_url(cfg.target.origin + cfg.target.path),  # a file to share: a `?key=` query is masked
        "server": trace.head.header("server") or "",
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "seed": request.seed,
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tokenpath": __version__,
        "http10_status": answer.status,
        "http10_framing": answer.framing.value,
        **request.source,
    }
    recording = recording_from(trace, answer, name=request.name, api=cfg.api, source=source, redact=request.redact)
    refuse_echoed_secrets(recording, cfg)
    return recording


def refuse_echoed_secrets(recording: Recording, cfg: ProbeConfig) -> None:
    """A server that echoes the request back (a debug header, an error's words) put the API key or a --header's value
    into a file meant for sharing: refused, naming where, never the value."""
    text = recording.dumps()
    secrets = [("the API key", cfg.api_key)] if cfg.api_key else []
    secrets += [
        (f"the {name} header's value", value)
        for name, value in cfg.headers
        if len(value) >= MIN_SECRET_CHARS and any(word in name.lower() for word in SECRET_NAME_WORDS)
    ]
    for what, value in secrets:
        if value in text or json.dumps(value)[1:-1] in text:
            raise UsageError(
                f"recording {recording.name}: the server echoed {what} into its answer; not recorded (a file to "
                "share must not hold it)"
            )


def recording_from(
    trace: Trace, answer: Http10Answer, *, name: str, api: Api, source: dict[str, Any], redact: bool = True
) -> Recording:
    """The recording a trace makes (pure): one write per read that completed an event, each event with its kind
    and its bytes (redacted), the time after the request's last byte; the head's headers a stub may send (those it
    cannot are dropped and named in the source's `dropped_headers`). A stream the trace did not keep whole, or a file
    larger than the replay reads, is one UsageError."""
    if trace.frames_dropped:
        raise UsageError(
            f"recording {name}: the server sent {trace.frame_count} events and the trace kept {len(trace.frames)}; "
            f"a recording holds at most {MAX_EVENTS} events and {MAX_RECORDING_BYTES} bytes (stub/replay.py "
            "MAX_EVENTS, MAX_RECORDING_BYTES): record a shorter answer (--max-tokens)"
        )
    reader = frame_reader(api)
    writes: list[RecordedWrite] = []
    kept = 0
    last_read = -1
    for arrival in trace.frames:
        frame = arrival.frame
        data = frame.raw
        if redact:
            data, whole = redacted(data, frame.data)
            kept += not whole
            if data != frame.raw and isinstance(frame, EventMessage):
                data = with_message_crc(data)  # the text hidden: its message CRC made its bytes' again
        event = RecordedEvent(reader.kind(frame), data)
        at_ms = ns_to_ms(arrival.t_ns - trace.t_sent_ns)
        if arrival.read_index == last_read:  # completed by the same read: written together
            writes[-1] = RecordedWrite(at_ms, (*writes[-1].events, event))
        else:
            writes.append(RecordedWrite(at_ms, (event,)))
        last_read = arrival.read_index
    head = trace.head
    headers, dropped = sendable_headers(head.headers if head is not None else ())
    content_type = (head.header("content-type") if head is not None else None) or "text/event-stream"
    head_at_ns = trace.t_head_ns if trace.t_head_ns is not None else trace.t_first_byte_ns  # not a 103's: the head's
    head_ms = ns_to_ms(head_at_ns - trace.t_sent_ns) if head_at_ns is not None else 0.0
    recording = Recording(
        name=name,
        api=api,
        http10_framing=answer.behaviour.http10_framing,
        content_type=content_type,
        headers=tuple(headers),
        head_ms=head_ms,
        writes=tuple(writes),
        source={
            **source,
            **({"unredacted_events": kept} if kept else {}),
            **({"dropped_headers": dropped} if dropped else {}),
        },
    )
    # Through the stub's own checks, the file's size first, so a recording that would be refused at replay is
    # refused now.
    text = recording.dumps()
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_RECORDING_BYTES:
        raise UsageError(
            f"recording {name}: {size} bytes as a file, larger than the {MAX_RECORDING_BYTES} bytes a replay reads "
            "(stub/replay.py MAX_RECORDING_BYTES): record a shorter answer (--max-tokens)"
        )
    return Recording.from_json(json.loads(text), f"recording {name}")


def sendable_headers(pairs: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """The head's headers a replay may send (not DROPPED_HEADERS; each passing the stub's own check, at most
    SENT_HEADERS of them), and why each other one is not: a header the stub cannot send (a value over 1024
    characters or not ASCII) is left out of the recording, named, never a failed recording."""
    kept: list[tuple[str, str]] = []
    dropped: list[str] = []
    names: set[str] = set()
    for name, value in pairs:
        if name.lower() in DROPPED_HEADERS:
            continue
        if name.lower() in names:  # a recording's headers are a table: the later one was kept, the first lost unsaid
            dropped.append(f"header {name}: repeated; a replay sends each name once (the first kept)")
            continue
        names.add(name.lower())
        try:
            response_headers({name: value})
        except UsageError as exc:
            dropped.append(str(exc))
            continue
        if len(kept) >= SENT_HEADERS:
            dropped.append(f"header {name}: past the {SENT_HEADERS} headers a replay sends")
            continue
        kept.append((name, value))
    return kept, dropped


def redacted(raw: bytes, data: bytes | None) -> tuple[bytes, bool]:
    """`raw` with every TEXT_MEMBERS string of its JSON `data` replaced by filler of the same length, as it is
    encoded in `raw` (escaped or not). The second value says whether every such string was found to redact.

    Where `data` lies in `raw` as it is (one SSE data line, an NDJSON line, an event-stream payload), its string
    tokens are found by walking the JSON itself (_walked), so text however a server escaped it is hidden.
    Otherwise (an event whose data spans several lines) each text is looked for as JSON's usual encoders spell it."""
    if not data:
        return raw, True
    try:
        value = json.loads(data)
    except ValueError:
        return raw, True  # not JSON (a comment, [DONE]): no text member to hide
    except RecursionError:
        return raw, False  # JSON too deep to read: whatever text it holds is kept, and counted so
    filled = _walked(data) if data in raw else None
    if filled is not None:
        # Every copy (a server that echoes the payload on a comment or an `event:` line has it twice).
        return raw.replace(data, filled), True
    out, whole = raw, True
    for text in _texts(value):
        # surrogatepass: a lone surrogate json.loads took from the bytes is written back as those bytes
        for encoded in dict.fromkeys((json.dumps(text), json.dumps(text, ensure_ascii=False))):
            literal = encoded.encode(errors="surrogatepass")
            # Only as a member's value (after its colon), never a key or another member's text that happens to match.
            pattern = re.compile(rb"(:\s*)" + re.escape(literal))
            filler = b'"' + FILLER * (len(literal) - 2) + b'"'
            hidden = pattern.sub(rb"\g<1>" + filler, out)  # filler: x and quotes, nothing sub() reads
            if hidden != out:
                out = hidden
                break
        else:
            whole = False
    return out, whole


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _walked(data: bytes) -> bytes | None:
    """`data` with each string token _texts would hide filled (_filled), found by walking the JSON by hand for its
    structure, each key and leaf read by json's own scanner, so a token's extent is exact whatever escapes it uses.
    None when `data` is not one JSON value in UTF-8 (or too deep to walk)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    tokens: list[tuple[int, int]] = []

    def space(i: int) -> int:
        match = _SPACE.match(text, i)
        assert match is not None  # `*`: it always matches
        return match.end()

    def expect(i: int, char: str) -> int:
        if text[i : i + 1] != char:
            raise ValueError(f"expected {char!r} at {i}")
        return i + 1

    def walk(i: int, key: str) -> int:
        i = space(i)
        opening = text[i : i + 1]
        if opening in ("{", "["):
            closing = "}" if opening == "{" else "]"
            i = space(i + 1)
            if text[i : i + 1] == closing:
                return i + 1
            while True:
                if opening == "{":
                    member, i = _DECODER.raw_decode(text, i)
                    if not isinstance(member, str):
                        raise ValueError("an object's key that is not a string")
                    i = walk(expect(space(i), ":"), member)
                else:
                    i = walk(i, key)  # an array's items are its member's, as _texts reads them
                i = space(i)
                if text[i : i + 1] != ",":
                    return expect(i, closing)
                i = space(i + 1)
        leaf, end = _DECODER.raw_decode(text, i)
        if isinstance(leaf, str) and leaf and key in TEXT_MEMBERS:
            tokens.append((i, end))
        return int(end)

    try:
        end = walk(0, "")
    except (ValueError, RecursionError):  # json.JSONDecodeError is a ValueError
        return None
    return _filled(text, tokens) if space(end) == len(text) else None


def _filled(text: str, tokens: list[tuple[int, int]]) -> bytes:
    """`text` encoded, each token (start, end: quotes included) a string of filler as long in bytes."""
    parts: list[bytes] = []
    last = 0
    for start, end in tokens:
        parts.append(text[last:start].encode())
        parts.append(b'"' + FILLER * (len(text[start:end].encode()) - 2) + b'"')
        last = end
    parts.append(text[last:].encode())
    return b"".join(parts)


def _texts(value: object, key: str = "") -> list[str]:
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _texts(v, k)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v, key)]
    return [value] if isinstance(value, str) and value and key in TEXT_MEMBERS else []
