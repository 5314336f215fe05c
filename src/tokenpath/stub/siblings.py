"""Audit lookups across stub workers: each worker keeps its own logs in memory and also answers on a private
Unix socket in a shared directory; a lookup that misses locally asks every sibling there.

This costs nothing per stream (a file per finished stream, tried first, blocked the loop for tens of ms when
hundreds of streams ended in the same tick) and a few ms per audit request, which is rare.

A sibling answers (`?local=1`) in records, not in the public answer's JSON: each entry as a line `[length, verdict]`
then the entry's JSON bytes, written as soon as each log is encoded. The asker parses only the verdicts (what it
decides on and sums) and keeps each entry's bytes as they came, for its own answer: one log of 300,000 writes parsed
into Write objects held the asker's loop ~1 s, and the whole answer read before any of it was parsed. A sibling
counts as stuck when it sends nothing for SIBLING_TIMEOUT_S, not when its whole answer takes longer: a large one
does, written in slices. While it encodes one long entry (~0.5 s for 300,000 writes, longer on a loaded host) it has
no record to send: it sends a blank line (KEEPALIVE) between records every KEEPALIVE_NS instead.

A worker that died leaves its socket behind, refusing connections: the first worker to find it so, its process gone,
removes it and names it under `unanswered` in that one answer (its logs died with it); later answers no longer ask it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from tokenpath.audit import AuditVerdict
from tokenpath.clock import Clock
from tokenpath.errors import NetworkError, ProtocolError
from tokenpath.serve.http import compact_json
from tokenpath.stub.auditslices import Encoded
from tokenpath.stub.loopshare import LoopShare
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.request import build_request

SIBLING_TIMEOUT_S = 2.0  # a worker that sends nothing for this long is left out of the answer, not waited on
RECORDS_TYPE = "application/x-tokenpath-audit-records"
READ_BYTES = 256 << 10  # what the asker takes from a sibling's socket a read ...
FEED_BYTES = 32 << 10  # ... fed to the record reader this much at a time, with turns for the loop between: short
# records (log=0: ~350 B each) take ~5 ms of verdict parsing per 256 KiB, past the audit's 2 ms tolerance
ENTRY_START = b'{"verdict":'  # how every entry's JSON begins (AuditEntry.to_json: its verdict first)
MAX_RECORD_HEAD = 64 << 10  # a record's line (its length and verdict: ~300 B) longer than this is not one
KEEPALIVE = b"\n"  # a blank line between records: the sibling is still at work on its next entry
KEEPALIVE_NS = round(SIBLING_TIMEOUT_S * 1e9 / 10)  # how often a sibling at work on one entry says so


def socket_path(peer_dir: str, pid: int | None = None) -> str:
    return str(Path(peer_dir) / f"worker-{pid or os.getpid()}.sock")


def record_head(entry: Encoded) -> bytes:
    """The line before an entry's bytes in a sibling's answer."""
    return compact_json([entry.nbytes, entry.verdict.to_json()]) + b"\n"


class AskerGone(NetworkError):
    """The asking worker left (or was dropped) while this sibling encoded an entry for it (caught where the answer
    is written: it ends that answer, never the worker)."""


class Working:
    """The turns of a sibling's answer while it encodes one entry (stub/auditslices.py Turns), each also a keep-alive
    line to the asker once KEEPALIVE_NS have passed since the last: the record can only be sent once it is whole, and
    the asker gives up on a sibling that sends nothing for SIBLING_TIMEOUT_S. Raises AskerGone when the asker left."""

    def __init__(self, share: LoopShare, clock: Clock, send: Callable[[bytes], Awaitable[bool]]) -> None:
        self._share = share
        self._clock = clock
        self._send = send  # False: the asker is gone
        self._last = clock()
        self.keepalives = 0

    async def turn(self) -> None:
        await self._share.turn()
        now = self._clock()
        if now - self._last >= KEEPALIVE_NS:
            self._last = now
            self.keepalives += 1
            if not await self._send(KEEPALIVE):
                raise AskerGone


class RecordReader:
    """A sibling's answer body, fed as it arrives (sans-IO): the entries whose bytes have all come."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._verdict: AuditVerdict | None = None  # the record whose bytes are coming
        self._left = 0
        self._parts: list[bytes] = []
        self._whole: list[Encoded] = []  # read whole, not yet taken (kept when a later record is broken)

    @property
    def between_records(self) -> bool:
        """No record begun and not finished: a body that ends here is whole."""
        return self._verdict is None and not self._line

    def feed(self, data: bytes) -> list[Encoded]:
        """Raises ProtocolError on bytes that are not records (the whole records before them: `taken()`)."""
        out = self._whole
        pos, end = 0, len(data)
        while pos < end:
            if self._verdict is None:
                newline = data.find(b"\n", pos)
                stop = end if newline < 0 else newline
                self._line += data[pos:stop]
                if len(self._line) > MAX_RECORD_HEAD:
                    raise ProtocolError("a sibling's audit record head is too long")
                if newline < 0:
                    break
                pos = newline + 1
                if self._line:  # else a blank line (KEEPALIVE): no record, the sibling still at work
                    self._head(bytes(self._line))
                    self._line.clear()
            else:
                take = data[pos : pos + self._left]
                pos += len(take)
                self._parts.append(take)
                self._left -= len(take)
                if not self._left:
                    parts = tuple(self._parts)
                    # An entry is one JSON object from `{"verdict":` to its `}`: a length that lies (a sibling's
                    # bug) would otherwise splice a broken object into the public answer.
                    if not _one_entry(parts):
                        raise ProtocolError("a sibling's audit record does not hold one entry")
                    out.append(Encoded(self._verdict, parts))
                    self._verdict, self._parts = None, []
        return self.taken()

    def taken(self) -> list[Encoded]:
        """The records read whole since the last call."""
        whole, self._whole = self._whole, []
        return whole

    def _head(self, line: bytes) -> None:
        try:
            nbytes, verdict = json.loads(line)
            self._verdict = AuditVerdict.from_json(verdict)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # RecursionError: nested past the parser
            raise ProtocolError(f"a sibling's audit record head is not [length, verdict]: {exc}") from None
        if type(nbytes) is not int or nbytes < len(ENTRY_START) + 1:  # 1e999, "5", true: not a length
            raise ProtocolError(f"a sibling's audit record has no entry's length: {nbytes!r}")
        self._left = nbytes


def _one_entry(parts: tuple[bytes, ...]) -> bool:
    """The bytes (in the pieces they came in) begin as an entry does and end with a closing brace."""
    prefix = b""
    for part in parts:
        prefix += part[: len(ENTRY_START) - len(prefix)]
        if len(prefix) == len(ENTRY_START):
            break
    return prefix == ENTRY_START and parts[-1].endswith(b"}")


async def ask_siblings(
    peer_dir: str, ids: list[str] | None, with_log: bool, share: LoopShare
) -> tuple[list[Encoded], list[str]]:
    """Audit entries (verdict, and log when asked) that other workers hold for `ids` (None: all of theirs), and the
    workers that did not answer in whole (named by their socket's file name; their entries that came are kept; one
    found dead is named, and its socket removed)."""
    own = socket_path(peer_dir)
    paths = [p for p in _sibling_sockets(peer_dir) if p != own]
    answers = await asyncio.gather(*(_ask(p, ids, with_log, share) for p in paths))  # _ask never raises
    entries = [entry for found, _ in answers for entry in found]
    return entries, [Path(path).stem for path, (_, whole) in zip(paths, answers, strict=True) if not whole]


def _sibling_sockets(peer_dir: str) -> list[str]:
    # A directory listing of a few entries on a local disk: not worth a thread hop.
    return sorted(str(p) for p in Path(peer_dir).glob("worker-*.sock"))


def _pid(path: str) -> int | None:
    """The pid in a worker socket's name (socket_path)."""
    digits = Path(path).stem.removeprefix("worker-")
    return int(digits) if digits.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, someone else's
        return True
    return True


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _remove_if_dead(path: str, inode: int | None) -> None:
    """A socket that refused a connection, left by a worker whose process is gone, is removed, so that no worker
    asks it again. Not when the process lives (a worker between its socket's bind and listen, or closing), nor when
    the file is no longer the one refused (a new worker's, bound since)."""
    pid = _pid(path)
    if pid is None or inode is None or _alive(pid):
        return
    with contextlib.suppress(OSError):  # removed by another worker first
        if _inode(path) == inode:
            os.unlink(path)


async def _next_bytes(reader: asyncio.StreamReader) -> bytes:
    """The sibling's next bytes (b"": its end); TimeoutError when it sends nothing for SIBLING_TIMEOUT_S (stuck)."""
    return await asyncio.wait_for(reader.read(READ_BYTES), SIBLING_TIMEOUT_S)


async def _ask(path: str, ids: list[str] | None, with_log: bool, share: LoopShare) -> tuple[list[Encoded], bool]:
    """The sibling's entries as they came, and whether its answer came whole."""
    target = f"/_tokenpath/audit?local=1&log={int(with_log)}"
    if ids is None:
        request = build_request("GET", "worker", target)
    else:
        body = json.dumps({"ids": ids}).encode()
        request = build_request("POST", "worker", target, body=body, headers=[("Content-Type", "application/json")])
    connected = await _connect(path)
    if connected is None:
        return [], False
    reader, writer = connected
    try:
        return await _exchange(reader, writer, request, share)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _connect(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """None: the sibling cannot be reached (a socket left by a worker that died is removed)."""
    inode = _inode(path)
    try:
        return await asyncio.wait_for(asyncio.open_unix_connection(path), SIBLING_TIMEOUT_S)
    except ConnectionRefusedError:  # nothing listens there: a worker died (or is closing, or not yet listening)
        _remove_if_dead(path, inode)
    except (OSError, TimeoutError):
        pass
    return None


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, share: LoopShare
) -> tuple[list[Encoded], bool]:
    entries: list[Encoded] = []
    parser, records = ResponseParser(), RecordReader()
    try:
        writer.write(request)
        while not parser.complete:
            data = await _next_bytes(reader)
            if not data:
                parser.feed_eof()
                break
            body = parser.feed(data)
            if parser.head is not None and parser.head.status != 200:
                return entries, False
            for at in range(0, len(body), FEED_BYTES):
                entries += records.feed(body[at : at + FEED_BYTES])
                await share.turn()
    except (OSError, TimeoutError, ProtocolError):
        return entries + records.taken(), False  # gone, stuck or broken: what came whole is kept, it is named
    return entries, parser.complete and records.between_records
