"""What wire/h2client.py's HTTP/2 client core hands its owner per read: a stream's head, its DATA (one event per
stream per read: the arrival rule), its end or reset, the connection's GOAWAY."""

from __future__ import annotations

from dataclasses import dataclass, field

import h2.errors

from tokenpath.wire.client import ResponseHead

REFUSED_STREAM = int(h2.errors.ErrorCodes.REFUSED_STREAM)
PROTOCOL_ERROR = int(h2.errors.ErrorCodes.PROTOCOL_ERROR)


@dataclass(frozen=True, slots=True)
class HeadReceived:
    stream_id: int
    head: ResponseHead


@dataclass(slots=True)  # not frozen: filled as the read's frames are translated (a frozen init costs 3 calls more)
class DataReceived:
    stream_id: int
    data: bytes  # the payload of this stream's DATA in one read (padding removed), a frame still arriving included
    frames: int  # how many DATA frames the read completed (an empty DATA frame counts): 0 when `data` is only the
    # first bytes of a frame cut by the read (its rest comes in a later read's DataReceived, with the frame counted)


@dataclass(frozen=True, slots=True)
class StreamEnded:
    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamReset:
    stream_id: int
    error_code: int
    remote: bool  # the peer reset it (or refused it by GOAWAY); False: we did, for its stream error
    reason: str = field(default="", compare=False)  # ours: what the stream error was (a malformed head's fault)


@dataclass(frozen=True, slots=True)
class ConnectionEnded:
    error_code: int
    last_stream_id: int
    reason: str  # the GOAWAY's debug data, printable, shortened


H2Event = HeadReceived | DataReceived | StreamEnded | StreamReset | ConnectionEnded


def error_name(code: int) -> str:
    """An HTTP/2 error code's name (RFC 9113 7), for messages: `REFUSED_STREAM`, or `error code 99` for one unknown."""
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"error code {code}"
