"""The limits a proxy puts on one streamed response, as data: each catalogue entry declares its shipped or
documented defaults (`stock_timeouts`, with the source in a comment beside them) and renders them into every variant
but `long_streams`, which lifts them. Tests and the timeouts survey replace the stock values with tiny ones through
`Site.timeouts`, never by editing a stock value.

The words are ../shared/design.md's: an **idle** limit ends a stream after a silence (the wait for the response's
first byte included, for a proxy that has one timer for both), a **first-byte** limit only the wait before the
response head, a **total** limit the whole response whatever its pacing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LONG_STREAMS = "long_streams"  # the fix variant every proxy with a stream limit carries
LIFTED_S = 3600.0  # what long_streams sets where a proxy has no "off": an hour, longer than any generation


@dataclass(frozen=True, slots=True)
class StreamTimeouts:
    """A proxy's limits on one upstream response, in seconds; None: no such limit (or none by default)."""

    idle_s: float | None = None  # a silence between two reads from the upstream (the head's wait included)
    first_byte_s: float | None = None  # the wait for the response head, where it is a timer of its own
    total_s: float | None = None  # the whole response, from the request

    def __post_init__(self) -> None:
        for name in ("idle_s", "first_byte_s", "total_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds or None, not {value!r}")


NO_LIMITS = StreamTimeouts()


def whole_seconds(value: float) -> int:
    """For a directive that takes whole seconds (Apache, Squid): rounded up, never below 1 (0 often means none)."""
    return max(1, math.ceil(value))


def milliseconds(value: float) -> int:
    return max(1, round(value * 1000))


def duration(value: float) -> str:
    """nginx's, Caddy's and Traefik's syntax: "60s", or "1500ms" for a fraction."""
    ms = milliseconds(value)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def proto_duration(value: float) -> str:
    """Envoy's (protobuf JSON Duration): "15s", "1.5s"."""
    return f"{milliseconds(value) / 1000:g}s"
