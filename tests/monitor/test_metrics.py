from __future__ import annotations

from dataclasses import replace

from prometheus_client import generate_latest

from tokenpath.monitor.config import from_dict
from tokenpath.monitor.metrics import BurstWindow, MonitorMetrics
from tokenpath.monitor.probing import NO_CONTENT, OK, ProbeOutcome
from tokenpath.probe.metrics import RunMetrics
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd


def test_the_modal_burst_is_what_most_arrivals_carried_over_the_window() -> None:
    w = BurstWindow(2)
    assert w.modal() is None
    w.add({1: 10})
    assert w.modal() == 1
    w.add({5: 12, 1: 1})
    assert w.modal() == 5
    w.add({1: 3})  # the first probe leaves the window: {5: 12, 1: 4}
    assert w.modal() == 5
    w.add({1: 30})
    assert w.modal() == 1
    tie = BurstWindow(1)
    tie.add({1: 2, 4: 2})
    assert tie.modal() == 4  # a tie says coalescing


def run(ttft_ms: float, bursts: dict[int, int], fpr: float) -> RunMetrics:
    frames = sum(k * v for k, v in bursts.items())
    return RunMetrics("s", 200, frames, sum(bursts.values()), fpr, 1.0, ttft_ms, {}, bursts, ttft_ms + 100)


def outcome(route: str, m: RunMetrics | None, result: str = OK, stream_id: str = "tp-1") -> ProbeOutcome:
    return ProbeOutcome("edge", route, stream_id, result, "", m, (0.05, 0.2), 1_700_000_000.0)


def sample(metrics: MonitorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_outcomes_become_series_labelled_only_by_the_config() -> None:
    cfg = from_dict({"target": [{"name": "edge", "url": "http://127.0.0.1:9", "direct_url": "http://127.0.0.1:10",
                                 "interval_s": 5}]})  # fmt: skip
    m = MonitorMetrics(cfg)
    assert sample(m, "tokenpath_monitor_probes_total", target="edge", route="via", outcome="ok") == 0
    assert sample(m, "tokenpath_monitor_interval_seconds", target="edge") == 5
    m.record(outcome("via", run(300, {5: 8}, 5.0)))
    m.record(outcome("direct", run(100, {1: 40}, 1.0)))
    m.record(outcome("via", None, "tls"))
    m.record_added("edge", 0.2)
    m.record_added("edge", -0.003)  # noise: counted as 0 in the histogram, kept signed in the gauge
    via = {"target": "edge", "route": "via"}
    assert sample(m, "tokenpath_monitor_probes_total", **via, outcome="tls") == 1
    assert sample(m, "tokenpath_monitor_probes_total", **via, outcome="ok") == 1
    assert sample(m, "tokenpath_monitor_coalescing", **via) == 5
    assert sample(m, "tokenpath_monitor_coalescing", target="edge", route="direct") == 1
    assert sample(m, "tokenpath_monitor_ttft_seconds_sum", **via) == 0.3
    assert sample(m, "tokenpath_monitor_frames_per_read_bucket", **via, le="3.0") == 0
    assert sample(m, "tokenpath_monitor_frames_per_read_bucket", **via, le="5.0") == 1
    assert sample(m, "tokenpath_monitor_frame_gap_seconds_count", **via) == 2
    assert sample(m, "tokenpath_monitor_last_success_timestamp_seconds", **via) == 1_700_000_000.0
    assert sample(m, "tokenpath_monitor_added_ttft_seconds_count", target="edge") == 2
    assert sample(m, "tokenpath_monitor_added_ttft_seconds_sum", target="edge") == 0.2
    assert sample(m, "tokenpath_monitor_added_ttft_last_seconds", target="edge") == -0.003
    text = generate_latest(m.registry).decode()
    labels = {part.split("=")[0] for line in text.splitlines() if "{" in line and not line.startswith("#")
              for part in line[line.index("{") + 1 : line.index("}")].split(",")}  # fmt: skip
    # reason: a dropped probe's, from the schedule; end: a stream's kind of end, three words (wire/ending.py)
    assert labels <= {"target", "route", "outcome", "reason", "le", "end"}


def test_a_failed_probe_leaves_ttft_and_last_success_alone() -> None:
    """last_success starts at the monitor's start: with no series, a target down since then was never stale (the
    staleness alert compared nothing)."""
    cfg = from_dict({"target": [{"name": "edge", "url": "http://127.0.0.1:9"}]})
    m = MonitorMetrics(cfg, started=1_600_000_000.0)
    m.record(outcome("via", None, "first_byte_timeout"))
    via = {"target": "edge", "route": "via"}
    assert sample(m, "tokenpath_monitor_ttft_seconds_count", **via) is None
    assert sample(m, "tokenpath_monitor_last_success_timestamp_seconds", **via) == 1_600_000_000.0


def test_a_stream_without_content_gives_no_path_figures() -> None:
    """An empty answer written in one go (the role, empty deltas, [DONE]) set the coalescing gauge to its burst and
    fed frames per read and gaps: a target answering nothing fired the coalescing alert. Only `ok` probes give
    figures, as --once's summary has it; its TTFB is still its own."""
    cfg = from_dict({"target": [{"name": "edge", "url": "http://127.0.0.1:9"}]})
    m = MonitorMetrics(cfg)
    m.record(outcome("via", run(300, {5: 1}, 5.0), NO_CONTENT))
    via = {"target": "edge", "route": "via"}
    assert sample(m, "tokenpath_monitor_probes_total", **via, outcome=NO_CONTENT) == 1
    assert sample(m, "tokenpath_monitor_ttfb_seconds_count", **via) == 1
    assert sample(m, "tokenpath_monitor_coalescing", **via) is None
    assert sample(m, "tokenpath_monitor_frames_per_read_count", **via) is None
    assert sample(m, "tokenpath_monitor_frame_gap_seconds_count", **via) is None


def test_the_declared_coalescing_window_is_the_one_applied() -> None:
    for window, expected in ((1, 1), (3, 5)):
        cfg = from_dict({"monitor": {"coalescing_window": window},
                         "target": [{"name": "edge", "url": "http://127.0.0.1:9"}]})  # fmt: skip
        m = MonitorMetrics(cfg)
        m.record(outcome("via", run(300, {5: 8}, 5.0)))
        m.record(outcome("via", run(300, {5: 8}, 5.0)))
        m.record(outcome("via", run(100, {1: 10}, 1.0)))
        assert sample(m, "tokenpath_monitor_coalescing", target="edge", route="via") == expected


def test_a_cut_stream_is_counted_by_its_kind_and_never_in_the_stream_figures() -> None:
    cfg = from_dict({"target": [{"name": "edge", "url": "http://127.0.0.1:9"}]})
    m = MonitorMetrics(cfg)
    for kind in EndKind:  # every kind's series exists at 0 before the first probe: increase() has one to read
        assert sample(m, "tokenpath_monitor_stream_ends_total", target="edge", route="via", end=kind.value) == 0
    cut = StreamEnd(EndKind.CUT_SILENT, BodyEnd.CHUNKED, 60_000_000_000, 60_000_000_000)
    short = replace(outcome("via", run(300, {1: 3}, 1.0), "cut_silent"), end=cut)
    m.record(short)
    assert sample(m, "tokenpath_monitor_stream_ends_total", target="edge", route="via", end="cut_silent") == 1
    assert sample(m, "tokenpath_monitor_probes_total", target="edge", route="via", outcome="cut_silent") == 1
    assert sample(m, "tokenpath_monitor_ttft_seconds_count", target="edge", route="via") in (None, 0)
    assert sample(m, "tokenpath_monitor_frames_per_read_count", target="edge", route="via") in (None, 0)
    whole = replace(outcome("via", run(300, {1: 3}, 1.0)), end=replace(cut, kind=EndKind.COMPLETE))
    m.record(whole)
    assert sample(m, "tokenpath_monitor_stream_ends_total", target="edge", route="via", end="complete") == 1
    assert sample(m, "tokenpath_monitor_ttft_seconds_count", target="edge", route="via") == 1
    assert sample(m, "tokenpath_monitor_frames_per_read_count", target="edge", route="via") == 1
