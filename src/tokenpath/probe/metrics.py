"""Figures of one stream (RunMetrics) and of several runs (medians), using the words in docs/definitions."""

from __future__ import annotations

from collections import Counter
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

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunMetrics:
        return cls(
            stream_id=obj.get("stream_id", ""), status=obj["status"], frames=obj["frames"], arrivals=obj["arrivals"],
            frames_per_read=obj.get("frames_per_read"), ttfb_ms=obj.get("ttfb_ms"), ttft_ms=obj.get("ttft_ms"),
            gaps_ms=dict(obj.get("gaps_ms") or {}), bursts={int(k): v for k, v in (obj.get("bursts") or {}).items()},
            total_ms=obj.get("total_ms"),
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
        }


def run_metrics(trace: Trace) -> RunMetrics:
    # Arrivals are counted per read, never per frame: five frames in one recv() are one arrival.
    arrival_times = [r.t_ns for r in trace.reads if r.frames > 0]
    arrivals = len(arrival_times)
    frames = len(trace.frames)
    gaps = sorted(ns_to_ms(b - a) for a, b in pairwise(arrival_times))
    sent = trace.t_sent_ns

    def since_sent(t: int | None) -> float | None:
        return ns_to_ms(t - sent) if t is not None else None

    first = trace.frames[trace.first_content].t_ns if trace.first_content is not None else None
    return RunMetrics(
        stream_id=trace.stream_id,
        status=trace.head.status if trace.head else 0,
        frames=frames,
        arrivals=arrivals,
        frames_per_read=frames / arrivals if arrivals else None,
        ttfb_ms=since_sent(trace.t_first_byte_ns),
        ttft_ms=since_sent(first),
        gaps_ms={"p50": percentile(gaps, 50), "p90": percentile(gaps, 90), "max": gaps[-1]} if gaps else {},
        bursts=dict(Counter(r.frames for r in trace.reads if r.frames > 0)),
        total_ms=since_sent(trace.t_end_ns),
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
