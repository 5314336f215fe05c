"""What one HTTP/2 client connection may do (H2Limits, each default with its reason), and the server's flood guard
(ServerFrameGuard: wire.h2guard's bounds plus the two a server needs), used by serve/h2.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenpath.wire.h2guard import CONTINUATION, HEADERS, PRIORITY_PER_STREAM, FrameGuard


@dataclass(frozen=True, slots=True)
class H2Limits:
    """What one HTTP/2 client connection may do. The defaults, with their reasons:

    - 128 concurrent streams: nginx's http2_max_concurrent_streams; a browser or CDN opens more connections past it.
    - 1 MiB receive window per connection (request bodies are acknowledged as they are read once admitted, and
      bounded by the server's body limit, so the window only sets how fast an upload can go).
    - 16 KiB frames (the RFC default, what every client accepts): a larger frame would have to be buffered whole.
    - RST_STREAM: 200 in a burst, 50 a second after, counting the resets a client sends and those it makes us send
      (MadeYouReset, CVE-2025-8671: a frame that is a stream error, such as a WINDOW_UPDATE past 2^31-1 or DATA
      after END_STREAM, gets the stream reset by us, and its request's work was started all the same). An honest
      client cancels a stream when its user stops one; the rapid-reset attack sends thousands a second. The
      numbers allow a browser tab cancelling every stream it has open, and end an attacker's connection within a
      fraction of a second."""

    max_concurrent_streams: int = 128
    connection_window: int = 1 << 20
    max_frame_size: int = 16_384
    max_reset_burst: int = 200
    resets_per_s: float = 50.0


RST_STREAM = 0x3


class ServerFrameGuard(FrameGuard):
    """wire.h2guard's bounds, plus those a server needs: stream resets past a burst allowance refilled at a rate (the
    rapid-reset attack, CVE-2023-44487, opens and cancels streams so fast that the concurrency limit never applies
    while every stream still costs a request's work; MadeYouReset, CVE-2025-8671, makes the server do the
    cancelling: serve/h2.py spends the same allowance with `provoked_reset`), and a header block (HEADERS +
    CONTINUATION, compressed) over the server's head limit, refused at its frame header rather than buffered by h2.
    Each stream a client opens adds to what it may send of PRIORITY and WINDOW_UPDATE frames."""

    def __init__(self, clock: Callable[[], float], h2limits: H2Limits, max_block_bytes: int) -> None:
        super().__init__(clock, h2limits.max_frame_size)
        self.max_block_bytes = max_block_bytes
        self.max_reset_burst = h2limits.max_reset_burst
        self.resets_per_s = h2limits.resets_per_s
        self.reset_allowance = float(h2limits.max_reset_burst)
        self.reset_refilled = clock()
        self.block_bytes = 0

    def _frame(self, length: int, kind: int, flags: int) -> str | None:
        if kind == HEADERS:
            self.block_bytes = length
            self.rare_owed += PRIORITY_PER_STREAM
            self.window_updates_owed += 2  # its stream's first, and the connection's
        elif kind == CONTINUATION:
            self.block_bytes += length
        if kind in (HEADERS, CONTINUATION) and self.block_bytes > self.max_block_bytes:
            return f"a header block over {self.max_block_bytes} bytes"
        if kind == RST_STREAM:
            return self.spend_reset("RST_STREAM frames")
        return super()._frame(length, kind, flags)

    def provoked_reset(self) -> str | None:
        """A stream we reset because of the client's frame (MadeYouReset): why it is a flood, or None."""
        return self.spend_reset("stream resets (sent, and provoked)")

    def spend_reset(self, what: str) -> str | None:
        now = self.clock()
        burst = self.max_reset_burst
        self.reset_allowance = min(burst, self.reset_allowance + (now - self.reset_refilled) * self.resets_per_s)
        self.reset_refilled = now
        self.reset_allowance -= 1
        if self.reset_allowance < 0:
            return f"more than {burst} {what} in a burst (allowed: {self.resets_per_s:g} a second)"
        return None


DEFAULT_LIMITS = H2Limits()
