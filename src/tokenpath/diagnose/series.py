"""Which streams a diagnosis runs. Pure: Run values, nothing sent.

Against a tokenpath stub (behind the path, or the path itself) each run sets the stub's whole pacing in its body's
`tokenpath` member (stub/config.py Pacing.OVERRIDABLE; proxies forward bodies untouched), and the series starts
with the runs that separate the causes:

- base:    small frames, short interval: what any hold shows on
- slow:    small frames, long interval: a timer keeps its hold time, a byte threshold keeps its burst bytes
- large:   large frames, short interval: a threshold below one frame lets each through; a buffer of a few KB
           shows its size
- browser: base with a compressing client's Accept-Encoding: compression without a flush

A series grows until it can tell (classify.py names the runs it needs next, measure.py runs them): a path that held
every stream to its end gets a stream of MAX_STREAM_BYTES, one whose rule two rates cannot yet tell apart a third
rate, a compressed answer held to its end a longer and then a larger one. The bound is stated: no stream is longer
than MAX_STREAM_BYTES or MAX_STREAM_MS, so a path that holds more than that is said to hold "at least" it.

Against any other endpoint only the client's side varies: identity (no Accept-Encoding) and the compressing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tokenpath.stub.config import Pacing
from tokenpath.stub.formats import FORMATS
from tokenpath.stub.frames import StreamRequest
from tokenpath.wire.acceptencoding import BROWSER_ACCEPT_ENCODING
from tokenpath.wire.apis import Api

# The first runs are short (a diagnosis of a path that streams takes a few seconds): 12 frames show bursts of up
# to ~5 twice over and a whole-response hold as one read.
FRAMES = 12
# The first frame comes this long after the request while the head goes at once: a path that holds the head until
# the first frame shows a TTFB near it.
TTFT_MS = 150.0
SMALL_BYTES = 60  # a token frame's size (stub `format` plain pads each frame to exactly this)
LARGE_BYTES = 1200  # under one 1,448-byte segment, above common byte thresholds; 12 of them pass a 4 KB buffer
LARGER_BYTES = 2400  # twice the rate of `large`: a third rate, when two leave a timer and a threshold both possible
SHORT_MS = 50.0  # the interval of seed 003's condition
LONG_MS = 120.0  # long enough that a ~200 ms timer holds 2 frames, not 4-5: the bytes per burst change, the hold not
FAST_MS = 20.0  # small frames, quickly: past a small first-bytes or size rule in a couple of seconds
# The bound a series grows to: what "holds the whole response" is measured against.
MAX_STREAM_BYTES = 64 * 1024
MAX_STREAM_MS = 3000.0
DEFAULT_MODEL = "tokenpath-stub"  # the model a run's bytes are reckoned with when none is said (diagnose's default)

# The runs, by name. Identity runs send no Accept-Encoding (as curl); the compressed ones the compressing client's.
BASE, SLOW, LARGE, LONG, LARGER, BASE_LONG = "base", "slow", "large", "long", "larger", "base_long"
BROWSER, BROWSER_LONG, BROWSER_LARGE = "browser", "browser_long", "browser_large"
IDENTITY = (BASE, SLOW, LARGE, LONG, LARGER, BASE_LONG)
COMPRESSED = (BROWSER, BROWSER_LONG, BROWSER_LARGE)


@dataclass(frozen=True, slots=True)
class Schedule:
    interval_ms: float
    frame_bytes: int
    frames: int


def _within_bounds(interval_ms: float, frame_bytes: int) -> Schedule:
    """As many frames as the bounds allow at this schedule: by time, and by bytes as OpenAI's plain frames are the
    whole stream. Another format adds its own events (a lead, closing events that repeat the text) and keeps its own
    small frames: Run.stub_pacing asks for fewer frames where its stream would pass the bound (stream_bytes)."""
    by_bytes = MAX_STREAM_BYTES // frame_bytes
    by_time = int(MAX_STREAM_MS // interval_ms) + 1
    return Schedule(interval_ms, frame_bytes, min(by_bytes, by_time))


SCHEDULES: dict[str, Schedule] = {
    BASE: Schedule(SHORT_MS, SMALL_BYTES, FRAMES),
    SLOW: Schedule(LONG_MS, SMALL_BYTES, FRAMES),
    LARGE: Schedule(SHORT_MS, LARGE_BYTES, FRAMES),
    LONG: _within_bounds(SHORT_MS, LARGE_BYTES),
    LARGER: _within_bounds(SHORT_MS, LARGER_BYTES),
    BASE_LONG: _within_bounds(FAST_MS, SMALL_BYTES),
    BROWSER: Schedule(SHORT_MS, SMALL_BYTES, FRAMES),
    BROWSER_LONG: _within_bounds(FAST_MS, SMALL_BYTES),
    BROWSER_LARGE: _within_bounds(SHORT_MS, LARGE_BYTES),
}


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

    def stub_pacing(self, api: Api = Api.OPENAI, model: str = DEFAULT_MODEL) -> dict[str, Any] | None:
        """The body's `tokenpath` member: this run's schedule, and everything else a stub may have been started with
        (keep-alives, reasoning, a large first event, a held head, a pause) off, so the series is the same whatever
        the stub's own flags. OpenAI's frames are bare and padded to the size (format plain); another format keeps
        its own token frames when they are small (a 60-byte frame cannot hold one) and pads the large ones. Its
        frames are as many as the stream, in `api`'s format (its own events counted, `model` named in them), holds
        within MAX_STREAM_BYTES, at most the run's."""
        if not self.controlled:
            return None
        frame_bytes = self.frame_bytes
        if api is not Api.OPENAI and frame_bytes is not None and frame_bytes < LARGE_BYTES:
            frame_bytes = None
        member = self._member(api, frame_bytes, self.frames)
        if self.frames is not None and stream_bytes(api, _items(member), model) > MAX_STREAM_BYTES:
            fits, over = 0, self.frames  # the most frames within the bound: fits does, over does not
            while over - fits > 1:
                mid = (fits + over) // 2
                if stream_bytes(api, _items(self._member(api, frame_bytes, mid)), model) <= MAX_STREAM_BYTES:
                    fits = mid
                else:
                    over = mid
            member = self._member(api, frame_bytes, fits)
        return member

    def _member(self, api: Api, frame_bytes: int | None, frames: int | None) -> dict[str, Any]:
        return {
            **({"format": "plain"} if api is Api.OPENAI else {}),
            "frame_bytes": frame_bytes,
            "interval_ms": self.interval_ms,
            "ttft_ms": self.ttft_ms,
            "tokens": frames,
            "heartbeat_ms": None,
            "reasoning_tokens": 0,
            "first_event_bytes": None,
            "head_at": "start",
            "pause_ms": 0,
        }


def _items(member: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(member.items()))


@lru_cache(maxsize=256)
def stream_bytes(api: Api, member: tuple[tuple[str, Any], ...], model: str = DEFAULT_MODEL) -> int:
    """The frame bytes of the stream a stub writes for this `tokenpath` member (its items) in `api`'s format: every
    frame, as the stub renders it (stub/formats), its lead and closing events with the token frames."""
    pacing = Pacing().override(dict(member))
    kind = "chat" if api is Api.OPENAI else api.value
    request = StreamRequest(
        kind, model, "x" * 16, pacing.tokens, ttft_ms=pacing.ttft_ms, interval_ms=pacing.interval_ms
    )
    return sum(FORMATS[api].shape(request, pacing).sizes)


def paced(name: str, accept_encoding: str = BROWSER_ACCEPT_ENCODING) -> Run:
    """The run `name` of the paced series (SCHEDULES); a compressed run sends `accept_encoding`."""
    s = SCHEDULES[name]
    return Run(name, accept_encoding if name in COMPRESSED else None, s.interval_ms, s.frame_bytes, TTFT_MS, s.frames)


def plan(controlled: bool, encodings: bool = True, accept_encoding: str = BROWSER_ACCEPT_ENCODING) -> tuple[Run, ...]:
    """The series' first runs: paced when a stub is behind the path, the client's side only otherwise. `encodings`
    False leaves out the compressed run (a client that sends its own Accept-Encoding: a browser)."""
    if controlled:
        runs = [paced(BASE), paced(SLOW), paced(LARGE)]
        compressed = paced(BROWSER, accept_encoding)
    else:
        runs = [Run(BASE)]
        compressed = Run(BROWSER, accept_encoding)
    return tuple([*runs, compressed] if encodings else runs)
