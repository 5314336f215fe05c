"""The `buffer` control over HTTP/2: hold each stream's body until that stream ends. Pure logic, like policies.py.

Why a frame-aware hold in the byte relay rather than a relay that terminates h2: the controls must differ from the
direct path by their policy and nothing else. A byte relay in front of the h2c-speaking stub keeps the stub's own h2
framing, windows and SETTINGS end to end (what the client measures is the stub's h2 plus the policy), where a
terminating relay would add its own h2 stack (frame sizes, window updates, write scheduling) to every control,
`pass` included. Cork needs nothing new: it holds bytes by size and time whatever they carry, as TCP_CORK under an h2
proxy does. Buffer does: writing at the upstream's EOF would never answer a kept-alive h2 connection, whose EOF never
comes while the client waits for its streams (a deadlock: measured as a probe timeout; over HTTP/1.1 policies.py
releases each response at its end for the same reason). So over h2 it cuts frames:

- DATA of stream s is held until the DATA (or trailing HEADERS) frame that carries END_STREAM for s; then all of s's
  held frames go out in one write (one arrival for the client, as over 1.1).
- Header blocks (HEADERS, CONTINUATION, PUSH_PROMISE) pass at once: HPACK's state is shared by the connection, so
  header blocks may not be reordered (RFC 9113 §4.3); the response head thus goes out before the held body.
- RST_STREAM drops s's held body; every other frame (SETTINGS, PING, WINDOW_UPDATE, GOAWAY...) passes at once.
- Flow control: the upstream sends a stream no more than the client's window, and the client opens it only as it
  consumes, which it cannot do while the body is held. A body larger than the window would stall forever, so the
  windows the client grants are tracked (its SETTINGS_INITIAL_WINDOW_SIZE and WINDOW_UPDATEs, minus the DATA the
  upstream sent): when a stream's window, or the connection's, is left below the largest DATA frame seen, what is
  held for it is released and counted (`forced_releases`). Certification's bodies (12 x 60 B) never get near it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hyperframe.exceptions import HyperframeError
from hyperframe.frame import DataFrame, Frame, HeadersFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame

from tokenpath.controls.policies import HELD, MAX_BUFFER_BYTES, BufferLimitExceeded, HeldBytes, Write
from tokenpath.serve.h2 import PREFACE  # RFC 9113 §3.4: every h2 client starts with it (h2c and over TLS)
from tokenpath.wire.h2client import RFC_DEFAULT_WINDOW

log = logging.getLogger(__name__)

HEADER = 9  # frame header bytes (RFC 9113 §4.1)
DEFAULT_WINDOW = RFC_DEFAULT_WINDOW  # RFC 9113 §6.9.2: both windows until SETTINGS / WINDOW_UPDATE say otherwise


def sniff_h2(prefix: bytes) -> bool | None:
    """True: these first client bytes are HTTP/2's connection preface; False: they are not (HTTP/1.x); None: too few
    bytes to tell yet (a byte that differs decides at once, so at most 24 bytes are ever kept)."""
    n = min(len(prefix), len(PREFACE))
    if prefix[:n] != PREFACE[:n]:
        return False
    return True if n == len(PREFACE) else None


class FrameCutter:
    """Whole frames out of a byte stream (sans-IO): `feed(bytes)` -> [(frame header, whole frame bytes)]. Keeps at
    most one partial frame; a frame's length is 24 bits, so that is bounded by 16 MiB + 9 bytes."""

    def __init__(self, skip: bytes = b"") -> None:
        self._skip = skip  # a prefix to drop first (the client's preface, when cutting the client's side)
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[Frame, bytes]]:
        self._buf += data
        if self._skip:
            if len(self._buf) < len(self._skip):
                return []
            del self._buf[: len(self._skip)]
            self._skip = b""
        frames: list[tuple[Frame, bytes]] = []
        buf, pos = self._buf, 0
        while len(buf) - pos >= HEADER:  # cut at offsets, drop the consumed bytes once (not per frame)
            frame, length = Frame.parse_frame_header(memoryview(bytes(buf[pos : pos + HEADER])))
            end = pos + HEADER + length
            if len(buf) < end:
                break
            frames.append((frame, bytes(buf[pos:end])))
            pos = end
        del buf[:pos]
        return frames

    def rest(self) -> bytes:
        rest, self._buf = bytes(self._buf), bytearray()
        return rest


@dataclass
class _Windows:
    """The client's receive windows as the upstream sees them: what it may still send per stream and in all."""

    initial: int = DEFAULT_WINDOW
    connection: int = DEFAULT_WINDOW
    streams: dict[int, int] = field(default_factory=dict)

    def stream(self, sid: int) -> int:
        return self.streams.get(sid, self.initial)


class H2BufferPolicy:
    """`buffer` over an HTTP/2 connection (see the module's docstring). The relay feeds it the client's bytes
    (`observe_request`) to follow the windows, and the upstream's (`feed`)."""

    def __init__(self, write: Write, limit: int = MAX_BUFFER_BYTES, held: HeldBytes = HELD) -> None:
        self._write = write
        self._limit = limit
        self._all_held = held  # what every connection of the relay holds (policies.HeldBytes)
        self._up = FrameCutter()
        self._down = FrameCutter(skip=PREFACE)
        self._held: dict[int, list[bytes]] = {}
        self._size = 0
        self._largest = 1  # the largest DATA frame seen: a window below it may not let the next one through
        self._windows = _Windows()
        self.forced_releases = 0

    def observe_request(self, data: bytes) -> None:
        for frame, whole in self._cut(self._down, data):
            if isinstance(frame, SettingsFrame | WindowUpdateFrame) and "ACK" not in frame.flags:
                try:
                    frame.parse_body(memoryview(whole[HEADER:]))
                except HyperframeError as exc:
                    raise BufferLimitExceeded(f"buffer over h2: unreadable client frame ({exc})") from None
                self._grant(frame)

    def feed(self, data: bytes) -> None:
        out: list[bytes] = []
        w = self._windows
        for frame, whole in self._cut(self._up, data):
            sid, ends = frame.stream_id, "END_STREAM" in frame.flags
            if isinstance(frame, DataFrame):
                self._largest = max(self._largest, len(whole) - HEADER)
                self._spend(sid, len(whole) - HEADER)
                self._hold(sid, whole)
                if ends:
                    out += self._release(sid)
                    w.streams.pop(sid, None)
                elif self._starved(sid):
                    self.forced_releases += 1
                    log.warning("buffer over h2: stream %d's window is nearly spent; released what it held", sid)
                    out += self._release(sid) if w.stream(sid) < self._largest else self._release_all()
            elif isinstance(frame, HeadersFrame) and ends:  # trailers, or a head-only response: its body first
                out += [*self._release(sid), whole]
                w.streams.pop(sid, None)
            elif isinstance(frame, RstStreamFrame):
                self._drop(sid)
                out.append(whole)
            else:  # header blocks and connection frames: at once, in order
                out.append(whole)
        if out:
            self._write(out)

    def finish(self) -> None:
        held = self._release_all() + [rest for rest in [self._up.rest()] if rest]
        if held:
            self._write(held)

    def close(self) -> None:
        self._held.clear()
        self._all_held.give(self._size)
        self._size = 0

    # internals ---------------------------------------------------------------------------------------------
    def _cut(self, cutter: FrameCutter, data: bytes) -> list[tuple[Frame, bytes]]:
        try:
            return cutter.feed(data)
        except HyperframeError as exc:  # not h2 after all: the control cannot model a path it cannot read
            raise BufferLimitExceeded(f"buffer over h2: unreadable frame ({exc})") from None

    def _grant(self, frame: SettingsFrame | WindowUpdateFrame) -> None:
        w = self._windows
        if isinstance(frame, WindowUpdateFrame):
            if frame.stream_id == 0:
                w.connection += frame.window_increment
            elif frame.stream_id in w.streams:  # a stream still sending: the client consumed a forced release
                w.streams[frame.stream_id] += frame.window_increment
            return
        initial = frame.settings.get(SettingsFrame.INITIAL_WINDOW_SIZE)
        if initial is not None:  # RFC 9113 §6.9.2: a new initial size moves every open stream's window by the delta
            delta, w.initial = initial - w.initial, initial
            w.streams = {sid: left + delta for sid, left in w.streams.items()}

    def _spend(self, sid: int, length: int) -> None:
        w = self._windows
        w.connection -= length
        w.streams[sid] = w.stream(sid) - length

    def _starved(self, sid: int) -> bool:
        w = self._windows
        return min(w.connection, w.stream(sid)) < self._largest

    def _hold(self, sid: int, whole: bytes) -> None:
        if self._size + len(whole) > self._limit:
            raise BufferLimitExceeded(f"response larger than the buffer limit of {self._limit} bytes")
        self._all_held.take(len(whole))
        self._size += len(whole)
        self._held.setdefault(sid, []).append(whole)

    def _release(self, sid: int) -> list[bytes]:
        held = self._held.pop(sid, [])
        self._given(sum(map(len, held)))
        return [b"".join(held)] if held else []

    def _release_all(self) -> list[bytes]:
        return [piece for sid in list(self._held) for piece in self._release(sid)]

    def _drop(self, sid: int) -> None:
        self._given(sum(map(len, self._held.pop(sid, []))))
        self._windows.streams.pop(sid, None)

    def _given(self, size: int) -> None:
        self._size -= size
        self._all_held.give(size)
