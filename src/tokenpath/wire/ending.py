"""How a token stream ended, sans-IO: the one rule every client (probe, load, matrix, monitor, diagnose) applies to
each stream it reads, and the words every report uses for it (README, "how a stream ends").

    said = reader.last_word(frames)                  # wire/reader.py: what the body's last frames said
    end = classify_end(said, BodyEnd.CHUNKED, sent_ns=..., end_ns=..., last_byte_ns=...)
    end.kind                                         # COMPLETE, CUT_ERROR or CUT_SILENT

Two facts decide it, and nothing else:

- what the format said at the end (LastWord): its own final event (`[DONE]`, `message_stop`, `response.completed`,
  Bedrock's `messageStop` (its `metadata` follows), a Gemini response with a `finishReason`, Ollama's `"done":
  true`), its own error frame, neither, or bare frames in no format's shape (the stub's `format` plain).
  FrameReader.ends / last_word says which (the gateway's relay asks the same);
- how HTTP ended the body (BodyEnd): normally (a close-delimited body's close, the last chunk, all of its
  Content-Length, HTTP/2's END_STREAM), or broken (a reset, a connection that closed before the framing said the
  body ended, an error status instead of a stream).

The kinds, as RULES below spells them out:

- complete: the format's final event came. A reset after it loses nothing the format carries.
- cut_error: the client can tell something failed: the format's error frame, an HTTP error status, a reset, a
  body cut short by its own framing (no last chunk, fewer bytes than its Content-Length): every HTTP client
  raises for those (httpx: RemoteProtocolError, fetch: a network error).
- cut_silent: HTTP saw a normal end and the final event never came. Only a client that knows the format can tell
  it from a short answer: the failure people cannot see (a proxy's idle timer on a close-delimited body, a
  gateway that ends its chunked response when its upstream went away).

Each end carries when it came, from the request (the last request byte written) and from the last byte received
(None when no byte came): a path's idle limit is the second, its total limit the first.

A client that raises for a cut (the probe raises PeerError subclasses, as it always has) attaches the end to the
error (`STREAM_END.attach`, tokenpath/riders.py); whoever catches it reads it back with `STREAM_END.of`.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tokenpath.errors import (
    BadRequest,
    ConnectError,
    ContentEncodingError,
    HTTP2Unavailable,
    HTTPStatusError,
    NetworkError,
    PeerTimeout,
    ProtocolViolation,
    RemoteProtocolError,
    ResponseTooLarge,
    StreamFormatError,
)
from tokenpath.riders import Rider
from tokenpath.wire.framing import Framing


class EndKind(StrEnum):
    COMPLETE = "complete"  # the format's final event came
    CUT_ERROR = "cut_error"  # the client can tell: an error status, the format's error frame, a reset, a cut body
    CUT_SILENT = "cut_silent"  # HTTP saw a normal end without the final event: only the format tells


class BodyEnd(StrEnum):
    """How HTTP ended a response body."""

    CLOSE = "close"  # a close-delimited body (HTTP/1.0 style, no length, no chunks): the connection's close ends it
    CHUNKED = "chunked"  # the last chunk (`0\r\n\r\n`)
    LENGTH = "length"  # all of its Content-Length
    END_STREAM = "end_stream"  # HTTP/2's END_STREAM flag
    TRUNCATED = "truncated"  # the connection closed before the body's framing ended it (no last chunk, bytes short)
    RESET = "reset"  # a TCP reset, an HTTP/2 RST_STREAM or a connection error under the stream
    STATUS = "status"  # an HTTP error status: no stream at all
    # The peer broke HTTP's rules under the body (a malformed chunk size, bytes past its Content-Length, a 101 to a
    # request that asked for no upgrade, an HTTP/2 or HTTP/3 protocol error): the peer's error, never a path's cut
    # (diagnose raises it: exit 10); the matrix and load count it as cut_error, their `how` saying which.
    MALFORMED = "malformed"

    @property
    def normal(self) -> bool:
        """What an HTTP client reports as the body's normal end."""
        return self in _NORMAL


_NORMAL = frozenset({BodyEnd.CLOSE, BodyEnd.CHUNKED, BodyEnd.LENGTH, BodyEnd.END_STREAM})


class LastWord(StrEnum):
    """What a body's last frames said about its end (wire/reader.py FrameReader.last_word)."""

    FINAL = "final"  # the format's final event
    ERROR = "error"  # the format's error frame
    NOTHING = "nothing"  # neither: the frames just stopped
    # Bare text frames in no API's shape (`data: 17`: the stub's `format` plain, which the matrix, sweep and
    # diagnose pace by size): no format, so no final event to wait for; the body's end is theirs.
    UNFRAMED = "unframed"


# The rule, as data (h11's _state.py shape): (what the format said, whether HTTP saw a normal end) -> the kind.
RULES: Mapping[tuple[LastWord, bool], EndKind] = {
    # The format's error frame: the server said it failed, however the body ended after it.
    (LastWord.ERROR, True): EndKind.CUT_ERROR,
    (LastWord.ERROR, False): EndKind.CUT_ERROR,
    # Its final event: the answer is whole; a reset or a missing last chunk after it loses nothing.
    (LastWord.FINAL, True): EndKind.COMPLETE,
    (LastWord.FINAL, False): EndKind.COMPLETE,
    # Neither, and HTTP saw a normal end: only the format can tell it from a short answer.
    (LastWord.NOTHING, True): EndKind.CUT_SILENT,
    # Neither, and HTTP saw the body broken: every HTTP client raises.
    (LastWord.NOTHING, False): EndKind.CUT_ERROR,
    # Bare frames have no final event: HTTP's end is the stream's, a broken body a cut all the same.
    (LastWord.UNFRAMED, True): EndKind.COMPLETE,
    (LastWord.UNFRAMED, False): EndKind.CUT_ERROR,
}


def body_end(framing: Framing) -> BodyEnd:
    """The normal end of an HTTP/1.1 body of this framing (wire/framing.py). A body with none (HEAD, 204, 304)
    ends with its head: as a Content-Length of 0 would."""
    if framing is Framing.CHUNKED:
        return BodyEnd.CHUNKED
    if framing is Framing.CLOSE:
        return BodyEnd.CLOSE
    return BodyEnd.LENGTH


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """How one stream ended, and when: from the request, and from the last byte received."""

    kind: EndKind
    how: BodyEnd
    at_ns: int | None  # from the last request byte written to the end; None: not known
    since_last_byte_ns: int | None  # from the last response byte to the end; None: no byte came
    detail: str = ""  # in words: which final event, which error, the unfinished frame's bytes

    @property
    def complete(self) -> bool:
        return self.kind is EndKind.COMPLETE

    @property
    def cut(self) -> bool:
        return self.kind is not EndKind.COMPLETE

    def describe(self) -> str:
        """One line: `cut_silent (chunked) 60012.0 ms after the request, 60001.3 ms after the last byte: ...`."""
        when = []
        if self.at_ns is not None:
            when.append(f"{self.at_ns / 1e6:.1f} ms after the request")
        if self.since_last_byte_ns is not None:
            when.append(f"{self.since_last_byte_ns / 1e6:.1f} ms after the last byte")
        text = f"{self.kind.value} ({self.how.value})"
        if when:
            text += " " + ", ".join(when)
        return f"{text}: {self.detail}" if self.detail else text

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "how": self.how.value,
            "at_ms": _ms(self.at_ns),
            "since_last_byte_ms": _ms(self.since_last_byte_ns),
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> StreamEnd:
        return cls(
            kind=EndKind(obj["kind"]),
            how=BodyEnd(obj["how"]),
            at_ns=_ns(obj.get("at_ms")),
            since_last_byte_ns=_ns(obj.get("since_last_byte_ms")),
            detail=str(obj.get("detail") or ""),
        )


def classify_end(
    said: LastWord,
    how: BodyEnd,
    *,
    sent_ns: int | None,
    end_ns: int,
    last_byte_ns: int | None,
    detail: str = "",
) -> StreamEnd:
    """The end of one stream: RULES applied to what its last frames said and how HTTP ended its body (an error
    status had no stream: nothing a frame said counts). Times are CLOCK_MONOTONIC ns."""
    if how is BodyEnd.STATUS:
        said = LastWord.NOTHING
    kind = RULES[(said, how.normal)]
    return StreamEnd(
        kind=kind,
        how=how,
        at_ns=end_ns - sent_ns if sent_ns is not None else None,
        since_last_byte_ns=end_ns - last_byte_ns if last_byte_ns is not None else None,
        detail=detail or _DETAILS[(said, how.normal)],
    )


_DETAILS: Mapping[tuple[LastWord, bool], str] = {
    (LastWord.ERROR, True): "the stream ended with the format's error frame",
    (LastWord.ERROR, False): "the stream carried the format's error frame, then broke off",
    (LastWord.FINAL, True): "",
    (LastWord.FINAL, False): "after the format's final event",
    (LastWord.NOTHING, True): "the body ended without the format's final event",
    (LastWord.NOTHING, False): "the body broke off before the format's final event",
    (LastWord.UNFRAMED, True): "bare frames (no API format): the body's end ends them",
    (LastWord.UNFRAMED, False): "bare frames (no API format), then the body broke off",
}


# An error event in these words is a path's timer announcing its cut (the tokenpath gateway's
# `upstream_idle_timeout` and `total_timeout`, LiteLLM's timeouts), not the origin's failure.
TIMER_WORDS = ("timeout", "timed out")
ERROR_TEXT_CHARS = 200  # of an error event's data, kept in its end's detail (error_detail)


def error_detail(data: bytes, how: BodyEnd) -> str:
    """The detail of a stream that ended with the error event `data`: the usual words and the event's own (bounded),
    which tell whose error it was (origin_end); "" (the usual words alone) when it has none."""
    text = " ".join(data.decode("utf-8", "replace").split())
    return f"{_DETAILS[(LastWord.ERROR, how.normal)]}: {text[:ERROR_TEXT_CHARS]}" if text else ""


def announced_timeout(end: StreamEnd) -> bool:
    """The stream ended with an error event whose words name a timeout: a path's timer, said in the format."""
    return end.kind is EndKind.CUT_ERROR and end.how.normal and any(w in end.detail.lower() for w in TIMER_WORDS)


def origin_end(end: StreamEnd) -> bool:
    """An end that is no path's doing, the one rule diagnose (diagnose/cuts.py: not_the_paths, name_end) and the
    timeouts survey (diagnose/limits.py: check_origin) read ends by: the format's own error frame (a cut_error whose
    body HTTP ended normally: RULES gives that only to LastWord.ERROR) unless its words name a timeout
    (announced_timeout), an error status, bytes that broke HTTP (MALFORMED)."""
    if end.kind is EndKind.CUT_ERROR and end.how.normal:
        return not announced_timeout(end)
    return end.how in (BodyEnd.STATUS, BodyEnd.MALFORMED)


def unfinished(nbytes: int) -> str:
    """The words for a body that ended inside a frame."""
    return f"the body ended inside a frame ({nbytes} bytes of it), without the format's final event"


def broken_by(exc: BaseException) -> BodyEnd | None:
    """How an error a client raised while reading a response ended its body, when it did: a reset (TCP, TLS or an
    HTTP/2 RST_STREAM: NetworkError), a body that ended short of its framing (RemoteProtocolError for a close before
    the last chunk or the Content-Length, a compressed stream cut short), bytes that broke HTTP's rules (MALFORMED:
    `violation`), an error status. None for what ends no stream: the client's own timeouts and limits, an
    answer that is no token stream (its Content-Type, a coding it cannot decode), a connection never made."""
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ssl.SSLError):
        return BodyEnd.RESET
    if isinstance(exc, HTTPStatusError | BadRequest):
        return BodyEnd.STATUS
    if isinstance(exc, ConnectError | PeerTimeout | ResponseTooLarge | HTTP2Unavailable):
        return None
    if isinstance(exc, NetworkError):
        return BodyEnd.RESET
    if isinstance(exc, RemoteProtocolError):
        return BodyEnd.MALFORMED if violation(exc) else BodyEnd.TRUNCATED
    if isinstance(exc, ContentEncodingError) and exc.reason == "truncated":
        return BodyEnd.TRUNCATED
    return None


def violation(exc: BaseException) -> bool:
    """The peer's bytes broke HTTP's (or the stream format's) rules: not a body cut short by a close. Decided by the
    error's class, which the code that saw the bytes chose (errors.ProtocolViolation; a StreamFormatError unless its
    body ended inside a frame), never by its words."""
    if isinstance(exc, StreamFormatError):
        return not exc.truncated
    return isinstance(exc, ProtocolViolation)


# A client that raises for a cut attaches its end to the error; whoever catches it asks for it back. No end: not a
# stream's end (a refused connection, a client's own timeout).
STREAM_END: Rider[StreamEnd] = Rider("stream_end", StreamEnd)


def _ms(ns: int | None) -> float | None:
    return round(ns / 1e6, 3) if ns is not None else None


def _ns(ms: object) -> int | None:
    return round(float(ms) * 1e6) if isinstance(ms, int | float) else None
