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

from tokenpath.errors import UsageError


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
            return self.object_line(record.created, record.name, record.levelname, message)
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

    def object_line(self, created: float, logger: str, levelname: str, message: str) -> str:
        """The line of a JSONObject message (not empty) logged at `created` (time.time()): its fields after ours."""
        fields = self._fields.get((logger, levelname))
        if fields is None:
            fields = json.dumps({"level": levelname.lower(), "logger": logger})[1:-1]
            self._fields[(logger, levelname)] = fields
        return f'{{"ts": {round(created, 3)!r}, {fields}, {message[1:]}'


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
        self._lines.append(line)
        if record.levelno >= logging.WARNING or not self._waits(line):
            self._write(record)

    def info_object(self, logger: str, message: JSONObject) -> bool:
        """`logger`'s INFO line of `message` (a JSONObject of at least one field), as logging would batch it, without
        its record (logging's LogRecord and handler chain): False, and nothing done, when this thread's lines are not
        batched or the formatter is not a JSONFormatter (log it through logging then). The caller knows the line
        reaches this handler alone (direct_handler). Why: the record, its handler chain and the fields' json.dumps
        made the gateway's access line's end block ~40 us longer, live (bench/RESULTS.md, issue 39's eleventh part)."""
        formatter = self.formatter
        if threading.get_ident() != self.owner or type(formatter) is not JSONFormatter or len(message) <= 2:
            return False  # (no owner: no schedule; "{}": format's own way, which adds no comma)
        levelname = logging.getLevelName(logging.INFO)  # what a record's levelname would be (addLevelName renames)
        line = formatter.object_line(time.time(), logger, levelname, message) + self.terminator
        self.acquire()  # another thread's line writes the batch (emit, under the lock): never between the two
        try:
            self._lines.append(line)
            if not self._waits(line):
                self._write(None)
        finally:
            self.release()
        return True

    def _waits(self, line: str) -> bool:
        """Whether `line`, just added to the batch (below WARNING), waits for the batch's flush: on its schedule's
        thread, while the batch is under BATCH_BYTES and its oldest under BATCH_MAX_AGE_S (the lock held)."""
        schedule = self.schedule
        if schedule is None or threading.get_ident() != self.owner:
            return False
        self._bytes += len(line)
        if len(self._lines) == 1:  # the batch's first line asks for its flush
            self._since = time.monotonic()
            try:
                schedule(self.flush)
                return True
            except Exception:  # its loop is gone: every line at once from now on
                self.schedule = self.owner = None
                return False
        return self._bytes < BATCH_BYTES and time.monotonic() - self._since < BATCH_MAX_AGE_S

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


def direct_handler(logger: logging.Logger, level: int) -> BatchedHandler | None:
    """The BatchedHandler that `logger`'s records at `level` reach, when it is the only handler they reach and
    logging would hand them to it (logging's own rules: the logger's level and disabled flag, logging.disable, the
    logger's filters, each handler's level and filters, propagation): a line for it may skip logging's record
    (BatchedHandler.info_object). None otherwise (log through logging): a library user's own handlers, pytest's
    capture, a filter on the logger or the handler, a Logger subclass (its own handle). A custom LogRecord factory
    is not consulted on the direct way: the gateway's logging installs none."""
    if type(logger) is not logging.Logger or logger.filters or not logger.isEnabledFor(level):
        return None  # (isEnabledFor: logging.disable and a disabled logger too)
    found: BatchedHandler | None = None
    node: logging.Logger | None = logger
    while node is not None:  # as Logger.callHandlers walks (a parent's filters are not applied to the record)
        for handler in node.handlers:
            if found is not None or type(handler) is not BatchedHandler or handler.filters or level < handler.level:
                return None
            found = handler
        if not node.propagate:
            break
        node = node.parent
    return found


LEVELS = ("debug", "info", "warning", "error")


def check_level(level: str) -> None:
    """A --log-level the commands take (logging's own refusal was a traceback): a UsageError otherwise."""
    if level.lower() not in LEVELS:
        raise UsageError(f"`log_level` {level!r}: expected {', '.join(LEVELS)}")


def configure_logging(level: str, logger: str = "tokenpath", batched: bool = False) -> None:
    """JSON lines on stderr for `logger` at `level`. `batched`: the handler is a BatchedHandler, whose lines wait
    for the flush that batch_log_lines schedules (the gateway, which logs a line per request)."""
    check_level(level)
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
