"""JSON log lines (one object per line) for the long-running services: the gateway and the monitor."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import TextIO


class JSONObject(str):
    """A log message that is one JSON object already (`json.dumps` of a dict of the caller's fields, the gateway's
    access log line): JSONFormatter puts its own fields before the caller's without parsing the message back."""

    __slots__ = ()


class JSONFormatter(logging.Formatter):
    """One JSON object per line; messages that are already JSON objects are merged in, not quoted."""

    def __init__(self) -> None:
        super().__init__()
        self._fields: dict[tuple[str, str], str] = {}  # (logger, level) → their part of the line, written once

    def format(self, record: logging.LogRecord) -> str:
        message = record.msg
        if type(message) is JSONObject and not record.args and not record.exc_info and len(message) > 2:
            fields = self._fields.get((record.name, record.levelname))
            if fields is None:
                fields = json.dumps({"level": record.levelname.lower(), "logger": record.name})[1:-1]
                self._fields[(record.name, record.levelname)] = fields
            return f'{{"ts": {round(record.created, 3)!r}, {fields}, {message[1:]}'
        out = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name}
        message = record.getMessage()
        try:
            parsed = json.loads(message) if message.startswith("{") else None
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            out.update(parsed)
        else:
            out["message"] = message
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


# The most a batched handler holds before it writes anyway (nginx's `access_log ... buffer=` does the same for its
# access log): ~250 of the gateway's access lines.
BATCH_BYTES = 64 << 10


class BatchedHandler(logging.StreamHandler[TextIO]):
    """JSON lines on a stream, like configure_logging's plain handler, for a service that logs a line per request
    (the gateway's access log): once a `schedule` is set, a line below WARNING waits in memory, and the waiting
    lines go out in one write when the scheduled flush comes (the gateway's: within a few tenths of a second), when
    BATCH_BYTES of them wait, when a WARNING or worse is logged (after them: the stream keeps the order), and when
    the handler is flushed or closed (logging.shutdown at exit, the gateway's close). A write(2) per line cost a
    live gateway ~15 us of CPU per request (bench/RESULTS.md, issue 39's tenth part). Without a schedule every line is
    written at once. A process killed with no chance to flush (SIGKILL) loses the lines of its last moments; a
    SIGTERM drains, and the lines go out with the close."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.schedule: Callable[[Callable[[], None]], object] | None = None  # asks for one flush() soon
        self.owner: int | None = None  # the thread the schedule belongs to (its event loop's)
        self._lines: list[str] = []
        self._bytes = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        lines = self._lines
        # Another thread's line (a timer wheel is its loop's alone) and a warning go out at once, after what waits.
        if self.schedule is not None and record.levelno < logging.WARNING and threading.get_ident() == self.owner:
            if not lines and not self._ask_for_flush():
                lines.append(line)
                self._write(record)
                return
            lines.append(line)
            self._bytes += len(line)
            if self._bytes < BATCH_BYTES:
                return
        else:
            lines.append(line)
        self._write(record)

    def _ask_for_flush(self) -> bool:
        """Once per batch, by its first line. False if the schedule failed (its loop is gone: a line logged after
        the loop stopped without its owner's close): lines go out at once from then on."""
        assert self.schedule is not None
        try:
            self.schedule(self.flush)
        except Exception:
            self.schedule = self.owner = None
            return False
        return True

    def flush(self) -> None:
        self.acquire()
        try:
            self._write(None)
        finally:
            self.release()

    def close(self) -> None:
        self.flush()  # logging.Handler.close writes nothing: a handler removed and closed keeps no line back
        super().close()

    def _write(self, record: logging.LogRecord | None) -> None:
        """Every waiting line in one write (the lock held)."""
        lines = self._lines
        if not lines:
            return
        data = lines[0] if len(lines) == 1 else "".join(lines)
        lines.clear()
        self._bytes = 0
        try:
            self.stream.write(data)
            self.stream.flush()
        except Exception:  # a closed or broken stream: logging's own rule (report it on stderr, go on)
            self.handleError(record or logging.makeLogRecord({"msg": "batched log lines lost"}))


def configure_logging(level: str, logger: str = "tokenpath", batched: bool = False) -> None:
    """JSON lines on stderr for `logger` at `level`. `batched`: the handler is a BatchedHandler, whose lines wait
    for the flush that batch_log_lines schedules (the gateway, which logs a line per request)."""
    handler = BatchedHandler(sys.stderr) if batched else logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger(logger)
    for old in root.handlers:
        old.flush()  # a batched handler replaced: its waiting lines first
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # What no line of ours prints, so no record looks it up (logging's documented optimisations; the gateway logs a
    # line per request): the caller's file and line (a walk up the stack), the thread, the process.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def batch_log_lines(schedule: Callable[[Callable[[], None]], object] | None, logger: str = "tokenpath") -> None:
    """Hands `logger`'s batched handlers the way to ask for a flush (`schedule(flush)`: call it soon, once), for
    the lines logged on this thread (its event loop's; another thread's lines go at once), or, with None, takes it
    back and writes what waits: every line is written at once again. Nothing to do for a logger configured without
    batching (a library user's handlers, the tests' capture)."""
    for handler in logging.getLogger(logger).handlers:
        if isinstance(handler, BatchedHandler):
            handler.schedule = schedule
            handler.owner = threading.get_ident() if schedule is not None else None
            if schedule is None:
                handler.flush()
