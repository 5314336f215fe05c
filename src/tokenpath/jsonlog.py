"""JSON log lines (one object per line) for the long-running services: the gateway and the monitor."""

from __future__ import annotations

import json
import logging
import sys


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


def configure_logging(level: str, logger: str = "tokenpath") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger(logger)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # What no line of ours prints, so no record looks it up (logging's documented optimisations; the gateway logs a
    # line per request): the caller's file and line (a walk up the stack), the thread, the process.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
