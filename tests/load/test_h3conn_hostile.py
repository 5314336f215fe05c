"""load --http3's client (load/h3conn.py) against hostile QUIC servers: a tiny aioquic HTTP/3 server on loopback, run
in a thread, that answers the head and then resets the stream, closes the connection with an error mid-body, sends
past the stream's flow-control window, or streams content forever. Each stream goes through the worker's one_stream
(what `load` counts): always an error, never a complete stream nor a first token (so never a fast one), and every
test bounded in time by the load's own timeouts."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived
from aioquic.quic.events import QuicEvent

from tests.quicserver import start_quic
from tokenpath.load import worker
from tokenpath.load.worker import StreamResult, Workload, _probe_config, one_stream
from tokenpath.probe.transport import TLSOptions
from tokenpath.wire.ending import EndKind
from tokenpath.wire.httpversion import HttpVersion

HEAD = [(b":status", b"200"), (b"content-type", b"text/event-stream")]
ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
H3_INTERNAL_ERROR = 0x102
H3_REQUEST_CANCELLED = 0x10C


class _Hostile(QuicConnectionProtocol):
    """Answers each request with the head, then does `then` to it."""

    then = "reset"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.h3 = H3Connection(self._quic)
        self.tasks: set[asyncio.Future[None]] = set()  # held, so none is collected while it runs

    def quic_event_received(self, event: QuicEvent) -> None:
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, DataReceived) and h3_event.stream_ended:
                self.tasks.add(asyncio.ensure_future(self._respond(h3_event.stream_id)))

    async def _respond(self, sid: int) -> None:
        self.h3.send_headers(sid, HEAD)
        self.transmit()
        if self.then == "reset":  # the head, then the stream reset
            self._quic.reset_stream(sid, H3_REQUEST_CANCELLED)
        elif self.then == "close":  # a first frame, then the connection closed with an error
            self.h3.send_data(sid, ROLE, end_stream=False)
            self.transmit()
            await asyncio.sleep(0.05)
            self._quic.close(error_code=H3_INTERNAL_ERROR, reason_phrase="backend exploded")
        elif self.then == "overrun":  # bytes from 1 MiB on at once, past the client's 1 MiB stream window
            stream = self._quic._streams[sid]
            stream.max_stream_data_remote = self._quic._remote_max_data = 1 << 40  # our sender's check, off
            self.h3.send_data(sid, b"x" * (2 << 20), end_stream=False)
            start = stream.sender._pending[0].start
            stream.sender._pending.subtract(start, start + (1 << 20))  # the window's worth skipped, never sent
        elif self.then == "forever":  # content frames, within the windows, that never end
            self.h3.send_data(sid, ROLE, end_stream=False)
            while not self._quic._close_pending and self._quic._close_event is None:
                self.h3.send_data(sid, CONTENT * 64, end_stream=False)
                self.transmit()
                await asyncio.sleep(0.005)
        self.transmit()


@dataclass
class Server:
    port: int
    cacert: str


def _start(tmp_path: Path, then: str) -> tuple[Server, Callable[[], None]]:
    running = start_quic(tmp_path, type("Server", (_Hostile,), {"then": then}))
    return Server(running.port, running.cacert), lambda: running.stop(cancel_tasks=True)


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Callable[[str], Server]]:
    stops: list[Callable[[], None]] = []

    def start(then: str) -> Server:
        server, stop = _start(tmp_path, then)
        stops.append(stop)
        return server

    yield start
    for stop in stops:
        stop()


def _one_stream(
    server: Server, bound_s: float = 60, timeout_s: float = worker.STREAM_TIMEOUT_S
) -> tuple[StreamResult, float]:
    """One load stream over HTTP/3 to `server`, as the worker runs it; and how long it took. `bound_s` only keeps a
    broken guard from hanging the test: the load's own timeouts end every stream far sooner."""
    work = Workload(
        f"https://127.0.0.1:{server.port}/v1",
        "m",
        "p",
        5,
        1,
        0.0,
        1.0,
        tls=TLSOptions(cacert=server.cacert),
        http_version=HttpVersion.HTTP3,
        stream_timeout_s=timeout_s,
    )

    async def main() -> StreamResult:
        return await asyncio.wait_for(one_stream(_probe_config(work), "127.0.0.1", server.port, work), bound_s)

    started = time.monotonic()
    result = asyncio.run(main())
    return result, time.monotonic() - started


def _cut_never_fast(result: StreamResult) -> None:
    assert result.error is not None
    assert result.end is EndKind.CUT_ERROR
    assert result.first_content_t_ns is None  # never in the TTFT figures
    assert result.first_token_t_ns is None


def test_a_stream_reset_after_the_head_is_cut(
    hostile: Callable[[str], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guard: h3conn's StreamReset branch. Without it the reset goes unseen and the stream waits out the load's
    stream timeout (here 20 s): a bare TimeoutError with no end, not a reset."""
    monkeypatch.setattr(worker, "STREAM_TIMEOUT_S", 20.0)
    result, took = _one_stream(hostile("reset"))
    _cut_never_fast(result)
    assert result.error is not None
    assert "reset the HTTP/3 stream" in result.error
    assert f"{H3_REQUEST_CANCELLED:#x}" in result.error
    assert took < 15


def test_a_connection_closed_with_an_error_mid_body_is_cut_with_its_words(
    hostile: Callable[[str], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guard: h3conn's ConnectionTerminated branch (_terminated): the error's code and reason phrase in the error.
    Without it the stream waits out the load's stream timeout (here 20 s): a bare TimeoutError."""
    monkeypatch.setattr(worker, "STREAM_TIMEOUT_S", 20.0)
    result, _ = _one_stream(hostile("close"))
    _cut_never_fast(result)
    assert result.error is not None
    assert "the QUIC connection ended before the HTTP/3 stream did" in result.error
    assert "backend exploded" in result.error
    assert f"{H3_INTERNAL_ERROR:#x}" in result.error


def test_data_past_the_stream_s_flow_control_window_is_cut(hostile: Callable[[str], Server]) -> None:
    """aioquic's own check, then h3conn's ConnectionTerminated branch: bytes past the window the client gave are a
    FLOW_CONTROL_ERROR, the client closes the connection itself, and the stream is a cut naming it."""
    result, _ = _one_stream(hostile("overrun"))
    _cut_never_fast(result)
    assert result.error is not None
    assert "the QUIC connection ended before the HTTP/3 stream did" in result.error
    assert "0x3 Over stream data limit" in result.error  # FLOW_CONTROL_ERROR, aioquic's words


def test_a_stream_that_never_ends_is_ended_by_the_load_s_own_timeout(
    hostile: Callable[[str], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guard: h3_stream's bound on the whole stream (timeout_s, the workload's stream_timeout_s). Content forever,
    within the windows: the stream ends at the timeout by itself, reported with how much it sent, never complete;
    without the bound the test's own outer bound (60 s) fails it, without the words it is a bare "TimeoutError"."""
    result, took = _one_stream(hostile("forever"), timeout_s=3.0)
    assert result.error is not None
    assert "the HTTP/3 stream did not end within 3 s" in result.error
    assert worker._error_kind(result.error) == "the HTTP/3 stream did not end within 3 s"  # one kind, any count
    body_bytes = re.search(r": (\d+) body bytes by then", result.error)
    assert body_bytes is not None
    assert int(body_bytes.group(1)) > 0  # it did stream: content, not silence
    assert result.end is not EndKind.COMPLETE
    assert result.first_content_t_ns is None  # a stream the load did not count as one: no TTFT from it
    assert 2.5 < took < 45
