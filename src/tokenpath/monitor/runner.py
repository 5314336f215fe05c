"""The monitor's two modes on one probe path.

`watch`: probe every target on its schedule until told to stop, record each outcome in every sink (the Prometheus
metrics, and the OTLP export when asked for) and as one JSON log line (with the stream id, so a bad point on a
dashboard can be traced to its probe). Probes run in a fixed pool of threads (the probe is blocking by design: one
raw socket, timestamps at each recv), at most one per target and `max_concurrency` in all; a scheduled probe that
cannot run is dropped and counted (schedule.py), never queued. Nothing grows with time: the pool, the metrics and
the burst windows are fixed in size, every probe closes its socket, and a stop aborts the probes in flight.

`once`: N cycles of every target, then a summary per target that `--fail-on` rules are checked against.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from tokenpath.monitor.config import MonitorConfig, Target
from tokenpath.monitor.metrics import BurstWindow, MonitorMetrics
from tokenpath.monitor.otlp_endpoint import shown
from tokenpath.monitor.probing import Aborter, ProbeOutcome, Prober, added_ttft_s, default_prober, probe_cycle
from tokenpath.monitor.rules import Rule
from tokenpath.monitor.schedule import Schedule
from tokenpath.stats import median, percentile

log = logging.getLogger("tokenpath.monitor")

Clock = Callable[[], float]


class OutcomeSink(Protocol):
    """Where the watch's measurements go: MonitorMetrics (Prometheus), OtlpExport (OTLP). Each gets the same
    outcomes, so the two exports cannot disagree about what was measured."""

    def record(self, outcome: ProbeOutcome) -> None: ...
    def record_added(self, target: str, added_s: float) -> None: ...
    def record_dropped(self, target: str, reason: str, count: int) -> None: ...


def log_outcome(outcome: ProbeOutcome, added_s: float | None = None) -> None:
    m = outcome.metrics
    record: dict[str, object] = {
        "event": "probe",
        # The exporter's target is a URL (never its user or password in a log); a config's is a name, kept as it is
        "target": shown(outcome.target) if "://" in outcome.target else outcome.target,
        "route": outcome.route,
        "stream_id": outcome.stream_id,
        "outcome": outcome.outcome,
        "http_version": outcome.http_version,
    }
    if m is not None:
        record.update(
            ttfb_ms=_r(m.ttfb_ms),
            ttft_ms=_r(m.ttft_ms),
            frames=m.frames,
            arrivals=m.arrivals,
            fpr=_r(m.frames_per_read),
            total_ms=_r(m.total_ms),
        )
    if added_s is not None:
        record["added_ttft_ms"] = _r(added_s * 1000)
    if outcome.message:
        record["message"] = outcome.message
    (log.info if outcome.ok else log.warning)(json.dumps(record))


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class Watch:
    """Probes on schedule until stop(). `clock` and `prober` are injected so tests can drive it; `sinks` get every
    outcome besides `metrics`."""

    def __init__(
        self,
        config: MonitorConfig,
        metrics: MonitorMetrics,
        *,
        sinks: tuple[OutcomeSink, ...] = (),
        prober: Prober | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._sinks: tuple[OutcomeSink, ...] = (metrics, *sinks)
        self.aborter = Aborter()
        self._prober = prober or default_prober(self.aborter)
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.cycles = 0

    def stop(self) -> None:
        """Safe from a signal handler: ends the loop and aborts the probes in flight."""
        self._stop.set()
        self._wake.set()
        self.aborter.stop()

    def run(self, max_cycles: int | None = None) -> None:
        targets = {t.name: t for t in self.config.targets}
        schedule = Schedule.for_config(self.config, self._clock())
        slots = min(self.config.settings.max_concurrency, len(targets))
        in_flight: dict[Future[list[ProbeOutcome]], str] = {}
        turns = dict.fromkeys(targets, False)
        with ThreadPoolExecutor(slots, thread_name_prefix="probe") as pool:
            while not self._stop.is_set() and (max_cycles is None or self.cycles < max_cycles):
                self._wake.clear()  # before collecting: a probe that ends after this sets it again
                self._collect(in_flight, schedule)  # first: what ended frees its slot for what is due
                for name in schedule.due(self._clock()):
                    if len(in_flight) >= slots:
                        break
                    schedule.start(name, self._clock())
                    turns[name] = not turns[name]
                    future = pool.submit(probe_cycle, targets[name], self._prober, turns[name])
                    future.add_done_callback(lambda _f: self._wake.set())
                    in_flight[future] = name
                for name, reason, count in schedule.drop_overdue(self._clock(), slot_free=len(in_flight) < slots):
                    self._dropped(name, reason, count)
                # until something is due or must be dropped; a probe ending wakes it sooner
                self._wake.wait(schedule.seconds_to_next(self._clock(), slot_free=len(in_flight) < slots))
            self.aborter.stop()
            for future in list(in_flight):
                future.cancel()
            wait(in_flight)

    def _collect(self, in_flight: dict[Future[list[ProbeOutcome]], str], schedule: Schedule) -> None:
        done = [f for f in in_flight if f.done()]
        for future in done:
            name = in_flight.pop(future)
            schedule.finish(name)
            if self._stop.is_set() or future.cancelled():
                continue  # a probe cut short by the stop is not a measurement
            try:
                cycle = future.result()
            except Exception:
                log.exception("probe cycle of %s failed inside tokenpath", name)
                continue
            self.cycles += 1
            added = added_ttft_s(cycle)
            for outcome in cycle:
                for sink in self._sinks:
                    sink.record(outcome)
                log_outcome(outcome, added if outcome.route == "via" else None)
            if added is not None:
                for sink in self._sinks:
                    sink.record_added(name, added)

    def _dropped(self, name: str, reason: str, count: int) -> None:
        for sink in self._sinks:
            sink.record_dropped(name, reason, count)
        log.warning(json.dumps({"event": "dropped", "target": name, "reason": reason, "count": count}))


@dataclass
class RouteSamples:
    probes: int = 0
    failures: int = 0
    ttft_s: list[float] = field(default_factory=list)
    ttfb_s: list[float] = field(default_factory=list)
    gaps_s: list[float] = field(default_factory=list)
    fpr: list[float] = field(default_factory=list)
    bursts: BurstWindow = field(default_factory=lambda: BurstWindow(1_000_000))
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: ProbeOutcome) -> None:
        self.probes += 1
        if not outcome.ok:
            self.failures += 1
            self.reasons[outcome.outcome] = self.reasons.get(outcome.outcome, 0) + 1
        m = outcome.metrics
        if m is None or not outcome.ok:
            return  # only a whole stream is measured: a cut one (or one with no content) has a reason, no figures
        if m.ttft_ms is not None:
            self.ttft_s.append(m.ttft_ms / 1000)
        if m.ttfb_ms is not None:
            self.ttfb_s.append(m.ttfb_ms / 1000)
        if m.frames_per_read is not None:
            self.fpr.append(m.frames_per_read)
        self.gaps_s.extend(outcome.gaps_s)
        self.bursts.add(m.bursts)


@dataclass
class TargetSummary:
    name: str
    routes: dict[str, RouteSamples]
    added_s: list[float] = field(default_factory=list)

    def value(self, base: str, pct: float | None = None) -> float | None:
        """A rule's metric on this target (`base`, and its percentile for the timed ones), or None when nothing
        was measured for it."""
        via = self.routes["via"]
        samples = {"ttft": via.ttft_s, "ttfb": via.ttfb_s, "gap": via.gaps_s, "added_ttft": self.added_s}
        if base in samples and pct is not None:
            values = sorted(samples[base])
            return percentile(values, pct) if values else None
        if base == "fpr":
            return median(via.fpr) if via.fpr else None
        if base == "fpr_max":
            return max(via.fpr) if via.fpr else None
        if base == "coalescing":
            modal = via.bursts.modal()
            return None if modal is None else float(modal)
        if base == "failure_rate":
            probes = sum(r.probes for r in self.routes.values())
            return sum(r.failures for r in self.routes.values()) / probes if probes else None
        raise KeyError(base)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during `--once`: the summaries of the probes that ended before it (the gate says nothing of them)."""

    def __init__(self, summaries: list[TargetSummary]) -> None:
        super().__init__()
        self.summaries = summaries


def run_once(
    config: MonitorConfig, cycles: int, prober: Prober | None = None, aborter: Aborter | None = None
) -> list[TargetSummary]:
    """`cycles` cycles of every target (targets in parallel, each one stream at a time), back to back. Ctrl-C
    (KeyboardInterrupt in the calling thread) aborts the probes in flight, starts none after them and raises
    Interrupted with what was measured before it: a probe the stop cut short is not a measurement."""
    aborter = aborter or Aborter()
    probe = prober or default_prober(aborter)

    # Each target's thread says when it begins and ends, and files its summary as it ends: a Ctrl-C can come while
    # the targets are still being handed out, inside the executor's own start of a thread (the first probes under
    # way), before that thread or its future is in any list; the stop still waits for it and counts its probes.
    ended: dict[str, TargetSummary] = {}
    begun: set[str] = set()
    over: set[str] = set()
    change = threading.Condition()

    def one_target(target: Target) -> TargetSummary:
        with change:
            begun.add(target.name)
        try:
            return measured(target)
        finally:
            with change:
                over.add(target.name)
                change.notify_all()

    def measured(target: Target) -> TargetSummary:
        summary = TargetSummary(target.name, {route: RouteSamples() for route in target.routes})
        for i in range(cycles):
            if aborter.stopped.is_set():
                break
            cycle = probe_cycle(target, probe, direct_first=bool(i % 2))
            if aborter.stopped.is_set():
                break  # cut short by the stop (a "network" failure of our own making): not counted, not logged
            added = added_ttft_s(cycle)
            for outcome in cycle:
                summary.routes[outcome.route].add(outcome)
                log_outcome(outcome, added if outcome.route == "via" else None)
            if added is not None:
                summary.added_s.append(added)
        ended[target.name] = summary
        return summary

    slots = min(config.settings.max_concurrency, len(config.targets))
    with ThreadPoolExecutor(slots, thread_name_prefix="probe") as pool:
        futures: list[Future[TargetSummary]] = []
        try:
            for target in config.targets:
                futures.append(pool.submit(one_target, target))
            return [future.result() for future in futures]
        except KeyboardInterrupt:
            aborter.stop()  # end the probes in flight rather than wait out their timeouts; no cycle starts after
            pool.shutdown(wait=False, cancel_futures=True)  # targets not begun never will
            with change:
                change.wait_for(lambda: begun <= over)  # every target that began has ended
            raise Interrupted([ended[t.name] for t in config.targets if t.name in ended]) from None
        except BaseException:
            aborter.stop()
            raise


@dataclass(frozen=True, slots=True)
class Breach:
    rule: Rule
    target: str
    value: float | None

    def line(self) -> str:
        return f"{self.rule.text} breached on {self.target}: {self.rule.shown(self.value)}"


def check_rules(rules: tuple[Rule, ...], summaries: list[TargetSummary]) -> list[Breach]:
    breaches = []
    for rule in rules:
        for summary in summaries:
            if rule.base == "added_ttft" and "direct" not in summary.routes:
                continue  # no direct route: nothing to subtract
            value = summary.value(rule.base, rule.percentile)
            if rule.breached(value):
                breaches.append(Breach(rule, summary.name, value))
    return breaches
