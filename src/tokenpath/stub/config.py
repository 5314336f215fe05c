"""Stub settings, validated once at start so a bad flag fails before the first request."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tokenpath.errors import BadRequest, UsageError
from tokenpath.serve.priority import Priority
from tokenpath.wire.apis import Api, parse_api

Format = Literal["openai", "plain"]
HeadAt = Literal["start", "first-token"]  # when the response head leaves: at once, or with the first token
HEAD_AT = ("start", "first-token")

# Named limits (h11/uvicorn style): large enough for any real chat request, small enough that a broken or
# hostile client cannot make the stub hold unbounded memory.
MAX_BODY_BYTES = 1 << 20  # 1 MiB of JSON is ~250k prompt tokens: far beyond what a pacing test sends
AUDIT_MAX_STREAMS = 50_000  # per worker; the oldest logs are dropped first (~4 KB each at 128 tokens)
# ... and at most this many bytes of them (stub/audit.py log_bytes: ~26 B a write): 50,000 logs of 128 tokens fit,
# ~100 logs of 100,000 tokens do; without it one client asking for long streams could hold ~2.6 MB x 50,000.
AUDIT_MAX_BYTES = 256 << 20

# Per-request limits on what a 200-byte body can make the stub allocate and hold (frames are rendered, and cached
# per request shape, before the first write): every real model response fits well inside them.
MAX_TOKENS = 100_000  # longer than any model's output limit today
MAX_FRAME_BYTES = 64 << 10  # a padded frame; real token frames are 100-400 bytes
MAX_STREAM_BYTES = 32 << 20  # frames x size of one response
LEAD_FRAMES = 16  # a response's frames besides its tokens and reasoning deltas: at most this many in any format
MAX_MODEL_CHARS = 256  # model names are short identifiers; echoed in every frame
MAX_STREAM_SECONDS = 3600.0  # ttft + tokens x interval: a stream that would run longer is a mistake
MAX_RESPONSE_HEADERS = 16  # declared extra response headers per request
MAX_STREAM_ID_CHARS = 128
MAX_FIRST_EVENT_BYTES = 1 << 20  # a large first event: past every proxy buffer (4-64 KB), far below MAX_STREAM_BYTES
MAX_WORKERS = 1024  # processes sharing the port, as the gateway bounds its own
MAX_HEARTBEATS = 100_000  # keep-alive writes per stream (one per heartbeat_ms): as many as the token limit allows
# Hop-by-hop and framing headers belong to the server that writes the response, never to a declared condition.
RESERVED_HEADERS = frozenset(
    {
        "connection",
        "content-length",
        "transfer-encoding",
        "keep-alive",
        "upgrade",
        "trailer",
        "te",
        "proxy-connection",
        "content-type",
        "x-tokenpath-stream",
    }
)
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def valid_stream_id(value: str) -> bool:
    """A stream id is echoed in a response header: visible ASCII only, so it can neither break the head nor fail
    to encode."""
    return 0 < len(value) <= MAX_STREAM_ID_CHARS and all("!" <= c <= "~" for c in value)


def response_headers(table: object) -> dict[str, str]:
    """Extra response headers declared for a request or a condition: {name: value}, checked so they can neither
    inject lines into the head nor redefine its framing."""
    if not isinstance(table, dict):
        raise UsageError("headers must be an object of NAME: VALUE")
    if len(table) > MAX_RESPONSE_HEADERS:
        raise UsageError(f"at most {MAX_RESPONSE_HEADERS} headers")
    out: dict[str, str] = {}
    for name, value in table.items():
        if not isinstance(name, str) or not name or not set(name) <= _TOKEN_CHARS:
            raise UsageError(f"header name {name!r} is not an HTTP token")
        if name.lower() in RESERVED_HEADERS:
            raise UsageError(f"header {name} is set by the server itself")
        if not isinstance(value, str) or len(value) > 1024 or not all(" " <= c <= "~" or c == "\t" for c in value):
            raise UsageError(f"header {name}: value must be printable ASCII, at most 1024 characters")
        out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class Jitter:
    """Random offset added to each scheduled write, in ms. The audit checks writes against the jittered time."""

    kind: Literal["uniform", "normal", "exp"]
    ms: float

    @classmethod
    def parse(cls, text: str) -> Jitter:
        kind, _, value = text.partition(":")
        if kind not in ("uniform", "normal", "exp") or not value:
            raise UsageError(f"`jitter` {text!r}: expected uniform:MS, normal:MS or exp:MS")
        try:
            ms = float(value)
        except ValueError:
            raise UsageError(f"`jitter` {text!r}: {value!r} is not a number of ms") from None
        if not (math.isfinite(ms) and ms >= 0):
            raise UsageError(f"`jitter` {text!r}: the width must be a finite number of ms >= 0")
        return cls(kind, ms)  # type: ignore[arg-type]

    def sample_ms(self, rng: random.Random) -> float:
        if self.kind == "uniform":
            return rng.uniform(-self.ms, self.ms)
        if self.kind == "normal":
            return rng.gauss(0.0, self.ms)
        return rng.expovariate(1.0 / self.ms) if self.ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Pacing:
    """How one response is paced. The stub's flags set the default; a request may override any of it with a
    `"tokenpath": {...}` member in its JSON body, so that one stub serves every condition of an experiment
    (proxies forward bodies untouched, and some drop unknown headers). Serialised here only: `to_json` is that
    member (and the stub's health answer), `override` reads it, `to_argv` is the `tokenpath stub` flags.

    What real servers send before and around the first token (issue 24 §4), each off by default:
    `heartbeat_ms` a keep-alive every N ms from the start until the last frame, in the format's shape (an SSE
    `: ping` comment, Anthropic's `event: ping`; Bedrock and Ollama have none); `reasoning_tokens` N
    reasoning deltas, paced like tokens, before the content; `first_event_bytes` the first content frame padded to
    N bytes; `head_at` "first-token": the head is held and leaves in one write with the first token. And a silence
    mid-stream: `pause_ms` N ms after content token `pause_after` (1: the first), which moves every later frame as
    much (keep-alives go on through it)."""

    ttft_ms: float = 90.0
    interval_ms: float = 14.0
    tokens: int = 128
    frame_bytes: int | None = None
    format: Format = "openai"
    heartbeat_ms: float | None = None
    reasoning_tokens: int = 0
    first_event_bytes: int | None = None
    head_at: HeadAt = "start"
    pause_ms: float = 0.0
    pause_after: int = 1

    OVERRIDABLE: ClassVar[tuple[str, ...]]  # every field (set below the class)
    SCHEDULE: ClassVar[tuple[str, ...]] = ("ttft_ms", "interval_ms", "tokens")  # always said: a stream's timing
    FRAME: ClassVar[tuple[str, ...]] = ("frame_bytes", "format")  # the health says them too (load compares them)
    _NULLABLE: ClassVar[frozenset[str]] = frozenset({"frame_bytes", "heartbeat_ms", "first_event_bytes"})

    def __post_init__(self) -> None:
        if self.heartbeat_ms == 0:
            object.__setattr__(self, "heartbeat_ms", None)  # 0: no keep-alives, as the flag's default

    def to_json(self, *, with_frame: bool = False) -> dict[str, object]:
        """The request's `tokenpath` member: the schedule, and every other field only where it is not the default,
        so a plain stream's member is as it always was. `with_frame`: the frame size and format too, as the stub's
        health has always answered them (load and the matrix compare it)."""
        said = {*self.SCHEDULE, *(self.FRAME if with_frame else ())}
        return {k: v for k, v in self._items() if k in said or v != _DEFAULTS[k]}

    @classmethod
    def from_json(cls, values: object) -> Pacing:
        """A member (or a health answer) on the defaults; BadRequest names what is wrong."""
        return _DEFAULT.override(values)

    def to_argv(self) -> list[str]:
        """The `tokenpath stub` flags for this pacing: one per field not at the stub's default."""
        argv: list[str] = []
        for key, value in self._items():
            if value != _DEFAULTS[key]:
                argv += [f"--{key.replace('_', '-')}", _flag_value(value)]
        return argv

    def _items(self) -> list[tuple[str, object]]:
        return [(k, getattr(self, k)) for k in self.OVERRIDABLE]

    @property
    def before_first_token(self) -> bool:
        """Whether any option of what comes before and around the first token is set (else the plain fast path)."""
        return bool(self.heartbeat_ms or self.reasoning_tokens or self.first_event_bytes or self.head_at != "start")

    @property
    def planned(self) -> bool:
        """Whether the writes need a plan beyond the schedule (stub/plan.py): keep-alives, a held head, a pause."""
        return self.before_first_token or bool(self.pause_ms)

    def override(self, values: object) -> Pacing:
        """A request's own pacing (its body's "tokenpath" object): a bad one is that request's BadRequest."""
        if not isinstance(values, dict):
            raise BadRequest("'tokenpath' must be an object")
        unknown = set(values) - set(self.OVERRIDABLE)
        if unknown:
            raise BadRequest(f"'tokenpath' has unknown keys {sorted(unknown)}; allowed: {', '.join(self.OVERRIDABLE)}")
        fields = dict(self._items())
        for key, value in values.items():
            if key == "format":
                if value not in ("openai", "plain"):
                    raise BadRequest("'tokenpath.format' must be openai or plain")
            elif key == "head_at":
                if value not in HEAD_AT:
                    raise BadRequest("'tokenpath.head_at' must be start or first-token")
            elif key in self._NULLABLE and value is None:
                pass
            elif not isinstance(value, int | float) or isinstance(value, bool) or not _finite(value) or value < 0:
                raise BadRequest(f"'tokenpath.{key}' must be a finite number >= 0")
            fields[key] = value
        if not isinstance(fields["tokens"], int) or not 1 <= fields["tokens"] <= MAX_TOKENS:
            raise BadRequest(f"'tokenpath.tokens' must be a whole number from 1 to {MAX_TOKENS}")
        if fields["frame_bytes"] is not None and (
            not isinstance(fields["frame_bytes"], int) or not 1 <= fields["frame_bytes"] <= MAX_FRAME_BYTES
        ):
            raise BadRequest(f"'tokenpath.frame_bytes' must be a whole number from 1 to {MAX_FRAME_BYTES}")
        try:
            pacing = Pacing(**fields)  # type: ignore[arg-type]
            pacing.check(lambda k: f"'tokenpath.{k}'")
            pacing.check_bounds("'tokenpath': ")
        except UsageError as exc:  # the rules the stub's own flags are held to too
            raise BadRequest(str(exc)) from None
        return pacing

    def check(self, field_name: Callable[[str], str] = lambda k: f"`{k}`") -> None:
        """The options' ranges (UsageError naming each as the caller spells it: a flag or a body member)."""
        if not isinstance(self.reasoning_tokens, int) or not 0 <= self.reasoning_tokens <= MAX_TOKENS:
            raise UsageError(f"{field_name('reasoning_tokens')} must be a whole number from 0 to {MAX_TOKENS}")
        if self.first_event_bytes is not None and (
            not isinstance(self.first_event_bytes, int) or not 1 <= self.first_event_bytes <= MAX_FIRST_EVENT_BYTES
        ):
            raise UsageError(
                f"{field_name('first_event_bytes')} must be a whole number from 1 to {MAX_FIRST_EVENT_BYTES}"
            )
        if self.head_at not in HEAD_AT:
            raise UsageError(f"{field_name('head_at')} {self.head_at!r}: expected start or first-token")
        if not (math.isfinite(self.pause_ms) and self.pause_ms >= 0):
            raise UsageError(f"{field_name('pause_ms')} must be a number of ms >= 0 (0: no pause)")
        if not isinstance(self.pause_after, int) or not 1 <= self.pause_after <= MAX_TOKENS:
            raise UsageError(f"{field_name('pause_after')} must be a whole number from 1 to {MAX_TOKENS}")
        if self.heartbeat_ms is None:
            return
        if not (math.isfinite(self.heartbeat_ms) and 0 < self.heartbeat_ms <= MAX_STREAM_SECONDS * 1000):
            # 1e300 was taken: a keep-alive that never falls due in a stream of at most an hour
            raise UsageError(
                f"{field_name('heartbeat_ms')} must be a number of ms > 0 and <= {MAX_STREAM_SECONDS * 1000:g}"
            )
        if self.stream_ms / self.heartbeat_ms > MAX_HEARTBEATS:
            raise UsageError(
                f"{field_name('heartbeat_ms')} {self.heartbeat_ms:g}: a keep-alive every {self.heartbeat_ms:g} ms "
                f"for {self.stream_ms / 1000:.1f} s is more than {MAX_HEARTBEATS} writes; use a longer interval"
            )

    @property
    def stream_ms(self) -> float:
        """When the last token is due: reasoning deltas are paced like tokens, and a pause moves every later one."""
        return self.ttft_ms + (self.tokens + self.reasoning_tokens) * self.interval_ms + self.pause_ms

    def check_bounds(self, prefix: str) -> None:
        """What one response may cost: its duration and its bytes (frames are rendered before the first write)."""
        self.check_duration(prefix)
        frames = self.tokens + self.reasoning_tokens  # a reasoning delta is padded to frame_bytes too
        if self.frame_bytes is not None and frames * self.frame_bytes > MAX_STREAM_BYTES:
            raise UsageError(
                f"{prefix}(tokens + reasoning_tokens) x frame_bytes is {frames * self.frame_bytes} bytes; "
                f"at most {MAX_STREAM_BYTES}"
            )

    def check_duration(self, prefix: str) -> None:
        """A stream longer than MAX_STREAM_SECONDS is a mistake (`--interval-ms 1e12`: a stub that stalled)."""
        seconds = self.stream_ms / 1000
        if seconds > MAX_STREAM_SECONDS:
            raise UsageError(
                f"{prefix}the stream would run {seconds:.0f} s (ttft_ms + (tokens + reasoning_tokens) x interval_ms "
                f"+ pause_ms); at most {MAX_STREAM_SECONDS:.0f} s"
            )


Pacing.OVERRIDABLE = tuple(f.name for f in dataclasses.fields(Pacing))
_DEFAULT = Pacing()
_DEFAULTS: dict[str, object] = dict(_DEFAULT._items())


def _finite(value: float) -> bool:
    """A JSON number as a float can hold it: an integer past a float's range (10**400) is no finite number here
    (math.isfinite raised OverflowError on it, and the request got a 500)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _flag_value(value: object) -> str:
    """A value as a flag takes it: 50.0 as 50 (the stub reads it back as the same float)."""
    if isinstance(value, float) and float(f"{value:g}") == value:
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True, slots=True)
class StubConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    ttft_ms: float = 90.0
    interval_ms: float = 14.0
    tokens: int = 128
    frame_bytes: int | None = None
    jitter: Jitter | None = None
    headers: tuple[tuple[str, str], ...] = ()
    format: Format = "openai"
    heartbeat_ms: float | None = None
    reasoning_tokens: int = 0
    first_event_bytes: int | None = None
    head_at: HeadAt = "start"
    pause_ms: float = 0.0
    pause_after: int = 1
    model: str = "tokenpath-stub"
    workers: int = 1
    seed: int | None = None
    priority: Priority = "auto"
    max_body_bytes: int = MAX_BODY_BYTES
    api: str = "all"  # one wire.apis.Api value, or "all": every format's route at once
    # What a real origin does besides pacing (stub/presets.py): its answer to an HTTP/1.0 request (close-delimited,
    # or chunked as llama.cpp's server); and recorded shapes (stub/replay.py) it replays: `replays` to every streaming
    # request on their API's route, `recordings` only to a request whose `tokenpath` member names one (`replay`).
    http10_framing: str = "close"
    replays: tuple[str, ...] = ()
    recordings: tuple[str, ...] = ()
    audit_dir: str | None = field(default=None, compare=False)  # shared by workers; set by the server
    # Test-only: every time the stub reports (its clock endpoint, its audit's write times) is this far ahead, as if
    # it ran on another host's clock: the clock estimate must recover it (tests/load/test_clocksync.py).
    clock_offset_ms: float = 0.0

    def __post_init__(self) -> None:
        # The rules a request's own pacing is held to (Pacing.override): a NaN or infinite delay, or a stream longer
        # or larger than one response may be, started the stub and then hung or failed every request.
        for key in ("ttft_ms", "interval_ms"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise UsageError(f"`{key}` must be a finite number of ms >= 0")
        if not 1 <= self.tokens <= MAX_TOKENS:
            raise UsageError(f"`tokens` must be a whole number from 1 to {MAX_TOKENS}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"`workers` must be from 1 to {MAX_WORKERS}: more processes than a host's cores contend")
        if not self.host:  # an unset variable (--host "$HOST") would have bound every interface
            raise UsageError("`host` is empty: give an address (127.0.0.1 by default; 0.0.0.0 for every interface)")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"`port` {self.port} is not a TCP port")
        if self.format not in ("openai", "plain"):
            raise UsageError(f"`format` {self.format!r}: expected openai or plain")
        if self.priority not in ("auto", "realtime", "normal"):
            raise UsageError(f"`priority` {self.priority!r}: expected auto, realtime or normal")
        if self.frame_bytes is not None and not 1 <= self.frame_bytes <= MAX_FRAME_BYTES:
            raise UsageError(f"`frame_bytes` must be a whole number from 1 to {MAX_FRAME_BYTES}")
        if self.http10_framing not in ("close", "chunked"):
            raise UsageError(f"`http10_framing` {self.http10_framing!r}: expected close or chunked")
        self.pacing.check()
        # A request's bytes are bounded too (Pacing.override); the operator's own flags may ask for a larger stream
        # (a client that stops reading, tests/gateway/test_hostile_e2e.py: 40 MB), each frame and count bounded above.
        self.pacing.check_duration("")
        if self.api != "all":
            try:
                api = parse_api(self.api)
            except ValueError as exc:
                raise UsageError(f"`api`: {exc} (or all)") from None
            if api is not Api.OPENAI and self.format != "openai":
                raise UsageError(f"`format` {self.format} is the OpenAI routes'; --api {api.value} speaks its own")

    @property
    def apis(self) -> tuple[Api, ...]:
        """The formats this stub serves, each on its own route."""
        return tuple(Api) if self.api == "all" else (parse_api(self.api),)

    @property
    def pacing(self) -> Pacing:
        """Its flags' pacing: the fields of the same names (every one of Pacing's is a field here)."""
        return Pacing(**{k: getattr(self, k) for k in Pacing.OVERRIDABLE})

    @property
    def max_response_bytes(self) -> int:
        """What one response's frames may hold: MAX_STREAM_BYTES, or more when this stub's own flags declare more
        (padded frames are not capped for the operator: `--tokens 20000 --frame-bytes 2048` is 41 MB). A request's
        own pacing is held to it too (frames.extend_steps)."""
        if self.frame_bytes is None:
            return MAX_STREAM_BYTES
        frames = self.tokens + self.reasoning_tokens + LEAD_FRAMES  # the role, the closing events, each padded too
        declared = frames * self.frame_bytes + (self.first_event_bytes or 0)
        return max(MAX_STREAM_BYTES, declared)

    @classmethod
    def paced(cls, pacing: Pacing, **settings: Any) -> StubConfig:
        """A stub whose flags are `pacing` (and `settings` besides): what a stub started with `pacing.to_argv()` is."""
        return cls(**{k: getattr(pacing, k) for k in Pacing.OVERRIDABLE}, **settings)
