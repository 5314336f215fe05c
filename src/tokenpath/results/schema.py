"""results.json: schema version, metadata about where and how it was measured, and every raw figure."""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

from tokenpath import __version__
from tokenpath.errors import UsageError

# 2: the exclusion rule as applied (each run's audit carries the tolerance used), certification's emitter drift,
#    per-condition exclusion shares, stub_headers in conditions and rows, kept/total per load row.
#    Version 1 files still render: every field added in 2 is read with a default.
SCHEMA_VERSION = 2
KNOWN_VERSIONS = (1, 2)


def host_metadata() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def new_document(kind: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "tool": {"name": "tokenpath", "version": __version__},
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": host_metadata(),
    }


def write(doc: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)  # a reader never sees half a file, even on Ctrl-C
    return path


def read(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "results.json"
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    version = doc.get("schema_version")
    if version not in KNOWN_VERSIONS:
        raise UsageError(f"{path}: schema_version {version!r} is not one this tokenpath knows ({KNOWN_VERSIONS})")
    return doc
