"""Progress off a terminal: one line per step, with the time so far and the time still expected (issue 21)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from tokenpath.progress import LineProgress, progress_bar


def test_off_a_terminal_each_step_is_a_line_with_elapsed_and_expected_time() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80)
    assert not console.is_terminal
    now = [100.0]
    bar = progress_bar(console)
    assert isinstance(bar, LineProgress)
    bar.clock = lambda: now[0]
    with bar:
        task = bar.add_task("matrix", total=4)
        now[0] = 110.0
        bar.update(task, description="60 B @ 50 ms, loopback, run 1/2, direct")
        bar.advance(task)
        now[0] = 3700.0
        bar.advance(task, 3)
        bar.advance(task, 0)  # a condition with nothing left to count (the runner's catch-up): no second line
    assert out.getvalue().splitlines() == [
        "[1/4] 60 B @ 50 ms, loopback, run 1/2, direct: 0:10 elapsed, about 0:30 to go",
        "[4/4] 60 B @ 50 ms, loopback, run 1/2, direct: 1:00:00 elapsed, about 0:00 to go",
    ]


def test_on_a_terminal_it_is_the_bar() -> None:
    assert isinstance(progress_bar(Console(file=io.StringIO(), force_terminal=True)), Progress)
