"""HTTP/3's side of one probed stream: the client's QUIC flow-control windows as a stated condition (H3Window, its
presets and its parser) and the figures the stream leaves (H3Figures: the handshake apart from TTFT, UDP reads and
datagrams, DATA per read, flow-control stalls, each arrival's time). probe/h3stream.py fills them; the trace and
the --json document carry them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenpath.errors import UsageError

MIB = 1024 * 1024
MAX_QUIC_WINDOW = (1 << 62) - 1  # a QUIC variable-length integer's largest value (RFC 9000 16)
# A read that leaves less credit than one full QUIC packet's payload cannot take the next packet of the stream: a
# stall, as HTTP/2 counts a window below one frame. 1,200 B is the smallest datagram every path carries (RFC 9000 14).
STALL_CREDIT = 1200
MAX_ARRIVALS_KEPT = 4096  # arrival times in the --json document; the counts cover the whole stream


@dataclass(frozen=True, slots=True)
class H3Window:
    """Our QUIC receive windows, sent in our transport parameters: `stream` is initial_max_stream_data_bidi_local
    (the request stream's), `connection` initial_max_data. aioquic doubles each once half of it is used; the
    initial values are the condition, as a browser's are."""

    stream: int
    connection: int
    name: str = ""  # "default", "browser", or "" for numbers

    def __post_init__(self) -> None:
        for what, value in (("stream", self.stream), ("connection", self.connection)):
            if not 1 <= value <= MAX_QUIC_WINDOW:
                raise UsageError(f"a QUIC {what} window must be 1-{MAX_QUIC_WINDOW} bytes, not {value}")

    def __str__(self) -> str:
        if self.name:
            return self.name
        return str(self.stream) if self.connection == self.stream else f"{self.stream}:{self.connection}"


# aioquic's QuicConfiguration defaults (max_stream_data = max_data = 1 MiB): what a Python client gets unasked.
DEFAULT_H3_WINDOW = H3Window(MIB, MIB, "default")
# Chromium's, from net/quic/quic_context.cc: kQuicStreamMaxRecvWindowSize = 6 * 1024 * 1024 and
# kQuicSessionMaxRecvWindowSize = 15 * 1024 * 1024, the initial stream and session windows QuicParams sends: the same
# 6 MiB / 15 MiB as its HTTP/2 windows (wire/h2client.py BROWSER_WINDOW).
BROWSER_H3_WINDOW = H3Window(6 * MIB, 15 * MIB, "browser")


def parse_h3_window(text: str) -> H3Window:
    """`default`, `browser`, `BYTES` (the stream window; the connection's the same) or `STREAM:CONNECTION`. str() of
    the result parses back to it."""
    value = text.strip().lower()
    if value in ("default", ""):
        return DEFAULT_H3_WINDOW
    if value == "browser":
        return BROWSER_H3_WINDOW
    stream_text, sep, conn_text = value.partition(":")
    try:
        stream = int(stream_text.replace("_", ""))
        conn = int(conn_text.replace("_", "")) if sep else stream
    except ValueError:
        raise UsageError(
            f"h3 window {text!r}: expected `default`, `browser`, BYTES or STREAM_BYTES:CONNECTION_BYTES"
        ) from None
    return H3Window(stream, conn)


@dataclass(frozen=True, slots=True)
class H3Figures:
    """One HTTP/3 stream's transport figures, frozen when it ended."""

    window: str  # the client's windows as stated (H3Window's str)
    handshake_ms: float  # the QUIC + TLS handshake, before the request: never part of TTFB or TTFT
    udp_reads: int  # wake-ups that read at least one datagram while the stream ran (every datagram then readable)
    datagrams: int  # datagrams those reads brought
    data_events: int  # HTTP/3 DATA this stream's reads delivered (aioquic's DataReceived: one per packet's frames)
    data_reads: int  # reads that brought this stream DATA
    flow_control_stalls: int  # reads that left the stream's credit (or the connection's) below STALL_CREDIT
    min_credit: int | None  # the least credit a read left (before our MAX_STREAM_DATA / MAX_DATA went out)
    arrivals_ms: tuple[float, ...] = field(default=())  # each arrival, from the request's last byte (the first kept)

    @property
    def data_events_per_read(self) -> float | None:
        return self.data_events / self.data_reads if self.data_reads else None

    def to_json(self) -> dict[str, Any]:
        per_read = self.data_events_per_read
        return {
            "window": self.window,
            "handshake_ms": self.handshake_ms,
            "udp_reads": self.udp_reads,
            "datagrams": self.datagrams,
            "data_events": self.data_events,
            "data_reads": self.data_reads,
            "data_events_per_read": round(per_read, 3) if per_read is not None else None,
            "flow_control_stalls": self.flow_control_stalls,
            "min_credit": self.min_credit,
            "arrivals_ms": list(self.arrivals_ms),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> H3Figures:
        return cls(
            window=str(obj.get("window", "")),
            handshake_ms=float(obj.get("handshake_ms", 0.0)),
            udp_reads=int(obj.get("udp_reads", 0)),
            datagrams=int(obj.get("datagrams", 0)),
            data_events=int(obj.get("data_events", 0)),
            data_reads=int(obj.get("data_reads", 0)),
            flow_control_stalls=int(obj.get("flow_control_stalls", 0)),
            min_credit=obj.get("min_credit"),
            arrivals_ms=tuple(float(x) for x in obj.get("arrivals_ms") or ()),
        )
