"""The gateway's metrics as plain numbers, exposed through prometheus-client at scrape time (one worker).

prometheus-client's Counter, Gauge and Histogram are written to through a wrapper, an observability check and a
lock per call, and a histogram finds its bucket with a Python loop: ~40 Python calls per request of the gateway's
~800 (bench/loop_iterations.py --calls). Here a series is a number the event loop adds to (a histogram's bucket
found by bisect, in C), and a collector registered with the gateway's registry turns them into the same metric
families when /metrics is read. Written only on the worker's event-loop thread, like the rest of its state; read
by the scrape thread, which copies a family's series, under the lock a new label set is added under, before it
walks them.

With several workers the samples must reach prometheus-client's shared files as they happen, so there the gateway
keeps prometheus-client's own metrics (gateway/metrics.py chooses)."""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Generic, TypeVar

from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

Series = TypeVar("Series", "CounterTally", "GaugeTally", "HistogramTally")


def created_series_wanted() -> bool:
    """prometheus-client's own switch for the `_created` samples: PROMETHEUS_DISABLE_CREATED_SERIES as it was at its
    import, then its disable_created_metrics() and enable_created_metrics(). It keeps the switch in a module global
    with no getter; reading it is the only way to follow the same switch."""
    return bool(prometheus_metrics._use_created)


class CounterTally:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class GaugeTally:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramTally:
    """Per-bucket counts (not cumulative: one add per observation) and the sum; `le` is inclusive, as in
    Prometheus: a value equal to a bound is in that bound's bucket."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        i = bisect_left(self.bounds, amount)
        if amount <= self.bounds[i]:  # false only for a NaN (bisect puts it first): no bucket, as in prometheus-client
            self.counts[i] += 1
        self.sum += amount


class Family(Generic[Series]):
    """A metric's series by label values (in the label names' order)."""

    def __init__(
        self,
        kind: Callable[..., Metric],  # called as kind(name, documentation, labels=labelnames)
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        new_series: Callable[[], Series],
    ) -> None:
        self.kind = kind  # the metric family class it is exposed as
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._new_series: Callable[[], Series] = new_series
        self.series: dict[tuple[str, ...], Series] = {}
        self._adding = threading.Lock()  # held to add a series and to copy them, never to update one
        if not self.labelnames:  # an unlabelled metric is one series, exposed from the start (0 until counted)
            self.series[()] = new_series()

    def labels(self, *labelvalues: str) -> Series:
        """prometheus-client's `labels`, positional values only: each value is keyed as its str (a StrEnum member
        and its string are one series)."""
        found = self.series.get(labelvalues)
        if found is None:
            if len(labelvalues) != len(self.labelnames):
                raise ValueError(f"Incorrect label count: {self.name} takes {self.labelnames}, got {labelvalues!r}")
            key = tuple(str(v) for v in labelvalues)
            with self._adding:
                found = self.series.setdefault(key, self._new_series())
        return found

    def only(self) -> Series:
        """An unlabelled metric's one series."""
        return self.series[()]

    def snapshot(self) -> list[tuple[list[str], Series]]:
        """The series as label-value lists. Copied under the lock a new label set is added under: a copy made
        without it can meet an insertion (the copy allocates, a collection runs Python code, gc callbacks or
        finalizers, and the thread can switch there)."""
        with self._adding:
            found = list(self.series.items())
        return [(list(values), series) for values, series in found]


def counters(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family[CounterTally]:
    return Family(CounterMetricFamily, name, documentation, labelnames, CounterTally)


def gauges(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family[GaugeTally]:
    return Family(GaugeMetricFamily, name, documentation, labelnames, GaugeTally)


def histograms(
    name: str, documentation: str, buckets: Sequence[float], labelnames: Sequence[str] = ()
) -> Family[HistogramTally]:
    bounds = tuple(float(b) for b in buckets)
    if list(bounds) != sorted(bounds):
        raise ValueError(f"{name}: buckets must be in increasing order")
    if not bounds or bounds[-1] != math.inf:
        bounds += (math.inf,)
    if len(bounds) < 2 or bounds[0] < 0:  # as prometheus-client; a negative bound: no _sum there, no _count here
        raise ValueError(f"{name}: buckets must hold a bound below +Inf, and no negative one")
    return Family(HistogramMetricFamily, name, documentation, labelnames, lambda: HistogramTally(bounds))


AnyFamily = Family[CounterTally] | Family[GaugeTally] | Family[HistogramTally]


class TallyCollector:
    """The families as prometheus-client metric families, built when the registry is read."""

    def __init__(self, families: Iterable[AnyFamily]) -> None:
        self.families = list(families)

    def describe(self) -> list[Metric]:
        """Names only (no samples): the registry's duplicate check and `name[]` filtering use them."""
        return [_family_metric(f) for f in self.families]

    def collect(self) -> list[Metric]:
        created = created_series_wanted()
        out = []
        for family in self.families:
            metric = _family_metric(family)
            for labelvalues, series in family.snapshot():
                _add_series(metric, family.labelnames, labelvalues, series, created)
            out.append(metric)
        return out


def _family_metric(family: AnyFamily) -> Metric:
    return family.kind(family.name, family.documentation, labels=family.labelnames)


def _add_series(
    metric: Metric,
    labelnames: tuple[str, ...],
    labelvalues: list[str],
    series: CounterTally | GaugeTally | HistogramTally,
    created: bool,
) -> None:
    if isinstance(series, CounterTally):
        assert isinstance(metric, CounterMetricFamily)
        metric.add_metric(labelvalues, series.value, created=series.created if created else None)
    elif isinstance(series, GaugeTally):
        assert isinstance(metric, GaugeMetricFamily)
        metric.add_metric(labelvalues, series.value)
    else:
        assert isinstance(metric, HistogramMetricFamily)
        counts = list(series.counts)  # one copy: the buckets of one moment, though the loop goes on counting
        cumulative = zip(series.bounds, accumulate(counts), strict=True)
        buckets = [(floatToGoString(b), float(c)) for b, c in cumulative]  # type: ignore[no-untyped-call]
        metric.add_metric(labelvalues, buckets, series.sum)
        if created:
            metric.add_sample(metric.name + "_created", dict(zip(labelnames, labelvalues, strict=True)), series.created)
