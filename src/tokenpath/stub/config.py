"""Stub settings, validated once at start so a bad flag fails before the first request."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from tokenpath.errors import UsageError

Format = Literal["openai", "plain"]
Priority = Literal["auto", "realtime", "normal"]
REALTIME_PRIORITY = 10  # SCHED_FIFO level: above every normal task, far below the kernel's own RT threads

# Named limits (h11/uvicorn style): large enough for any real chat request, small enough that a broken or
# hostile client cannot make the stub hold unbounded memory.
MAX_BODY_BYTES = 1 << 20  # 1 MiB of JSON is ~250k prompt tokens: far beyond what a pacing test sends
MAX_HEAD_BYTES = 16 << 10  # request line + headers; nginx's large_client_header_buffers default is 4 x 8k
REQUEST_TIMEOUT_S = 30.0  # an idle connection, or one that has not sent a whole request by then, is closed
AUDIT_MAX_STREAMS = 50_000  # per worker; the oldest logs are dropped first (~3 KB each at 128 tokens)


@dataclass(frozen=True, slots=True)
class Jitter:
    """Random offset added to each scheduled write, in ms. The audit checks writes against the jittered time."""

    kind: Literal["uniform", "normal", "exp"]
    ms: float

    @classmethod
    def parse(cls, text: str) -> Jitter:
        kind, _, value = text.partition(":")
        if kind not in ("uniform", "normal", "exp") or not value:
            raise UsageError(f"--jitter {text!r}: expected uniform:MS, normal:MS or exp:MS")
        try:
            ms = float(value)
        except ValueError:
            raise UsageError(f"--jitter {text!r}: {value!r} is not a number of ms") from None
        if ms < 0:
            raise UsageError(f"--jitter {text!r}: the width must be >= 0")
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
    (proxies forward bodies untouched, and some drop unknown headers)."""

    ttft_ms: float
    interval_ms: float
    tokens: int
    frame_bytes: int | None
    format: Format

    OVERRIDABLE = ("ttft_ms", "interval_ms", "tokens", "frame_bytes", "format")

    def override(self, values: object) -> Pacing:
        if not isinstance(values, dict):
            raise UsageError("'tokenpath' must be an object")
        unknown = set(values) - set(self.OVERRIDABLE)
        if unknown:
            raise UsageError(f"'tokenpath' has unknown keys {sorted(unknown)}; allowed: {', '.join(self.OVERRIDABLE)}")
        fields = {k: getattr(self, k) for k in self.OVERRIDABLE}
        for key, value in values.items():
            if key == "format":
                if value not in ("openai", "plain"):
                    raise UsageError("'tokenpath.format' must be openai or plain")
            elif key == "frame_bytes" and value is None:
                pass
            elif not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise UsageError(f"'tokenpath.{key}' must be a number >= 0")
            fields[key] = value
        if not isinstance(fields["tokens"], int) or fields["tokens"] < 1:
            raise UsageError("'tokenpath.tokens' must be a whole number >= 1")
        if fields["frame_bytes"] is not None and (
            not isinstance(fields["frame_bytes"], int) or fields["frame_bytes"] < 1
        ):
            raise UsageError("'tokenpath.frame_bytes' must be a whole number >= 1")
        return Pacing(**fields)


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
    model: str = "tokenpath-stub"
    workers: int = 1
    seed: int | None = None
    priority: Priority = "auto"
    max_body_bytes: int = MAX_BODY_BYTES
    audit_dir: str | None = field(default=None, compare=False)  # shared by workers; set by the server

    def __post_init__(self) -> None:
        if self.ttft_ms < 0:
            raise UsageError("--ttft-ms must be >= 0")
        if self.interval_ms < 0:
            raise UsageError("--interval-ms must be >= 0")
        if self.tokens < 1:
            raise UsageError("--tokens must be >= 1")
        if self.workers < 1:
            raise UsageError("--workers must be >= 1")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port {self.port} is not a TCP port")
        if self.format not in ("openai", "plain"):
            raise UsageError(f"--format {self.format!r}: expected openai or plain")
        if self.priority not in ("auto", "realtime", "normal"):
            raise UsageError(f"--priority {self.priority!r}: expected auto, realtime or normal")
        if self.frame_bytes is not None and self.frame_bytes < 1:
            raise UsageError("--frame-bytes must be >= 1")

    @property
    def pacing(self) -> Pacing:
        return Pacing(self.ttft_ms, self.interval_ms, self.tokens, self.frame_bytes, self.format)
