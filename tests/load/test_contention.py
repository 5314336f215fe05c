"""Streams that missed the stub's schedule: stub capacity or host contention, each with the remedy that fits."""

from __future__ import annotations

from pathlib import Path

from tokenpath.load.contention import Contention, schedule_missed
from tokenpath.load.runner import Cell, LoadConfig, _level_row
from tokenpath.load.sampler import HostSampler
from tokenpath.results.model import MedianAndTail


def test_a_busy_stub_is_saturated_and_more_stub_workers_is_the_remedy() -> None:
    w = schedule_missed(40, 1000, Contention(0.95, 1, 0.0, 1.0, 2), direct=True)
    assert w["kind"] == "stub_saturated"
    assert "add --stub-workers" in w["remedy"]
    assert "the stub used 0.95 cores" in w["message"]


def test_steal_or_a_long_run_queue_is_host_contention_where_stub_workers_do_not_help() -> None:
    stolen = schedule_missed(40, 1000, Contention(0.3, 1, 0.12, 1.0, 2), direct=True)
    assert stolen["kind"] == "host_contention"
    assert "--stub-workers will not help" in stolen["remedy"]
    assert "steal 12 %" in stolen["message"]
    assert "dedicated or larger VM" in stolen["remedy"]
    queued = schedule_missed(40, 1000, Contention(0.3, 2, 0.0, 4.5, 2), direct=True)
    assert queued["kind"] == "host_contention"
    assert "4.5 runnable tasks on 2 cores" in queued["message"]
    assert "--client-workers" in queued["remedy"]


def test_a_target_whose_stub_misses_only_with_it_is_taking_the_stubs_cores() -> None:
    w = schedule_missed(40, 1000, Contention(0.3, 1, 0.0, 1.5, 2, direct_missed_share=0.0), direct=False)
    assert w["kind"] == "host_contention"
    assert "the direct path at this level missed only 0.0 %" in w["message"]
    assert "taskset" in w["remedy"]
    same = schedule_missed(40, 1000, Contention(0.3, 1, 0.0, 1.5, 2, direct_missed_share=0.04), direct=False)
    assert same["kind"] != "host_contention" or "direct path" not in same["message"]


def test_the_row_warning_comes_from_what_was_sampled() -> None:
    cell = Cell("direct", 50, streams=1000, audit_failed=40)
    cell.stub_cores, cell.steal, cell.run_queue = [0.2, 0.4], [0.0, 0.0], [5.0, 6.0]
    row = _level_row(cell, MedianAndTail(), LoadConfig(("direct",)), cell.contention(1, 2, None))
    (warning,) = row.warnings
    assert warning.kind == "host_contention"  # before: stub_saturated, "add --stub-workers"
    assert "5.5 runnable tasks on 2 cores" in warning.message


def test_the_host_sampler_reads_steal_and_the_run_queue(tmp_path: Path) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.50 0.40 0.30 4/321 999\n")
    with HostSampler(interval_s=0.01, loadavg=str(loadavg)) as host:
        while len(host.runnable) < 3:
            pass
    assert host.run_queue == 3  # the reader itself not counted
    assert host.steal_share is None or 0.0 <= host.steal_share <= 1.0


def test_client_lag_on_a_contended_host_is_not_blamed_on_too_few_client_workers() -> None:
    cell = Cell("direct", 3, streams=20, lag_p99_ms=60.0, client_cpu=0.04)
    busy_host = Contention(0.07, 1, 0.01, 9.4, 2)
    (warning,) = _level_row(cell, MedianAndTail(), LoadConfig(("direct",)), busy_host).warnings
    assert warning.kind == "client_lag"
    assert "more --client-workers will not help" in warning.remedy
    quiet = Contention(0.07, 1, 0.0, 0.5, 2)
    (warning,) = _level_row(cell, MedianAndTail(), LoadConfig(("direct",)), quiet).warnings
    assert warning.kind == "client_saturated"


def test_a_level_counts_its_streams_by_how_they_ended_and_a_cut_is_an_error(tmp_path: Path) -> None:
    from rich.console import Console

    from tokenpath.load.runner import LoadRunner, new_histogram
    from tokenpath.load.worker import StreamResult
    from tokenpath.wire.ending import EndKind

    runner = LoadRunner(LoadConfig(("direct",)), tmp_path, Console(quiet=True))
    cell = Cell("direct", 3)
    results = [
        StreamResult("a", error="cut_silent: the body ended without the format's final event", end=EndKind.CUT_SILENT),
        StreamResult("b", error="the connection was reset", end=EndKind.CUT_ERROR),
        StreamResult("c", error="connect refused"),  # no stream began: no end
    ]
    runner._join(cell, results, "http://127.0.0.1:9", new_histogram())  # nothing ok: the stub is never asked
    assert cell.errors == 3
    row = _level_row(cell, MedianAndTail(), LoadConfig(("direct",)), cell.contention(1, 2, None))
    assert row.ends == {"cut_silent": 1, "cut_error": 1}
