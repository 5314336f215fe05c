"""Audit lookups across stub workers: each worker keeps its own logs in memory and also answers on a private
Unix socket in a shared directory; a lookup that misses locally asks every sibling there.

This costs nothing per stream (a file per finished stream, tried first, blocked the loop for tens of ms when
hundreds of streams ended in the same tick) and a few ms per audit request, which is rare.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

from tokenpath.audit import AuditEntry, AuditReply
from tokenpath.errors import ProtocolError
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.request import build_request

SIBLING_TIMEOUT_S = 2.0  # a worker that cannot answer by then is left out of the answer, not waited on


def socket_path(peer_dir: str, pid: int | None = None) -> str:
    return str(Path(peer_dir) / f"worker-{pid or os.getpid()}.sock")


async def ask_siblings(peer_dir: str, ids: list[str] | None, with_log: bool) -> list[AuditEntry]:
    """Audit entries (verdict, and log when asked) that other workers hold for `ids` (None: all of theirs)."""
    own = socket_path(peer_dir)
    paths = [p for p in _sibling_sockets(peer_dir) if p != own]
    answers = await asyncio.gather(*(_ask(p, ids, with_log) for p in paths))
    return [entry for answer in answers for entry in answer]


def _sibling_sockets(peer_dir: str) -> list[str]:
    # A directory listing of a few entries on a local disk: not worth a thread hop.
    return [str(p) for p in Path(peer_dir).glob("worker-*.sock")]


async def _ask(path: str, ids: list[str] | None, with_log: bool) -> tuple[AuditEntry, ...]:
    target = f"/_tokenpath/audit?local=1&log={int(with_log)}"
    if ids is None:
        request = build_request("GET", "worker", target)
    else:
        body = json.dumps({"ids": ids}).encode()
        request = build_request("POST", "worker", target, body=body, headers=[("Content-Type", "application/json")])
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), SIBLING_TIMEOUT_S)
        writer.write(request)
        raw = await asyncio.wait_for(reader.read(), SIBLING_TIMEOUT_S)
    except (OSError, TimeoutError):
        return ()  # a worker that is gone or stuck: its streams are reported missing
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    parser = ResponseParser()
    try:
        body = parser.feed(raw)
        parser.feed_eof()
        return AuditReply.from_json(json.loads(body)).streams
    except (ValueError, KeyError, TypeError, ProtocolError):
        return ()
