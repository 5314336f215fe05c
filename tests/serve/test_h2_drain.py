"""serve/h2.py at drain (RFC 9113 6.8): new streams refused, open ones run to their end, then a PING and
GOAWAY(2^31-1), and on its ACK (or after the cap) GOAWAY(the last stream taken) and the close. Frames are read with
hyperframe: the h2 library's client stops reading at the first GOAWAY (python-hyper/h2#1181)."""

from __future__ import annotations

import asyncio

import h2.errors
import h2.events
import pytest
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, PingFrame, RstStreamFrame

from tests.serve.h2harness import Recorder, client, connected, send_requests, signalling
from tokenpath.serve import h2 as serve_h2
from tokenpath.serve.h2 import DRAIN_PING, MAX_STREAM_ID, finish_drain, start_drain

NO_ERROR = h2.errors.ErrorCodes.NO_ERROR
REFUSED = h2.errors.ErrorCodes.REFUSED_STREAM


def frames(data: bytes) -> list[Frame]:
    out: list[Frame] = []
    while data:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        out.append(frame)
        data = data[9 + length :]
    return out


def goaways(found: list[Frame]) -> list[tuple[int, int]]:
    return [(f.last_stream_id, f.error_code) for f in found if isinstance(f, GoAwayFrame)]


def ping_ack(data: bytes) -> bytes:
    return PingFrame(0, flags=["ACK"], opaque_data=data).serialize()


def test_an_open_stream_finishes_whole_new_ones_are_refused_then_two_goaways_and_the_close() -> None:
    async def main() -> None:
        cli = client()
        log: list[str] = []
        app = Recorder(signalling(log))
        srv, transport = connected(cli, app)
        send_requests(cli, srv, 1)
        srv.data_received(ping_ack(DRAIN_PING))  # an ACK nobody asked for (no drain yet) changes nothing
        assert goaways(frames(transport.take())) == []
        assert start_drain(app) == 1
        assert goaways(frames(transport.take())) == []  # not while a stream is open: h2 clients would drop it
        send_requests(cli, srv, 3)  # sent before the client heard of the drain
        refused = frames(transport.take())
        assert [(f.stream_id, f.error_code) for f in refused if isinstance(f, RstStreamFrame)] == [(3, REFUSED)]
        assert len(app.requests) == 1
        assert srv.refused_streams == 1
        response = app.responses[0]
        response.write(b"data: b\n\n" + response.end_bytes(), last=True)  # the open stream runs to its end
        out = frames(transport.take())
        data = [f for f in out if isinstance(f, DataFrame) and f.stream_id == 1]
        assert data[-1].data == b"data: b\n\n"
        assert "END_STREAM" in data[-1].flags
        assert goaways(out) == [(MAX_STREAM_ID, NO_ERROR)]
        pings = [f for f in out if isinstance(f, PingFrame) and "ACK" not in f.flags]
        assert [p.opaque_data for p in pings] == [DRAIN_PING]
        assert out.index(pings[0]) < len(out) - 1
        assert isinstance(out[-1], GoAwayFrame)
        assert not transport.is_closing()
        srv.data_received(ping_ack(b"other!!!"))  # an ACK of someone else's PING changes nothing
        assert goaways(frames(transport.take())) == []
        srv.data_received(ping_ack(DRAIN_PING))  # one round trip: the last stream taken is final
        assert goaways(frames(transport.take())) == [(1, NO_ERROR)]
        assert transport.closed
        assert log == []  # no abort: the stream ended whole

    asyncio.run(main())


def test_an_idle_connection_says_goaway_at_once_and_closes_after_the_cap_without_an_ack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serve_h2, "GOAWAY_RTT_CAP_S", 0.01)

    async def main() -> None:
        cli = client()
        app = Recorder(lambda q, r: r.send(200, [], b"ok"))
        srv, transport = connected(cli, app)
        send_requests(cli, srv, 1, 3)
        transport.take()
        srv.drain()
        assert goaways(frames(transport.take())) == [(MAX_STREAM_ID, NO_ERROR)]
        send_requests(cli, srv, 5)  # crossed the first GOAWAY: refused, and not counted in the final one
        refused = frames(transport.take())
        assert [(f.stream_id, f.error_code) for f in refused if isinstance(f, RstStreamFrame)] == [(5, REFUSED)]
        assert len(app.requests) == 2
        for _ in range(200):  # bounded: 2 s at most
            await asyncio.sleep(0.01)
            if transport.closed:
                break
        assert goaways(frames(transport.take())) == [(3, NO_ERROR)]
        assert transport.closed

    asyncio.run(main())


def test_start_drain_reaches_only_its_handlers_connections_and_finish_drain_closes_the_rest() -> None:
    async def main() -> None:
        mine, other = Recorder(signalling([])), Recorder()
        cli_a, cli_b = client(), client()
        srv_a, transport_a = connected(cli_a, mine)
        srv_b, transport_b = connected(cli_b, other)
        send_requests(cli_a, srv_a, 1)  # held open: the app never ends it
        transport_a.take()
        transport_b.take()
        assert start_drain(mine) == 1
        assert srv_a.draining
        assert not srv_b.draining
        assert await finish_drain(mine, wait_s=0.02) == 1  # the stream never ended: final GOAWAY and close
        assert goaways(frames(transport_a.take())) == [(1, NO_ERROR)]
        assert transport_a.closed
        assert not transport_b.closed
        srv_b.drain()  # (not left in the live set for the tests after this one)
        srv_b.final_goaway(force=True)

    asyncio.run(main())


def test_a_client_goaway_during_the_drain_still_ends_the_connection() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder(signalling([]))
        srv, transport = connected(cli, app)
        send_requests(cli, srv, 1)
        srv.drain()
        cli.close_connection()
        srv.data_received(cli.data_to_send())
        assert transport.closed

    asyncio.run(main())
