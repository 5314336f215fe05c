"""The progress bar every long run shows: what it is doing, how far, how long is left."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn


def progress_bar(console: Console) -> Progress | LineProgress:
    """A bar on a terminal; anywhere else (a pipe, a file, CI) one line per step, as a bar is never seen there."""
    if not console.is_terminal:
        return LineProgress(console)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float = 0.0


class LineProgress:
    """The progress bar's calls (add_task, update, advance) as lines: each step prints what it was, how far the
    run is, the time it has taken and the time it is expected to take still (the mean step so far x steps left)."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.clock = clock
        self.started = clock()
        self._tasks: dict[TaskID, _Task] = {}

    def __enter__(self) -> LineProgress:
        self.started = self.clock()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def add_task(self, description: str, total: float | None = None) -> TaskID:
        task = TaskID(len(self._tasks))
        self._tasks[task] = _Task(description, total)
        return task

    def update(self, task_id: TaskID, *, description: str | None = None) -> None:
        if description is not None:
            self._tasks[task_id].description = description

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        if not advance:  # nothing moved (a condition whose every stream was already counted): no line says it twice
            return
        task = self._tasks[task_id]
        task.completed += advance
        self.console.print(self.line(task), markup=False, highlight=False, soft_wrap=True)

    def line(self, task: _Task) -> str:
        elapsed = self.clock() - self.started
        if not task.total:
            return f"{task.description}: {task.completed:g} done, {_duration(elapsed)} elapsed"
        left = max(task.total - task.completed, 0.0)
        expected = elapsed / task.completed * left if task.completed > 0 else None
        tail = "" if expected is None else f", about {_duration(expected)} to go"
        return f"[{task.completed:g}/{task.total:g}] {task.description}: {_duration(elapsed)} elapsed{tail}"


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
