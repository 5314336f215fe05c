"""A real server's response shape, recorded (`tokenpath record`, origins/record.py) and replayed by the stub
(`tokenpath stub --replay FILE`): its head's headers, how it frames a stream for HTTP/1.0, each event's bytes (the
model's text redacted to filler of the same size) and kind, grouped as the server wrote them, and when each write
left. Replayed, a real server's behaviour is a deterministic matrix condition with the stub's audit log.

The file (JSON, `version` 1):

    {"version": 1, "name": "llama-server.chat", "api": "openai", "source": {...},
     "http10_framing": "chunked", "content_type": "text/event-stream",
     "headers": [["X-Accel-Buffering", "no"]], "head_ms": 4.8,
     "writes": [{"at_ms": 437.5, "events": [{"kind": "control", "data": "data: {...}\\n\\n"}, ...]}, ...]}

`at_ms` is after the request's last byte, as the recorder saw it on loopback (a write per read: the origin's socket
as near as a client can see it). Replayed, write k leaves at its `at_ms` on the stub's pacer (fixed deadlines), its
events in one socket write (one chunk when chunked), each event logged as its own frame so the audit's join (frame
k = write k) holds; the audit's tolerance is the stub's rule on the recording's median gap.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenpath.clock import NS_PER_MS
from tokenpath.errors import PeerError, UsageError
from tokenpath.stats import median
from tokenpath.stub.config import MAX_RESPONSE_HEADERS, MAX_STREAM_BYTES, MAX_STREAM_SECONDS, response_headers
from tokenpath.stub.presets import OriginBehaviour, parse_http10_framing, relevant_headers
from tokenpath.userfiles import read_text
from tokenpath.wire.apis import SPECS, Api, Framing, parse_api
from tokenpath.wire.eventstream import MIN_MESSAGE_BYTES, PRELUDE_BYTES
from tokenpath.wire.framing import LAST_CHUNK, chunk
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import frame_reader

RECORDING_VERSION = 1
MAX_RECORDING_BYTES = 4 << 20  # a file; one recorded answer of a few hundred events is tens of KB
MAX_EVENTS = 100_000  # the stub's own token limit
SENT_HEADERS = 16  # the origin's headers a replay sends (the stub's per-request limit)


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    kind: FrameKind
    data: bytes  # the event exactly as it went on the wire (its text redacted), framing excluded

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "data": self.data.decode("utf-8", "surrogateescape")}


@dataclass(frozen=True, slots=True)
class RecordedWrite:
    at_ms: float  # after the request's last byte
    events: tuple[RecordedEvent, ...]

    def to_json(self) -> dict[str, object]:
        return {"at_ms": round(self.at_ms, 3), "events": [e.to_json() for e in self.events]}


@dataclass(frozen=True, slots=True)
class Recording:
    name: str
    api: Api
    http10_framing: str  # close or chunked (a recorder that saw a Content-Length records close)
    content_type: str
    headers: tuple[tuple[str, str], ...]  # the origin's own, those a stub may send (framing and hop-by-hop dropped)
    head_ms: float
    writes: tuple[RecordedWrite, ...]
    source: dict[str, Any]  # where and how it was recorded: recorded, never computed on

    @property
    def events(self) -> list[RecordedEvent]:
        return [e for w in self.writes for e in w.events]

    @property
    def first_content(self) -> int | None:
        """The index of the first content event (what TTFT is joined at)."""
        return next((i for i, e in enumerate(self.events) if e.kind is FrameKind.CONTENT), None)

    @property
    def interval_ms(self) -> float:
        """The median gap between consecutive writes after the first content: what the audit's tolerance rule
        (max(2 ms, 20 %)) takes as the interval."""
        first = self.first_content
        if first is None:
            return 0.0
        sizes = [len(w.events) for w in self.writes]
        start = next(k for k, n in enumerate(_cumulative(sizes)) if n > first)
        times = [w.at_ms for w in self.writes[start:]]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return median(gaps) if gaps else 0.0

    @property
    def behaviour(self) -> OriginBehaviour:
        framing = parse_http10_framing(self.http10_framing)
        return OriginBehaviour(framing, relevant_headers(list(self.headers)))

    def describe(self) -> str:
        n = len(self.events)
        return f"{self.name} ({self.api.value}, {len(self.writes)} writes, {n} events; {self.behaviour.describe()})"

    def to_json(self) -> dict[str, object]:
        return {
            "version": RECORDING_VERSION,
            "name": self.name,
            "api": self.api.value,
            "source": self.source,
            "http10_framing": self.http10_framing,
            "content_type": self.content_type,
            "headers": [list(h) for h in self.headers],
            "head_ms": round(self.head_ms, 3),
            "writes": [w.to_json() for w in self.writes],
        }

    def dumps(self) -> str:
        """One write per line: small, and a diff of two recordings reads write by write."""
        doc = self.to_json()
        writes, headers = doc.pop("writes"), doc.pop("headers")
        assert isinstance(writes, list)
        head = json.dumps(doc, indent=1)[:-2]
        lines = ",\n  ".join(json.dumps(w, separators=(", ", ": ")) for w in writes)
        return f'{head},\n "headers": {json.dumps(headers)},\n "writes": [\n  {lines}\n ]\n}}\n'

    @classmethod
    def from_json(cls, doc: object, where: str = "recording") -> Recording:
        """A recording checked as the stub will send it: a bad file is one UsageError naming what is wrong."""
        if not isinstance(doc, dict):
            raise UsageError(f"{where}: not a recording (a JSON object from `tokenpath record`)")
        version = doc.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version != RECORDING_VERSION:
            raise UsageError(f"{where}: version {version!r}; this tokenpath reads {RECORDING_VERSION}")
        try:
            api = parse_api(str(doc["api"]))
            framing = parse_http10_framing(doc["http10_framing"])
            headers = _headers(doc.get("headers", []))
            writes = _writes(doc["writes"])
            name, content_type = _line(doc, "name"), _line(doc, "content_type")
            head_ms = _ms(doc.get("head_ms", 0.0), "head_ms")
            source = doc.get("source", {})
            if not isinstance(source, dict):
                raise ValueError(f"source must be an object (where it was recorded), not {source!r:.40}")
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: malformed recording ({type(exc).__name__}: {exc})") from None
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        recording = cls(name, api, framing, content_type, headers, head_ms, writes, dict(source))
        recording.check(where)
        return recording

    def check(self, where: str) -> None:
        """What the stub holds for one answer, bounded as its own answers are (stub/config.py), and sent as a server
        of its format would: the head before the first event, a Content-Type (the format's, or one no format
        claims: a real server's own), each event one whole frame of the format. A hand edit that breaks any of them
        is refused here rather than replayed as a stream no server sends."""
        events = self.events
        if not events:
            raise UsageError(f"{where}: no events")
        if len(events) > MAX_EVENTS or sum(len(e.data) for e in events) > MAX_STREAM_BYTES:
            raise UsageError(f"{where}: more than {MAX_EVENTS} events or {MAX_STREAM_BYTES} bytes")
        times = [w.at_ms for w in self.writes]
        if any(t < 0 for t in times) or times != sorted(times) or times[-1] > MAX_STREAM_SECONDS * 1000:
            raise UsageError(f"{where}: write times must be >= 0, in order, within {MAX_STREAM_SECONDS:.0f} s")
        if any(not w.events for w in self.writes):
            raise UsageError(f"{where}: a write without events")
        if self.first_content is None:  # TTFT is joined at the first content event: without one, nothing to measure
            raise UsageError(f"{where}: no event of kind {FrameKind.CONTENT.value!r} (no first token to measure)")
        for key, value in (("name", self.name), ("content_type", self.content_type)):
            if not value.isprintable() or len(value) > 200:  # a header line and a label: no CR/LF, no controls
                raise UsageError(f"{where}: {key} must be one printable line of at most 200 characters")
        if self.head_ms < 0 or self.head_ms > MAX_STREAM_SECONDS * 1000:
            raise UsageError(f"{where}: head_ms must be >= 0 and within {MAX_STREAM_SECONDS:.0f} s")
        if self.head_ms > times[0]:  # the head's first byte comes with or before the first event's
            raise UsageError(f"{where}: head_ms {self.head_ms:g} is later than the first write's at_ms {times[0]:g}")
        spec = SPECS[self.api]
        if spec.websocket_only:
            raise UsageError(f"{where}: api {self.api.value} is WebSocket only: it has no HTTP stream to replay")
        media = self.content_type.split(";")[0].strip().lower()
        if not media:
            raise UsageError(f"{where}: content_type is empty (the Content-Type the replay sends)")
        if media != spec.content_type and media in {s.content_type for s in SPECS.values()}:
            raise UsageError(
                f"{where}: content_type {self.content_type!r} is another format's; the {self.api.value} API "
                f"answers {spec.content_type}"
            )
        if (bad := _unframed(self.api, self.writes)) is not None:
            raise UsageError(f"{where}: {bad} is not one {spec.framing.value} frame of the {self.api.value} API")


def load(path: str | Path) -> Recording:
    path = Path(path)
    text = read_text(path, MAX_RECORDING_BYTES, "recording")  # a regular file (not /dev/zero, not a FIFO), bounded
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"recording {path}: not JSON ({exc})") from None
    except RecursionError:  # arrays nested thousands deep fit under the size cap; a recording nests 4 levels
        raise UsageError(f"recording {path}: not a recording (JSON nested too deeply)") from None
    return Recording.from_json(doc, f"recording {path}")


@functools.lru_cache(maxsize=64)
def load_cached(path: str) -> Recording:
    """A recording read once per process (an experiment names its file in every condition's label and request)."""
    return load(path)


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """One replayed answer as the stub's PacedStream writes it: per event its wire bytes (a write's events joined
    into its first event's element, the rest empty, so each write is one socket write), its size and its offset."""

    wire: list[bytes]
    sizes: list[int]
    offsets: list[int]
    first_content: int | None


def plan(recording: Recording, chunked: bool) -> ReplayPlan:
    """The recording's writes as the stub sends them: chunk-framed when chunked (one chunk per write, the last
    ending the body in the same write, as the stub ends every answer)."""
    wire: list[bytes] = []
    sizes: list[int] = []
    offsets: list[int] = []
    last = len(recording.writes) - 1
    for k, write in enumerate(recording.writes):
        body = b"".join(e.data for e in write.events)
        framed = (chunk(body) + (LAST_CHUNK if k == last else b"")) if chunked else body
        at_ns = round(write.at_ms * NS_PER_MS)
        for i, event in enumerate(write.events):
            wire.append(framed if i == 0 else b"")
            sizes.append(len(event.data))
            offsets.append(at_ns)
    return ReplayPlan(wire, sizes, offsets, recording.first_content)


def _unframed(api: Api, writes: tuple[RecordedWrite, ...]) -> str | None:
    """The first event (`writes[k].events[i]`) whose bytes are not one whole frame of `api`'s format, read in order
    as a client reads the replay; None when each is. An event-stream message's prelude is checked (its length and
    CRC), not its message CRC: a redacted payload is the same size, not the same bytes."""
    framing = SPECS[api].framing
    reader = frame_reader(api)
    for k, write in enumerate(writes):
        for i, event in enumerate(write.events):
            data = event.data
            if framing is Framing.EVENTSTREAM:
                whole = len(data) >= MIN_MESSAGE_BYTES
                total, crc = struct.unpack_from("!I4xI", data) if whole else (0, 0)
                whole = whole and total == len(data) and zlib.crc32(data[: PRELUDE_BYTES - 4]) == crc
            else:
                try:
                    whole = len(reader.feed(data)) == 1 and not reader.pending_bytes()
                except PeerError:
                    whole = False
            if not whole:
                return f"writes[{k}].events[{i}].data"
    return None


def _headers(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not all(isinstance(h, list) and len(h) == 2 for h in value):
        raise ValueError("headers must be a list of [name, value] pairs")
    for k, (name, v) in enumerate(value):
        if not isinstance(name, str) or not isinstance(v, str):  # str() would send 5 for a value nobody recorded
            raise ValueError(f"headers[{k}] must be a [name, value] pair of strings, not {[name, v]!r:.40}")
    pairs = dict(value)
    for name in pairs:
        if name.lower() == "content-encoding":  # the events are plain bytes: labelled gzip, no client could read them
            raise UsageError(f"header {name}: a recording's events are stored decoded, and replayed without one")
    if len(pairs) > min(SENT_HEADERS, MAX_RESPONSE_HEADERS):
        raise ValueError(f"at most {MAX_RESPONSE_HEADERS} headers")
    return tuple(response_headers(pairs).items())  # the stub's own rule: no framing, hop-by-hop or injected lines


def _line(doc: dict[str, Any], key: str) -> str:
    """A string member (str() would turn 5 or a list into one nobody recorded)."""
    value = doc[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r:.40}")
    return value


def _ms(value: object, key: str) -> float:
    """A time in ms: a JSON number (not true), finite as a float (an integer of 400 digits is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} {value!r:.40} is not a time")
    try:
        ms = float(value)
    except OverflowError:
        raise ValueError(f"{key} {str(value)[:20]}... is not a time") from None
    if not math.isfinite(ms):
        raise ValueError(f"{key} {ms} is not a time")
    return ms


def _writes(value: object) -> tuple[RecordedWrite, ...]:
    if not isinstance(value, list):
        raise ValueError("writes must be a list of writes")
    return tuple(_write(w, f"writes[{k}]") for k, w in enumerate(value))


def _write(value: object, where: str) -> RecordedWrite:
    if not isinstance(value, dict) or not isinstance(value.get("events"), list):
        raise ValueError(f"{where} must be an object with at_ms and a list of events")
    events = tuple(_event(e) for e in value["events"])
    return RecordedWrite(_ms(value["at_ms"], f"{where}.at_ms"), events)


def _event(value: object) -> RecordedEvent:
    if not isinstance(value, dict) or not isinstance(value.get("data"), str):
        raise ValueError("an event must be an object with kind and data")
    kinds = [k.value for k in FrameKind]
    if value.get("kind") not in kinds:
        raise ValueError(f"an event's kind {value.get('kind')!r:.40}: expected one of {', '.join(kinds)}")
    return RecordedEvent(FrameKind(value["kind"]), value["data"].encode("utf-8", "surrogateescape"))


def _cumulative(sizes: list[int]) -> list[int]:
    out, total = [], 0
    for n in sizes:
        total += n
        out.append(total)
    return out
