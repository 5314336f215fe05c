"""Which streams a diagnosis runs. Pure: a tuple of Run, nothing sent.

Against a tokenpath stub (behind the path, or the path itself) each run sets the stub's pacing in its body's
`tokenpath` member (stub/config.py Pacing.OVERRIDABLE; the proxies forward bodies untouched), so the series varies
what separates the causes:

- base:  small frames, short interval: what any hold shows on
- slow:  small frames, long interval: a timer keeps its hold time, a byte threshold keeps its burst bytes
- large: large frames, short interval: a byte threshold below one frame lets each frame through; a buffer of a
         few KB shows its size
- browser: base with a browser's Accept-Encoding: compression without a flush

Against any other endpoint only the client's side varies: identity (no Accept-Encoding) and the browser's header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING

# Short streams (a diagnosis is a few seconds): 12 frames show bursts of up to ~5 twice over and a whole-response
# hold as one read.
FRAMES = 12
# The first frame comes this long after the request while the head goes at once: a path that holds the head until
# the first frame shows a TTFB near it.
TTFT_MS = 150.0
SMALL_BYTES = 60  # a token frame's size (stub `format` plain pads each frame to exactly this)
LARGE_BYTES = 1200  # under one 1,448-byte segment, above common byte thresholds; 12 of them pass a 4 KB buffer
SHORT_MS = 50.0  # the interval of seed 003's condition
LONG_MS = 120.0  # long enough that a ~200 ms timer holds 2 frames, not 4-5: the bytes per burst change, the hold not


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    accept_encoding: str | None = None  # None: none sent (identity), as curl sends
    # The stub's pacing for this run, None when the path's origin is not a tokenpath stub.
    interval_ms: float | None = None
    frame_bytes: int | None = None
    ttft_ms: float | None = None
    frames: int | None = None

    @property
    def controlled(self) -> bool:
        return self.interval_ms is not None

    def stub_pacing(self) -> dict[str, Any] | None:
        """The body's `tokenpath` member: bare frames padded to the size (format plain), on this schedule."""
        if not self.controlled:
            return None
        return {
            "format": "plain",
            "frame_bytes": self.frame_bytes,
            "interval_ms": self.interval_ms,
            "ttft_ms": self.ttft_ms,
            "tokens": self.frames,
        }


def _paced(name: str, interval_ms: float, frame_bytes: int, accept_encoding: str | None = None) -> Run:
    return Run(name, accept_encoding, interval_ms, frame_bytes, TTFT_MS, FRAMES)


def plan(controlled: bool, encodings: bool = True) -> tuple[Run, ...]:
    """The series: paced runs when a stub is behind the path, the client's side only otherwise. `encodings` False
    leaves out the browser run (a probe that cannot send Accept-Encoding)."""
    if controlled:
        runs = [
            _paced("base", SHORT_MS, SMALL_BYTES),
            _paced("slow", LONG_MS, SMALL_BYTES),
            _paced("large", SHORT_MS, LARGE_BYTES),
        ]
        browser = _paced("browser", SHORT_MS, SMALL_BYTES, BROWSER_ACCEPT_ENCODING)
    else:
        runs = [Run("base")]
        browser = Run("browser", BROWSER_ACCEPT_ENCODING)
    return tuple([*runs, browser] if encodings else runs)
