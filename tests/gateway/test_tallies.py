"""One worker's metrics as tallies (gateway/tallies.py) against prometheus-client's own metrics: the same updates make
the same /metrics, sample for sample; and gateway/metrics.py picks prometheus-client's where workers share files."""

from __future__ import annotations

import math
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest, values
from prometheus_client.metrics import disable_created_metrics, enable_created_metrics
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from tokenpath.gateway import tallies
from tokenpath.gateway.failures import Outcome
from tokenpath.gateway.metrics import ADDED_BUCKETS, LATENCY_BUCKETS, MULTIPROC_ENV, Metrics

LABEL = st.text(st.characters(codec="utf-8"), max_size=12)  # quotes, backslashes, controls, any script; no surrogate
# Observations: any order of magnitude, the bounds themselves (`le` is inclusive), 0, negatives and infinity.
AMOUNT = st.floats(min_value=-1.0, max_value=1e4, allow_nan=False) | st.sampled_from(
    (0.0, math.inf, math.nan, *LATENCY_BUCKETS, *ADDED_BUCKETS)
)
COUNT = st.floats(min_value=0.0, max_value=1e9, allow_nan=False) | st.integers(0, 10**6)


@dataclass(frozen=True)
class Update:
    """One call the gateway makes on a metric: its attribute, label values, method and argument."""

    metric: str
    labels: tuple[str, ...]
    method: str
    amount: float | None


LABELS = {  # each metric's label count (gateway/metrics.py)
    "upstream_ttft": 1, "upstream_head": 1, "added_ttft": 0, "streams_active": 0, "requests": 1, "frames": 0,
    "bytes": 0, "keepalives": 2, "errors": 1, "failovers": 1, "tls_handshakes": 2, "member_healthy": 2,
}  # fmt: skip
METHODS = {
    "upstream_ttft": "observe", "upstream_head": "observe", "added_ttft": "observe", "streams_active": "gauge",
    "member_healthy": "gauge",
}  # fmt: skip


@st.composite
def updates(draw: st.DrawFn) -> Update:
    metric = draw(st.sampled_from(sorted(LABELS)))
    labels = tuple(draw(st.lists(LABEL, min_size=LABELS[metric], max_size=LABELS[metric])))
    kind = METHODS.get(metric, "inc")
    if kind == "observe":
        return Update(metric, labels, "observe", draw(AMOUNT))
    if kind == "gauge":
        method = draw(st.sampled_from(("inc", "dec", "set")))
        return Update(metric, labels, method, draw(st.floats(-1e6, 1e6, allow_nan=False)))
    return Update(metric, labels, "inc", draw(COUNT))


def apply(metrics: Metrics, update: Update) -> None:
    metric = getattr(metrics, update.metric)
    series = metrics.child(metric, *update.labels) if update.labels else metric
    getattr(series, update.method)(update.amount)


def exposition(registry: CollectorRegistry, generate: object = generate_latest) -> str:
    """The text a scrape gets, each `_created` value replaced: it is the series' creation time."""
    assert callable(generate)
    lines = generate(registry).decode().split("\n")  # a label's newline is written escaped: one sample a line
    return "\n".join(
        line.rsplit(" ", 1)[0] + " T" if re.match(r"[a-z_]+_created[{ ]", line) else line for line in lines
    )


@given(st.lists(updates(), max_size=40))
@example([Update("added_ttft", (), "observe", math.nan), Update("upstream_head", ("p",), "observe", 0.25)])
def test_the_same_updates_make_the_same_metrics_as_prometheus_clients_own(steps: list[Update]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    tallied, reference = Metrics(ours, shared=False), Metrics(theirs, shared=True)
    assert isinstance(tallied.frames, tallies.CounterTally)
    assert isinstance(reference.frames, Counter)
    for step in steps:
        apply(tallied, step)
        apply(reference, step)
    assert exposition(ours) == exposition(theirs)
    assert exposition(ours, generate_openmetrics) == exposition(theirs, generate_openmetrics)


def test_a_counter_refuses_a_negative_amount_and_a_labelled_metric_a_wrong_label_count() -> None:
    for shared in (False, True):
        metrics = Metrics(CollectorRegistry(), shared=shared)
        with pytest.raises(ValueError, match="non-negative"):
            metrics.frames.inc(-1)
        with pytest.raises(ValueError, match="Incorrect label count"):
            metrics.requests.labels("200", "extra")
        with pytest.raises(ValueError, match="Incorrect label count"):
            metrics.keepalives.labels("pool")


def test_histogram_buckets_must_increase_hold_a_finite_bound_none_negative_and_end_at_infinity() -> None:
    with pytest.raises(ValueError, match="increasing"):
        tallies.histograms("h", "h", (1.0, 0.5))
    for refused in ((), (math.inf,), (-1.0, 1.0)):  # the last: prometheus-client's family would lose its _count
        with pytest.raises(ValueError, match="below"):
            tallies.histograms("h", "h", refused)
    assert tallies.histograms("h", "h", (1.0, 2.0)).only().bounds == (1.0, 2.0, math.inf)
    assert tallies.histograms("h", "h", (1.0, math.inf)).only().bounds == (1.0, math.inf)


def test_label_values_are_keyed_as_their_strings() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, shared=False)
    metrics.errors.labels(Outcome.INTERNAL).inc()
    metrics.errors.labels(str(Outcome.INTERNAL)).inc()
    metrics.requests.labels(cast(str, 200)).inc()  # prometheus-client takes any value and keys it by str()
    metrics.requests.labels("200").inc()
    assert registry.get_sample_value("tokenpath_gateway_errors_total", {"reason": str(Outcome.INTERNAL)}) == 2
    assert registry.get_sample_value("tokenpath_gateway_requests_total", {"code": "200"}) == 2
    assert generate_latest(registry).decode().count('tokenpath_gateway_requests_total{code="200"}') == 1


def test_one_worker_keeps_tallies_and_workers_sharing_files_keep_prometheus_clients_metrics(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """prometheus-client chose its value class at import, from its directory's variable: Metrics follows it."""
    assert values.ValueClass is values.MutexValue  # no workers' directory in the tests' environment
    assert isinstance(Metrics(CollectorRegistry()).requests, tallies.Family)
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", values.get_value_class())  # type: ignore[no-untyped-call]
    shared = Metrics(CollectorRegistry())
    assert isinstance(shared.requests, Counter)
    shared.child(shared.requests, "200").inc()
    assert list(tmp_path.glob("counter_*.db"))  # the sample went to the workers' shared files


def test_created_samples_follow_prometheus_clients_switch() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    for metrics in (Metrics(ours, shared=False), Metrics(theirs, shared=True)):
        metrics.child(metrics.requests, "200").inc()
        metrics.child(metrics.upstream_head, "p").observe(0.2)
    text = generate_latest(ours).decode()
    assert 'tokenpath_gateway_requests_created{code="200"}' in text
    assert 'tokenpath_gateway_upstream_head_seconds_created{pool="p"}' in text
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        text = generate_latest(ours).decode()
        assert "_created" not in text
        assert 'tokenpath_gateway_requests_total{code="200"} 1.0' in text
        assert exposition(ours) == exposition(theirs)
    finally:
        enable_created_metrics()  # type: ignore[no-untyped-call]


def test_a_scrape_filtered_by_name_gets_that_family_alone() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, shared=False)
    metrics.frames.inc(3)
    metrics.child(metrics.requests, "200").inc()
    text = generate_latest(registry.restricted_registry(["tokenpath_gateway_frames_relayed_total"])).decode()
    assert "tokenpath_gateway_frames_relayed_total 3.0" in text
    assert "requests" not in text
    with pytest.raises(ValueError, match="Duplicated timeseries"):  # the registry knows the names: a second
        Metrics(registry, shared=False)  # set of the same metrics is refused


def test_a_series_seen_by_a_scrape_keeps_counting_and_a_new_label_set_appears_at_the_next() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, shared=False)
    ok = metrics.child(metrics.requests, "200")
    ok.inc()
    assert registry.get_sample_value("tokenpath_gateway_requests_total", {"code": "200"}) == 1
    ok.inc()
    metrics.child(metrics.requests, "502").inc()
    assert registry.get_sample_value("tokenpath_gateway_requests_total", {"code": "200"}) == 2
    assert registry.get_sample_value("tokenpath_gateway_requests_total", {"code": "502"}) == 1
    metrics.streams_active.inc()
    metrics.streams_active.inc()
    metrics.streams_active.dec()
    assert registry.get_sample_value("tokenpath_gateway_streams_active") == 1


def test_a_scrape_while_the_loop_adds_label_sets_never_fails() -> None:
    """The scrape thread copies a family's series before it walks them: the loop may add one at any bytecode."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, shared=False)
    errors: list[BaseException] = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            try:
                generate_latest(registry)
            except BaseException as exc:  # reported by the test's thread
                errors.append(exc)
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch every few bytecodes
    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for code in range(20_000):  # bounded: ~0.2 s
            metrics.child(metrics.requests, str(code)).inc()
            if errors:
                break
    finally:
        stop.set()
        scraper.join(timeout=30)
        sys.setswitchinterval(interval)
    assert not errors, errors


def test_a_snapshot_waits_for_a_label_set_being_added() -> None:
    """The copy and an insertion hold the same lock (the test above fails without it only when the collection runs
    Python code at the wrong moment; this one, always)."""
    family = tallies.counters("c", "c", ["code"])
    done = threading.Event()

    def scrape() -> None:
        family.snapshot()
        done.set()

    scraper = threading.Thread(target=scrape)
    with family._adding:  # as labels() holds it while it adds a series
        scraper.start()
        assert not done.wait(0.2), "the snapshot did not wait for the lock"
    assert done.wait(30)
    scraper.join(timeout=30)
