"""JSON log lines (one object per line) for the long-running services: the gateway and the monitor."""

from __future__ import annotations

import json
import logging
import sys


class JSONFormatter(logging.Formatter):
    """One JSON object per line; messages that are already JSON objects are merged in, not quoted."""

    def format(self, record: logging.LogRecord) -> str:
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
