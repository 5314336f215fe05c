"""Audit lookups across workers (stub/siblings.py): a sibling answers in records the asker takes as they come, with
turns for its loop, parsing only their verdicts; a sibling is given up on when it sends nothing for
SIBLING_TIMEOUT_S, not when its whole answer takes longer; one that does not answer an all-logs lookup is named in
it. Found by review: the asker read a sibling's whole answer and parsed every write in one step on its loop (one log
of 300,000 writes), and dropped without a word a sibling whose answer took more than 2 s in all; later, that a
sibling sent nothing while it encoded one long log, that an id a worker did not answer about got the 404 of one never
seen, and that a dead worker's socket was named `unanswered` for the stub's life."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import BackgroundLoop, post
from tests.stub.test_audit_slices import _expected, _fill, _get, _one, worst_stall
from tokenpath.audit import AuditEntry, AuditReply, audit_stream
from tokenpath.errors import ProtocolError
from tokenpath.serve.http import HTTPConnection
from tokenpath.stub import app as stub_app
from tokenpath.stub import siblings
from tokenpath.stub.audit import AuditStore
from tokenpath.stub.auditslices import SLICE_WRITES, Encoded
from tokenpath.stub.config import StubConfig
from tokenpath.stub.loopshare import LoopShare
from tokenpath.stub.replywriter import ReplyWriter
from tokenpath.stub.server import StubServer
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.limits import ServerLimits

StartStub = Callable[..., StubServer]
ALL = b"GET /_tokenpath/audit HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


@pytest.fixture
def workers(
    bg: BackgroundLoop, start_stub: StartStub, tmp_path: Path
) -> Iterator[Callable[[Callable[[], asyncio.Protocol]], None]]:
    """Adds a sibling to the asking stub's audit directory: a protocol factory served on a worker socket there."""
    servers: list[asyncio.AbstractServer] = []

    def add(factory: Callable[[], asyncio.Protocol]) -> None:
        path = siblings.socket_path(str(tmp_path), 1_000_000 + len(servers))  # no pid of ours: never the asker's
        servers.append(bg.run(bg.loop.create_unix_server(factory, path)))

    yield add
    for server in servers:
        bg.call(server.close)


def _sibling(start_stub: StartStub) -> tuple[StubServer, Callable[[], asyncio.Protocol]]:
    """A second in-process stub (its own logs), as a sibling worker answers on its socket."""
    stub = start_stub()
    app, limits = stub.app, ServerLimits(max_body_bytes=stub.cfg.max_body_bytes)
    assert app is not None
    return stub, lambda: HTTPConnection(app, limits)


def test_a_sibling_s_long_log_is_answered_without_holding_the_asker_s_loop(
    bg: BackgroundLoop, start_stub: StartStub, workers: Callable[..., None], tmp_path: Path
) -> None:
    """One log of 300,000 writes held by a sibling (on the same loop: its side is sliced too): read whole and parsed
    into Write objects in one step, the asker held the loop for most of the answer."""
    asker = start_stub(audit_dir=str(tmp_path))
    sibling, factory = _sibling(start_stub)
    workers(factory)
    bg.call(_fill, sibling.audit, 1, 300_000)
    body, worst, took = worst_stall(bg, lambda: _get(asker.port, _one("s0"))[1])
    log = sibling.audit.get("s0")
    assert log is not None
    assert body == json.dumps(AuditEntry(audit_stream(log), log.snapshot()).to_json(), separators=(",", ":")).encode()
    assert worst < took / 4, f"the loop stalled {worst * 1000:.0f} ms of a {took * 1000:.0f} ms answer"


def test_every_worker_s_logs_are_one_answer_with_audit_reply_s_bytes(
    bg: BackgroundLoop, start_stub: StartStub, workers: Callable[..., None], tmp_path: Path
) -> None:
    asker = start_stub(audit_dir=str(tmp_path))
    sibling, factory = _sibling(start_stub)
    workers(factory)
    bg.call(_fill, asker.audit, 5, 20)
    bg.call(_fill, sibling.audit, 1, 1500)  # its ids s0 and running are the asker's too: a worker's own come first
    bg.call(lambda: sibling.audit.open("elsewhere", 10.0, 10**12, writes=1))
    _, body = _get(asker.port, ALL)
    both = AuditStore()
    for store in (asker.audit, sibling.audit):
        for log in store.all():
            both._logs[log.stream_id] = both._logs.get(log.stream_id, log)
    assert body == _expected(both, None)
    _, body = _get(asker.port, post("/_tokenpath/audit", {"ids": ["elsewhere", "s3", "nope"]}))
    reply = AuditReply.from_json(json.loads(body))
    assert [e.stream_id for e in reply.streams] == ["s3", "elsewhere"]  # the asker's own first
    assert reply.missing == ("nope",)


PIECES = 60


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes, gap_s: float) -> None:
    """`body` as a sibling's answer, in PIECES pieces `gap_s` apart."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
    size = -(-len(body) // PIECES)
    for i in range(0, len(body), size):
        await asyncio.sleep(gap_s)
        writer.write(body[i : i + size])
    writer.close()


def _records(*entries: Encoded) -> bytes:
    return b"".join(siblings.record_head(e) + b"".join(e.parts) for e in entries)


def _entry(stream_id: str, writes: int) -> Encoded:
    store = AuditStore()
    log = store.open(stream_id, 10.0, 10**12, writes=writes)
    for i in range(writes):
        log.record(10**12 + i * 10**7, 10**12 + i * 10**7 + 1000, 50)
    store.close(log, "complete")
    return Encoded.of(AuditEntry(audit_stream(log), log.snapshot()))


def test_a_sibling_that_answers_slowly_but_steadily_is_waited_for(
    start_stub: StartStub, workers: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its answer takes ~3 times SIBLING_TIMEOUT_S in all, a piece every twentieth of it: included, and not named
    as unanswered."""
    monkeypatch.setattr(siblings, "SIBLING_TIMEOUT_S", 1.0)
    asker = start_stub(audit_dir=str(tmp_path))
    entry = _entry("slow", 40)
    body = _records(entry)
    gap = 3 * siblings.SIBLING_TIMEOUT_S / PIECES
    workers(lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), lambda r, w: _trickle(r, w, body, gap)))
    _, answer = _get(asker.port, ALL)
    got = json.loads(answer)
    assert [e["verdict"]["stream_id"] for e in got["streams"]] == ["slow"]
    assert b"".join(entry.parts) in answer
    assert "unanswered" not in got


def test_a_sibling_that_stops_sending_is_left_out_and_named(
    bg: BackgroundLoop,
    start_stub: StartStub,
    workers: Callable[..., None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sibling that sends one whole record, then half of one, then nothing: its whole record is kept, it is named
    under `unanswered` (an all-logs lookup asks no ids, so `missing` cannot say what it held). The no-progress limit
    is the test's, not a clock's: it runs out once the asker has read every byte the sibling sent (a real 0.3 s limit
    could run out first on a loaded host, before the whole record came)."""
    asker = start_stub(audit_dir=str(tmp_path))
    bg.call(_fill, asker.audit, 2, 5)
    first, second = _records(_entry("whole", 3)), _records(_entry("cut", 3))
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(first) + len(second))
    sent = head + first + second[: len(second) // 2]  # all it will ever send
    read = [0]

    async def next_bytes(reader: asyncio.StreamReader) -> bytes:
        if read[0] == len(sent):
            raise TimeoutError  # nothing more will come: as SIBLING_TIMEOUT_S would end it
        data = await reader.read(siblings.READ_BYTES)
        read[0] += len(data)
        return data

    monkeypatch.setattr(siblings, "_next_bytes", next_bytes)

    async def stuck(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(sent)
        await reader.read()  # until the asker gives up on it
        writer.close()

    workers(lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), stuck))
    _, answer = _get(asker.port, ALL)
    got = json.loads(answer)
    assert read[0] == len(sent)
    assert [e["verdict"]["stream_id"] for e in got["streams"]] == ["s0", "s1", "running", "whole"]
    assert got["unanswered"] == ["worker-1000000"]
    assert AuditReply.from_json(got).unanswered == ("worker-1000000",)


def test_the_no_progress_limit_is_on_each_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit the test above stands in for: a read that gets nothing for SIBLING_TIMEOUT_S is a TimeoutError (a
    reader never fed: no race with a clock), one that gets bytes returns them."""

    async def scene() -> bytes:
        with pytest.raises(TimeoutError):
            await siblings._next_bytes(asyncio.StreamReader())
        reader = asyncio.StreamReader()
        reader.feed_data(siblings.KEEPALIVE)
        return await siblings._next_bytes(reader)

    monkeypatch.setattr(siblings, "SIBLING_TIMEOUT_S", 0.01)
    assert asyncio.run(scene()) == siblings.KEEPALIVE


def _body(raw: bytes) -> bytes:
    """A whole HTTP/1.1 answer's body, its chunked framing undone."""
    parser = ResponseParser()
    body = parser.feed(raw)
    assert parser.complete
    return body


def test_a_sibling_shows_progress_while_it_encodes_one_long_log(bg: BackgroundLoop) -> None:
    """One log of 300,000 writes is ~0.5 s of encoding with no record to send (its length comes last): a loaded host
    could stretch that past the asker's no-progress limit. The sibling sends a keep-alive line every KEEPALIVE_NS
    while it works; its clock is the test's (a quarter of that a read), so the count does not depend on the host."""
    ticks = itertools.count(step=siblings.KEEPALIVE_NS // 4)
    sibling = StubServer(StubConfig(port=0), clock=lambda: next(ticks))
    bg.run(sibling.start())
    try:
        bg.call(_fill, sibling.audit, 1, 20 * SLICE_WRITES)
        head, raw = _get(sibling.port, post("/_tokenpath/audit?local=1&log=1", {"ids": ["s0"]}))
    finally:
        bg.run(sibling.close())
    body = _body(head + b"\r\n\r\n" + raw)
    record = body.lstrip(siblings.KEEPALIVE)
    assert len(body) - len(record) >= 10, "no keep-alive while the log was encoded"
    log = sibling.audit.get("s0")
    assert log is not None
    reader = siblings.RecordReader()
    (entry,) = reader.feed(body)
    assert reader.between_records
    assert b"".join(entry.parts) == Encoded.of(AuditEntry(audit_stream(log), log.snapshot())).parts[0]


def test_a_sibling_s_keep_alives_are_progress_not_records(tmp_path: Path) -> None:
    """Blank lines before, between and after records: every record read, and the answer whole."""
    keepalives = siblings.KEEPALIVE * 3
    answer = keepalives + _records(_entry("a", 3)) + keepalives + _records(_entry("b", 2)) + keepalives
    found, unanswered = asyncio.run(_gone_sibling(answer, tmp_path))
    assert (found, unanswered) == (["a", "b"], [])


def test_records_read_whole_byte_by_byte_and_in_any_split() -> None:
    entries = [_entry("a", 3), _entry("b", 700), _entry("c", 0)]
    data = _records(*entries)
    for splits in ([data], [data[i : i + 1] for i in range(len(data))], [data[:37], data[37:5000], data[5000:]]):
        reader = siblings.RecordReader()
        got = [e for piece in splits for e in reader.feed(piece)]
        assert reader.between_records
        assert [(e.verdict, b"".join(e.parts)) for e in got] == [(e.verdict, b"".join(e.parts)) for e in entries]
    reader = siblings.RecordReader()
    reader.feed(data[:-1])
    assert not reader.between_records  # a body cut short is not taken as whole
    with pytest.raises(ProtocolError):
        siblings.RecordReader().feed(b'{"not": "a record"}\n')
    with pytest.raises(ProtocolError):
        siblings.RecordReader().feed(b"x" * (siblings.MAX_RECORD_HEAD + 1))


@pytest.mark.parametrize(
    "head",
    [b"[1e999, %b]\n",  # a length that is no int: OverflowError escaped, the answer never came
     b'["5", %b]\n', b"[true, %b]\n", b"[3, %b]\n",  # too short to hold an entry
     b"[" * 20_000 + b"]" * 20_000 + b"\n"],  # nested past the parser: RecursionError escaped
)  # fmt: skip
def test_a_record_head_that_is_not_one_is_a_protocol_error(head: bytes) -> None:
    verdict = json.dumps(_entry("a", 3).verdict.to_json()).encode()
    line = head % verdict if b"%b" in head else head
    with pytest.raises(ProtocolError):
        siblings.RecordReader().feed(line + b"{}")


def test_a_record_whose_length_lies_is_a_protocol_error_not_a_broken_answer() -> None:
    """Its bytes go into the public answer as they are: a length short or long by a few bytes would splice a broken
    JSON object into a 200 answer."""
    entry = _entry("a", 3)
    whole = b"".join(entry.parts)
    for wrong in (len(whole) - 5, len(whole) + 5):
        head = json.dumps([wrong, entry.verdict.to_json()]).encode() + b"\n"
        with pytest.raises(ProtocolError):
            siblings.RecordReader().feed(head + whole + b"xxxxx")  # no head after it to fail: the entry itself


async def _gone_sibling(answer: bytes, tmp_path: Path) -> tuple[list[str], list[str]]:
    """ask_siblings against one sibling that answers `answer` (a record body) and closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: %b\r\nContent-Length: %d\r\n\r\n" % (
            siblings.RECORDS_TYPE.encode(),
            len(answer),
        )
        writer.write(head + answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(serve, siblings.socket_path(str(tmp_path), 1_000_001))
    async with server:
        found, unanswered = await siblings.ask_siblings(str(tmp_path), None, True, LoopShare())
    return [e.verdict.stream_id for e in found], unanswered


def test_a_sibling_that_sends_a_broken_record_is_named_and_the_answer_still_comes(tmp_path: Path) -> None:
    """One broken sibling costs its own entries (named under `unanswered`), never the asker's whole answer."""
    broken = _records(_entry("kept", 2)) + b"[1e999, {}]\n"
    found, unanswered = asyncio.run(_gone_sibling(broken, tmp_path))
    assert found == ["kept"]
    assert unanswered == ["worker-1000001"]


def test_a_resume_in_the_same_loop_pass_as_the_stall_deadline_does_not_drop_the_client() -> None:
    """The socket's resume runs before a due stall timer in one pass, and the waiting writer (which cancels the
    timer) only after both: the stall must see that the client took the bytes."""

    class Paused:
        writing_paused, client_gone = True, False
        on_pause = on_resume = on_abort = None
        aborted = False

        def abort_connection(self) -> None:
            self.aborted = True

    async def scene() -> tuple[bool, bool]:
        response = Paused()
        writer = ReplyWriter(response, LoopShare(), stall_s=60)  # type: ignore[arg-type]
        room = asyncio.ensure_future(writer._room())
        await asyncio.sleep(0)  # the writer waits for room
        writer._resume()  # the client took the bytes ...
        writer._stalled()  # ... and the stall's deadline is due in the same pass
        return await room, response.aborted

    assert asyncio.run(scene()) == (True, False)


def test_a_siblings_answer_is_fed_to_the_reader_in_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Short records (log=0) are ~350 B: a 256 KiB read is ~750 verdicts, ~5 ms of parsing in one step, past the
    audit's 2 ms tolerance; the reader takes FEED_BYTES at a time, the loop a turn between."""
    fed: list[int] = []
    feed = siblings.RecordReader.feed

    def counted(self: siblings.RecordReader, data: bytes) -> list[Encoded]:
        fed.append(len(data))
        return feed(self, data)

    monkeypatch.setattr(siblings.RecordReader, "feed", counted)
    many = _records(*(_entry(f"s{i}", 40) for i in range(60)))
    assert len(many) > 3 * siblings.FEED_BYTES
    found, unanswered = asyncio.run(_gone_sibling(many, tmp_path))
    assert (len(found), unanswered) == (60, [])
    assert max(fed) <= siblings.FEED_BYTES


def test_a_sibling_stops_encoding_for_an_asker_that_left() -> None:
    """A keep-alive the asker does not take (it left, or was dropped) ends the encoding: AskerGone, not ~0.5 s more
    of work for nobody."""
    sent: list[bytes] = []

    async def gone(piece: bytes) -> bool:
        sent.append(piece)
        return False

    ticks = itertools.count(step=siblings.KEEPALIVE_NS)
    working = siblings.Working(LoopShare(), lambda: next(ticks), gone)
    with pytest.raises(siblings.AskerGone):
        asyncio.run(working.turn())
    assert sent == [siblings.KEEPALIVE]


def _refusing(tmp_path: Path, pid: int) -> Path:
    """A worker's socket nobody listens on (bound, then closed: the file stays), as a worker that died leaves it."""
    path = siblings.socket_path(str(tmp_path), pid)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)
    return Path(path)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_an_id_a_worker_did_not_answer_about_is_not_said_never_seen(
    start_stub: StartStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that did not answer (its socket refuses: a worker closing, its process alive) may hold the id: the
    lookup of one id says so (503, naming it as an all-logs answer names it, under `unanswered`), a bulk lookup names
    it beside `missing`. Once every worker answers about the id, the 404 is back."""
    monkeypatch.setattr(stub_app, "AUDIT_LOOKUP_WAIT_S", 0.0)  # one round of asking: later ones ask the same
    asker = start_stub(audit_dir=str(tmp_path))
    path = _refusing(tmp_path, os.getppid())  # the test's parent: alive
    name = path.stem
    head, body = _get(asker.port, _one("nope"))
    assert head.startswith(b"HTTP/1.1 503 ")
    got = json.loads(body)
    assert got["unanswered"] == [name]
    assert name in got["error"]["message"]
    assert "never seen" not in got["error"]["message"]
    _, body = _get(asker.port, post("/_tokenpath/audit", {"ids": ["nope"]}))
    reply = AuditReply.from_json(json.loads(body))
    assert (reply.missing, reply.unanswered) == (("nope",), (name,))
    path.unlink()
    head, body = _get(asker.port, _one("nope"))
    assert head.startswith(b"HTTP/1.1 404 ")
    assert "never seen" in json.loads(body)["error"]["message"]


def test_a_dead_worker_s_socket_is_named_once_then_removed(
    start_stub: StartStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its process gone, its logs went with it: the answer that finds its socket refusing names it (that answer may
    lack its streams) and removes the socket; later answers no longer ask it, nor name it for the stub's life. A
    refusing socket whose process lives (a worker closing, or between its bind and listen) is named every time and
    kept."""
    monkeypatch.setattr(stub_app, "AUDIT_LOOKUP_WAIT_S", 0.1)  # an id not found is asked for again every 20 ms
    asker = start_stub(audit_dir=str(tmp_path))
    dead = _refusing(tmp_path, _dead_pid())
    got = json.loads(_get(asker.port, ALL)[1])
    assert got["unanswered"] == [dead.stem]
    assert not dead.exists()
    assert "unanswered" not in json.loads(_get(asker.port, ALL)[1])
    dead = _refusing(tmp_path, _dead_pid())
    head, body = _get(asker.port, _one("nope"))  # named by the round that found it, not only by the last round
    assert head.startswith(b"HTTP/1.1 503 ")
    assert json.loads(body)["unanswered"] == [dead.stem]
    assert not dead.exists()
    alive = _refusing(tmp_path, os.getppid())
    for _ in range(2):
        assert json.loads(_get(asker.port, ALL)[1])["unanswered"] == [alive.stem]
    assert alive.exists()
