"""Figures of one stream (RunMetrics) and of several runs (medians), using the words in docs/definitions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from tokenpath.clock import ns_to_ms
from tokenpath.probe.trace import Trace
from tokenpath.stats import median, percentile

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunMetrics:
    stream_id: str
    status: int
    frames: int
    arrivals: int  # reads that completed at least one frame
    frames_per_read: float | None  # frames / arrivals; None when nothing arrived
    ttfb_ms: float | None
    ttft_ms: float | None  # to the first frame that carries content
    gaps_ms: dict[str, float]  # between consecutive arrivals: p50, p90, max
    bursts: dict[int, int]  # frames completed by one arrival -> how many arrivals did that
    total_ms: float | None
    ttft_note: str = ""  # why there is no TTFT when the stream ended with frames but none was OpenAI content

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunMetrics:
        return cls(
            stream_id=obj.get("stream_id", ""), status=obj["status"], frames=obj["frames"], arrivals=obj["arrivals"],
            frames_per_read=obj.get("frames_per_read"), ttfb_ms=obj.get("ttfb_ms"), ttft_ms=obj.get("ttft_ms"),
            gaps_ms=dict(obj.get("gaps_ms") or {}), bursts={int(k): v for k, v in (obj.get("bursts") or {}).items()},
            total_ms=obj.get("total_ms"), ttft_note=obj.get("ttft_note", ""),
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "status": self.status,
            "frames": self.frames,
            "arrivals": self.arrivals,
            "frames_per_read": self.frames_per_read,
            "ttfb_ms": self.ttfb_ms,
            "ttft_ms": self.ttft_ms,
            "gaps_ms": self.gaps_ms,
            "bursts": {str(k): v for k, v in sorted(self.bursts.items())},
            "total_ms": self.total_ms,
            **({"ttft_note": self.ttft_note} if self.ttft_note else {}),
        }


def no_ttft_note(trace: Trace) -> str:
    """Why a stream with frames has no TTFT: it is in another API format (until those formats are read), or it
    carried no content at all. "" when it has a TTFT or no frames."""
    if trace.first_content is not None or not trace.frame_count:
        return ""
    if trace.foreign_frames:
        return (f"no OpenAI content frame: {trace.foreign_frames} of {trace.frame_count} frames are JSON that is not "
                f"an OpenAI chat chunk (first: {trace.foreign_hint}), another API format (Anthropic, Responses?) "
                "that tokenpath does not read yet, so no TTFT is reported")  # fmt: skip
    return f"no content frame in {trace.frame_count} frames, so no TTFT"


def run_metrics(trace: Trace) -> RunMetrics:
    # Arrivals are counted per read, never per frame: five frames in one recv() are one arrival. Counts cover the
    # whole stream; gaps are over the arrivals the trace kept (all of them, short of TraceLimits.reads reads).
    arrival_times = [r.t_ns for r in trace.reads if r.frames > 0]
    arrivals = trace.arrival_count
    frames = trace.frame_count
    gaps = sorted(ns_to_ms(b - a) for a, b in pairwise(arrival_times))
    sent = trace.t_sent_ns

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
        gaps_ms={"p50": percentile(gaps, 50), "p90": percentile(gaps, 90), "max": gaps[-1]} if gaps else {},
        bursts=dict(trace.bursts),
        total_ms=since_sent(trace.t_end_ns),
        ttft_note=no_ttft_note(trace),
    )


@dataclass(frozen=True, slots=True)
class ProbeSummary:
    runs: int
    frames_per_read: float | None
    ttfb_ms: float | None
    ttft_ms: float | None


@dataclass(frozen=True, slots=True)
class ProbeResults:
    """`tokenpath probe`: every run, and medians over runs."""

    url: str
    runs: tuple[RunMetrics, ...]
    summary: ProbeSummary

    def to_json(self) -> dict[str, Any]:
        """The probe's --json document (its own SCHEMA_VERSION: a smaller document than results.json)."""
        s = self.summary
        return {
            "schema_version": SCHEMA_VERSION,
            "url": self.url,
            "runs": [r.to_json() for r in self.runs],
            "summary": {
                "runs": s.runs,
                "frames_per_read": s.frames_per_read,
                "ttfb_ms": s.ttfb_ms,
                "ttft_ms": s.ttft_ms,
            },
        }


def probe_results(url: str, runs: list[RunMetrics]) -> ProbeResults:
    def med(key: str) -> float | None:
        values = [getattr(r, key) for r in runs if getattr(r, key) is not None]
        return median(values) if values else None

    summary = ProbeSummary(len(runs), med("frames_per_read"), med("ttfb_ms"), med("ttft_ms"))
    return ProbeResults(url, tuple(runs), summary)


def dumps(results: ProbeResults) -> str:
    """`probe --json`'s stdout: the ProbeResults document."""
    return json.dumps(results.to_json(), indent=2)
