"""Figures of one stream (RunMetrics) and of several runs (medians), using the words in docs/definitions."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from tokenpath.audit import StreamLog, added_ns
from tokenpath.clock import ns_to_ms
from tokenpath.probe.h3figures import H3Figures
from tokenpath.probe.trace import H2Figures, Trace
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.stats import median, percentile
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.ending import StreamEnd

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunMetrics:
    stream_id: str
    status: int
    frames: int
    arrivals: int  # reads that completed at least one frame
    frames_per_read: float | None  # frames / arrivals; None when nothing arrived
    ttfb_ms: float | None
    ttft_ms: float | None  # to the first frame that carries content (never reasoning)
    gaps_ms: dict[str, float]  # between consecutive arrivals: p50, p90, max
    bursts: dict[int, int]  # frames completed by one arrival -> how many arrivals did that
    total_ms: float | None
    ttft_note: str = ""  # why there is no TTFT when the stream ended with frames but none was content
    first_token_ms: float | None = None  # to the first frame that carries reasoning or content
    # Every read that returned bytes. Above `arrivals` by the reads that completed no frame: under compression the
    # reads that only fed the decompressor, otherwise the head alone or a frame split across reads.
    reads: int | None = None
    content_encoding: str = "identity"  # as decoded: frames and arrivals are counted in the decoded stream
    # Joined to the stub's write log (probe --stub-url): the first content frame's arrival minus its write, and
    # p50/p99 of the same for every later frame (after the first token: a path that bunches the rest shows here).
    added_ttft_ms: float | None = None
    added_frame_delay_ms: dict[str, float] = field(default_factory=dict)
    # "2" over HTTP/2 (probe --http2), with the stream's DATA frames and flow-control stalls (trace.H2Figures)
    http_version: str = "1.1"
    h2: H2Figures | None = None
    h3: H3Figures | None = None  # "3" over HTTP/3 (probe --http3): its handshake apart, UDP reads, arrival times
    # How the stream ended (wire/ending.py): complete, cut_error or cut_silent, with its time from the request and
    # from the last byte. None for a trace read before ends were classified.
    end: StreamEnd | None = None

    @property
    def complete(self) -> bool:
        """The stream ended with its format's final event: only such a stream's figures are a whole stream's."""
        return self.end is not None and self.end.complete

    ws: WsFigures | None = None  # over WebSocket (probe --transport websocket): the upgrade, the close
    invalid_utf8_frames: int = 0  # frames not UTF-8, which an event stream always is (its clients' decoders fail)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunMetrics:
        return cls(
            stream_id=obj.get("stream_id", ""),
            status=obj["status"],
            frames=obj["frames"],
            arrivals=obj["arrivals"],
            frames_per_read=obj.get("frames_per_read"),
            ttfb_ms=obj.get("ttfb_ms"),
            ttft_ms=obj.get("ttft_ms"),
            gaps_ms=dict(obj.get("gaps_ms") or {}),
            bursts={int(k): v for k, v in (obj.get("bursts") or {}).items()},
            total_ms=obj.get("total_ms"),
            ttft_note=obj.get("ttft_note", ""),
            first_token_ms=obj.get("first_token_ms"),
            reads=obj.get("reads"),
            content_encoding=obj.get("content_encoding") or "identity",
            added_ttft_ms=obj.get("added_ttft_ms"),
            added_frame_delay_ms=dict(obj.get("added_frame_delay_ms") or {}),
            http_version=str(obj.get("http_version") or "1.1"),
            h2=H2Figures.from_json(obj["h2"]) if obj.get("h2") else None,
            h3=H3Figures.from_json(obj["h3"]) if obj.get("h3") else None,
            end=StreamEnd.from_json(obj["end"]) if obj.get("end") else None,
            ws=WsFigures.from_json(obj["websocket"]) if obj.get("websocket") else None,
            invalid_utf8_frames=int(obj.get("invalid_utf8_frames") or 0),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "status": self.status,
            "http_version": self.http_version,
            "content_encoding": self.content_encoding,
            "frames": self.frames,
            "reads": self.reads,
            "arrivals": self.arrivals,
            "frames_per_read": self.frames_per_read,
            "ttfb_ms": self.ttfb_ms,
            "ttft_ms": self.ttft_ms,
            "first_token_ms": self.first_token_ms,
            "gaps_ms": self.gaps_ms,
            "bursts": {str(k): v for k, v in sorted(self.bursts.items())},
            "total_ms": self.total_ms,
            "end": self.end.to_json() if self.end is not None else None,
            "added_ttft_ms": self.added_ttft_ms,
            "added_frame_delay_ms": self.added_frame_delay_ms,
            **({"ttft_note": self.ttft_note} if self.ttft_note else {}),
            **({"h2": self.h2.to_json()} if self.h2 is not None else {}),
            **({"h3": self.h3.to_json()} if self.h3 is not None else {}),
            **({"websocket": self.ws.to_json()} if self.ws is not None else {}),
            **({"invalid_utf8_frames": self.invalid_utf8_frames} if self.invalid_utf8_frames else {}),
        }


def no_ttft_note(trace: Trace) -> str:
    """Why a stream with frames has no TTFT: its frames are in another API format (named, with the --api that reads
    it, when their shape says which), it carried an error, or only reasoning, or no content at all. "" when it has a
    TTFT or no frames."""
    if trace.first_content is not None or not trace.frame_count:
        return ""
    name, frames = SPECS[trace.api].display_name, trace.frame_count
    if trace.foreign_frames:
        guess = trace.foreign_api
        if guess is not None and guess is not trace.api:
            which = f"the {SPECS[guess].display_name} format: pass --api {guess.value}"
        else:
            which = "another API format"
        foreign = f"{trace.foreign_frames} of {frames} frames are not {name} events (first: {trace.foreign_hint})"
        return f"no {name} content frame: {foreign}, {which}; so no TTFT is reported"
    if trace.error_hint:
        return f"no content frame in {frames} frames: the stream carried an error: {trace.error_hint}"
    if trace.first_token is not None:
        return f"no content frame in {frames} frames, only reasoning, so no TTFT (the first token is reported)"
    return f"no content frame in {frames} frames, so no TTFT"


def write_join(trace: Trace, log: StreamLog) -> tuple[float | None, dict[str, float]]:
    """Added TTFT and the later frames' added delay (p50/p99), in ms, from the stub's write log of this stream
    (audit.added_ns, the join every runner uses: frame k is write k). Only where that holds: every frame kept
    and the same size as its write (a path that passes the bytes through); else (None, {})."""
    frames, writes = trace.frames, log.writes
    first = trace.first_content
    aligned = (
        trace.frame_count == len(frames) == len(writes)
        and all(len(f.frame.raw) == w.nbytes for f, w in zip(frames, writes, strict=True))
        and first is not None
        and log.first_content in (None, first)
    )
    if not aligned or first is None:
        return None, {}
    added = added_ns(log, first, frames[first].t_ns)
    later = sorted(ns_to_ms(frames[k].t_ns - writes[k].actual_ns) for k in range(first + 1, len(frames)))
    delay = {"p50": percentile(later, 50), "p99": percentile(later, 99)} if later else {}
    return (ns_to_ms(added) if added is not None else None), delay


def run_metrics(trace: Trace, log: StreamLog | None = None) -> RunMetrics:
    # Arrivals are counted per read, never per frame: five frames in one recv() are one arrival. Counts cover the
    # whole stream; gaps are over the arrivals the trace kept (all of them, short of TraceLimits.reads reads).
    arrival_times = [r.t_ns for r in trace.reads if r.frames > 0]
    arrivals = trace.arrival_count
    frames = trace.frame_count
    gaps = sorted(ns_to_ms(b - a) for a, b in pairwise(arrival_times))
    sent = trace.t_sent_ns
    joined = write_join(trace, log) if log is not None else (None, {})

    def since_sent(t: int | None) -> float | None:
        return ns_to_ms(t - sent) if t is not None else None

    return RunMetrics(
        stream_id=trace.stream_id,
        status=trace.head.status if trace.head else 0,
        frames=frames,
        arrivals=arrivals,
        frames_per_read=frames / arrivals if arrivals else None,
        ttfb_ms=since_sent(trace.t_first_byte_ns),
        ttft_ms=since_sent(trace.t_first_content_ns),
        first_token_ms=since_sent(trace.t_first_token_ns),
        gaps_ms={"p50": percentile(gaps, 50), "p90": percentile(gaps, 90), "max": gaps[-1]} if gaps else {},
        bursts=dict(trace.bursts),
        total_ms=since_sent(trace.t_end_ns),
        ttft_note=no_ttft_note(trace),
        reads=trace.read_count,
        content_encoding=trace.content_encoding,
        added_ttft_ms=joined[0],
        added_frame_delay_ms=joined[1],
        http_version=trace.http_version,
        h2=trace.h2,
        h3=trace.h3,
        end=trace.end,
        ws=trace.ws,
        invalid_utf8_frames=trace.invalid_utf8_frames,
    )


@dataclass(frozen=True, slots=True)
class ProbeSummary:
    """Medians over the runs that ended complete: a cut stream is a short one, never averaged in (its TTFB and
    TTFT are its own run's, in `runs`). `ends`: runs by how they ended."""

    runs: int
    frames_per_read: float | None
    ttfb_ms: float | None
    ttft_ms: float | None
    first_token_ms: float | None = None
    ends: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeResults:
    """`tokenpath probe`: every run, and medians over runs."""

    url: str
    runs: tuple[RunMetrics, ...]
    summary: ProbeSummary
    api: Api = Api.OPENAI
    accept_encoding: str | None = None  # the header sent (None: none)

    def to_json(self) -> dict[str, Any]:
        """The probe's --json document (its own SCHEMA_VERSION: a smaller document than results.json)."""
        s = self.summary
        return {
            "schema_version": SCHEMA_VERSION,
            "url": self.url,
            "api": self.api.value,
            "accept_encoding": self.accept_encoding,
            # As the runs were answered: one value when they agree, else each run's (a path that varies).
            "content_encoding": _encodings(self.runs),
            "http_version": ", ".join(sorted({r.http_version for r in self.runs})) or None,
            "runs": [r.to_json() for r in self.runs],
            "summary": {
                "runs": s.runs,
                "frames_per_read": s.frames_per_read,
                "ttfb_ms": s.ttfb_ms,
                "ttft_ms": s.ttft_ms,
                "first_token_ms": s.first_token_ms,
                "ends": s.ends,
            },
        }


def _encodings(runs: tuple[RunMetrics, ...]) -> str | None:
    seen = sorted({r.content_encoding for r in runs})
    return ", ".join(seen) if seen else None


def probe_results(
    url: str, runs: list[RunMetrics], api: Api = Api.OPENAI, accept_encoding: str | None = None
) -> ProbeResults:
    whole = [r for r in runs if r.end is None or r.complete]  # a trace without an end predates them: as before

    def med(key: str) -> float | None:
        values = [getattr(r, key) for r in whole if getattr(r, key) is not None]
        return median(values) if values else None

    ends = dict(Counter(r.end.kind.value for r in runs if r.end is not None))
    summary = ProbeSummary(
        len(runs), med("frames_per_read"), med("ttfb_ms"), med("ttft_ms"), med("first_token_ms"), ends
    )
    return ProbeResults(url, tuple(runs), summary, api, accept_encoding)


def dumps(results: ProbeResults) -> str:
    """`probe --json`'s stdout: the ProbeResults document."""
    return json.dumps(results.to_json(), indent=2)
