"""JSON log lines (one object per line) for the long-running services: the gateway and the monitor."""

from __future__ import annotations

import json
import logging
import select
import sys
import threading
import time
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
# The oldest a waiting line gets before the next line writes the batch, whatever happened to the flush it asked for
# (a loop that stopped without its owner's close, a timer wheel that no longer ticks).
BATCH_MAX_AGE_S = 1.0
# Each write holds whole lines and at most this much: POSIX makes a pipe write this size atomic, so the batches of
# workers sharing a pipe for stderr (systemd, docker) never tear each other's lines (one line apiece never did).
WRITE_BYTES = select.PIPE_BUF


class BatchedHandler(logging.StreamHandler[TextIO]):
    """JSON lines on a stream, like configure_logging's plain handler, for a service that logs a line per request
    (the gateway's access log): once a `schedule` is set (batch_log_lines), a line below WARNING logged on its
    thread waits in memory, and the waiting lines go out together when the scheduled flush comes (the gateway's:
    within a few tenths of a second), when BATCH_BYTES of them wait or the oldest is BATCH_MAX_AGE_S old as another
    comes, when a WARNING or worse or another thread's line is logged (after them: the stream keeps the order), and
    when the schedule changes or the handler is flushed or closed (the gateway's close, logging.shutdown at exit).
    Written in pieces of whole lines of at most WRITE_BYTES each. Without a schedule every line is written at once.
    A process killed with no chance to flush (SIGKILL) loses the lines of its last moments; a SIGTERM drains, and
    they go out with the close. Why: without a write(2) per line a live gateway's request ends in a block
    ~11 us shorter and costs ~7 us less CPU, its share of the batch's write included (bench/RESULTS.md, issue 39's
    tenth part)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.schedule: Callable[[Callable[[], None]], object] | None = None  # asks for one flush() soon
        self.owner: int | None = None  # the thread the schedule belongs to (its event loop's)
        self._lines: list[str] = []
        self._bytes = 0
        self._since = 0.0  # when the oldest waiting line was logged (time.monotonic)

    def set_schedule(self, schedule: Callable[[Callable[[], None]], object] | None) -> None:
        """Batch this thread's lines on `schedule`, or (None) write every line at once; what waits goes out first."""
        self.acquire()
        try:
            self._write(None)
            self.schedule = schedule
            self.owner = threading.get_ident() if schedule is not None else None
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        lines = self._lines
        lines.append(line)
        schedule = self.schedule
        if schedule is not None and record.levelno < logging.WARNING and threading.get_ident() == self.owner:
            self._bytes += len(line)
            if len(lines) == 1:  # the batch's first line asks for its flush
                self._since = time.monotonic()
                try:
                    schedule(self.flush)
                    return
                except Exception:  # its loop is gone: every line at once from now on
                    self.schedule = self.owner = None
            elif self._bytes < BATCH_BYTES and time.monotonic() - self._since < BATCH_MAX_AGE_S:
                return
        self._write(record)

    def flush(self) -> None:
        self.acquire()
        try:
            self._write(None)
        finally:
            self.release()

    def close(self) -> None:
        self.set_schedule(None)  # logging.Handler.close writes nothing: a handler closed keeps no line back
        super().close()

    def _write(self, record: logging.LogRecord | None) -> None:
        """Every waiting line, in writes of whole lines of at most WRITE_BYTES (the lock held)."""
        lines = self._lines
        if not lines:
            return
        pieces = [lines[0]] if len(lines) == 1 else _pieces(lines)
        lines.clear()
        self._bytes = 0
        try:
            for piece in pieces:
                self.stream.write(piece)
                self.stream.flush()
        except Exception:  # a closed or broken stream: logging's own rule (report it on stderr, go on)
            self.handleError(record or logging.makeLogRecord({"msg": "batched log lines lost"}))


def _pieces(lines: list[str]) -> list[str]:
    """`lines` joined into pieces of at most WRITE_BYTES, whole lines each (a longer line is a piece of its own).
    Lengths in characters: the JSON lines are ASCII (json.dumps escapes the rest)."""
    pieces: list[str] = []
    piece: list[str] = []
    size = 0
    for line in lines:
        if piece and size + len(line) > WRITE_BYTES:
            pieces.append("".join(piece))
            piece, size = [], 0
        piece.append(line)
        size += len(line)
    pieces.append("".join(piece))
    return pieces


def configure_logging(level: str, logger: str = "tokenpath", batched: bool = False) -> None:
    """JSON lines on stderr for `logger` at `level`. `batched`: the handler is a BatchedHandler, whose lines wait
    for the flush that batch_log_lines schedules (the gateway, which logs a line per request)."""
    handler = BatchedHandler(sys.stderr) if batched else logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger(logger)
    for old in root.handlers:
        if isinstance(old, BatchedHandler):
            old.flush()  # replaced: its waiting lines first (another handler's flush is its owner's business)
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
    back: every line is written at once again. What waits is written first, either way. Nothing to do for a logger
    configured without batching (a library user's handlers, the tests' capture)."""
    for handler in logging.getLogger(logger).handlers:
        if isinstance(handler, BatchedHandler):
            handler.set_schedule(schedule)
