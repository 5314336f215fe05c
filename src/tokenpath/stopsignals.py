"""SIGINT and SIGTERM as one KeyboardInterrupt, for the commands that start children in their own sessions.

`tokenpath load`, `matrix`, `sweep`, `demo` and `origin` start processes a Ctrl-C to the terminal never reaches (the
stub, proxies, relays, a real origin, each in its own session) and network namespaces. Ctrl-C ends them cleanly:
the KeyboardInterrupt unwinds the ExitStacks that stop every child. SIGTERM (a CI job's `timeout`, systemd, a
container stop) had Python's default action instead: the process died at once and left every child and every
namespace behind. StopSignals makes SIGTERM end them exactly as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """SIGINT and SIGTERM while a command runs, in the main thread: the first raises KeyboardInterrupt (the command
    keeps what it measured, writes its results with `interrupted`, stops every child it started: stub, proxies,
    client processes, origin, namespaces); later ones are ignored, so that cleanup is never cut short. SIGTERM's
    default killed the run at once and left its children running (their own sessions). A load client loop handles
    them itself while it runs (load/worker.run_worker): `fired` is then set by the runner when it stops."""

    def __init__(self) -> None:
        self.fired = False
        self._previous: dict[int, Any] = {}
        self._hold: Callable[[], bool] | None = None  # set inside held(): may a stop land now?
        self._pending = False  # a stop came inside held(): raised when it ends

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.fired:
            return
        self.fired = True
        if self._hold is not None and not self._hold():
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self, until: Callable[[], bool] | None = None) -> Iterator[None]:
        """A block a stop must not land in: it spawns a child whose stop is not registered yet (a KeyboardInterrupt
        inside Popen, or just after it returned, left the child running with nothing to stop it). A stop that
        comes in it is raised when the block ends, over whatever the block raised; at once if `until()` says the
        child can be stopped already (its stop registered: a slow start is not waited for)."""
        self._hold = until or _never
        try:
            yield
        finally:
            self._hold = None
            if self._pending:
                self._pending = False
                raise KeyboardInterrupt  # the stop wins over the block's own error


def _never() -> bool:
    return False
