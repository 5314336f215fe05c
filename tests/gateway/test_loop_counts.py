"""Issue 39: the gateway's HTTP/1.1 relay path by counts (tests/gateway/loopcounts.py, the harness): an upstream read
is handled inside data_received and written downstream in the same call, handing the event loop nothing (no
call_soon, no future, no task: no extra loop iteration), in a bounded number of Python calls."""

from __future__ import annotations

from tests.gateway.loopcounts import count

# Python calls per steady-state read, builtins and asyncio's transport.write included (cProfile counts them all):
# 23 before issue 39 (the read queued in a list, popped and written through two wrappers), 19 after.
MAX_CALLS_PER_READ = 19


def test_an_upstream_read_costs_no_extra_loop_iteration_and_a_bounded_number_of_calls() -> None:
    counts = count(frames=40)
    assert counts.reads == 40  # one frame per read: the member waits for the client to have each one
    assert counts.scheduled == 0, "a read scheduled work on the event loop: an extra iteration per read"
    assert counts.calls_per_read <= MAX_CALLS_PER_READ, f"{counts.calls_per_read} Python calls per upstream read"
