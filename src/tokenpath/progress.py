"""The progress bar every long run shows: what it is doing, how far, how long is left; and the one rule for a name in
the terminal's markup (`escaped`, `styled`), which every rich table and line of ours follows."""

from __future__ import annotations

import re
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
        TextColumn("{task.description}", markup=False),  # a condition's or a target's label: its text, as typed
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


# A "[" and the backslashes before it (rich.markup reads both), and what makes that "[" open a tag to rich: a letter,
# "#", "/" or "@", then a "]" before any other "[" (rich.markup.RE_TAGS).
_BRACKET = re.compile(r"(\\*)\[")
_TAG = re.compile(r"[a-z#/@][^\[]*?\]")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but line end and tab, DEL, C1


def printable(value: object) -> str:
    """`value` with each control character but a line end or a tab shown as its escape (`\\x1b`): for text printed
    without markup (an error line) that came from a peer or a user's file."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", str(value))


def one_line(value: object) -> str:
    """printable(), its line ends escaped too: a peer's words inside a line of ours, where a line of its own could
    read as ours (a forged "also: ..." under an error)."""
    return printable(value).replace("\r", "\\r").replace("\n", "\\n")


def escaped(value: object) -> str:
    """`value` (a name or label from a user's file or flag, a peer's answer, a field of a results.json) as rich
    markup that shows exactly its text, inside a line or a table cell of ours: `[red]x` is not red, `x[/]` and
    `[/bold]` raise no MarkupError, `[link=...]` makes no hyperlink, and a backslash before a "[" stays.
    rich.markup.escape alone leaves a backslash before a "[" that opens no tag for rich to eat (`\\[` shows `[`).
    Text without a "[" is returned as it is, so an ordinary name prints (and is highlighted) exactly as before. A
    control character other than a line end or a tab is shown as its escape (`\x1b`): an ESC sequence in a name
    or a directory would clear or recolour the terminal (rich passes ESC through)."""
    text = printable(value)

    def one(match: re.Match[str]) -> str:
        backslashes = len(match[1])
        # Before a tag: doubled, and one more that escapes it. Before any other "[": one more, which rich removes.
        tag = _TAG.match(text, match.end()) is not None
        return "\\" * (2 * backslashes + 1 if tag else backslashes + 1) + "["

    return _BRACKET.sub(one, text)


def styled(value: object, style: str) -> str:
    """`[style]value[/]`, the value escaped: a backslash it ends with stays its own, never escaping the closing tag."""
    text = escaped(value)
    trailing = text[len(text.rstrip("\\")) :]
    return f"[{style}]{text}{trailing}[/]"
