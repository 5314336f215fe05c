"""The load worker over HTTP/2 (Workload.http_version): its streams go through one pool per worker, with the streams per
connection and the windows asked for; against the in-process server of test_h2conn."""

from __future__ import annotations

from typing import Any

from tests.load.test_h2conn import Server, run
from tokenpath.load.runner import LoadRunner
from tokenpath.load.worker import WorkerReport, Workload, closed_loop, open_loop
from tokenpath.wire.httpversion import HttpVersion


def work(port: int, **kw: Any) -> Workload:
    base: dict[str, Any] = {"max_streams": 4, "warmup_s": 0.0, "duration_s": 0.6, "http_version": HttpVersion.HTTP2}
    return Workload(f"http://127.0.0.1:{port}/v1", "m", "p", 5, **{**base, **kw})


def closed(server: Server, **kw: Any) -> WorkerReport:
    return run(server, lambda port: closed_loop(work(port, **kw)))


def test_closed_loop_streams_share_the_connections_asked_for() -> None:
    # No answer before all four users' first streams are open: four streams at once, whatever the timing.
    shared = closed(Server(hold_until=4), streams_per_connection=4)
    alone = closed(Server(hold_until=4), streams_per_connection=1)
    for report in (shared, alone):
        assert report.results
        assert [r.error for r in report.results if r.error] == []
        assert all(r.flow is not None and r.flow.data_frames > 0 for r in report.results)
    assert shared.connections == 1
    assert alone.connections == 4  # four users, a connection each (kept for their next streams)


def test_the_window_asked_for_reaches_the_connections() -> None:
    small = closed(Server(frame_pad=30_000), streams_per_connection=2, max_streams=2)
    browser = closed(Server(frame_pad=30_000), streams_per_connection=2, max_streams=2, h2_window="browser")
    assert small.results
    assert browser.results
    assert sum(r.flow.stalls for r in small.results if r.flow is not None) > 0
    assert all(r.flow is not None and r.flow.stalls == 0 for r in browser.results)


def test_open_loop_over_http2_and_a_peer_limit_reported() -> None:
    report = run(Server(max_streams=2, hold_until=6),
                 lambda port: open_loop(work(port, rate=200.0, max_streams=6, streams_per_connection=6)))  # fmt: skip
    assert report.results
    assert [r.error for r in report.results if r.error] == []
    assert report.peer_limit == 2
    assert report.connections >= 3


def test_http2_shares_give_each_client_process_whole_connections() -> None:
    base = Workload(
        "http://127.0.0.1:1/v1", "m", "p", 5, 50, 0.0, 1.0, http_version=HttpVersion.HTTP2, streams_per_connection=20
    )
    assert [w.max_streams for w in LoadRunner._shares(base, 2)] == [40, 10]
    assert [w.max_streams for w in LoadRunner._shares(base, 4)] == [20, 20, 10]
    one = Workload("http://127.0.0.1:1/v1", "m", "p", 5, 50, 0.0, 1.0, http_version=HttpVersion.HTTP2)
    assert [w.max_streams for w in LoadRunner._shares(one, 2)] == [25, 25]
