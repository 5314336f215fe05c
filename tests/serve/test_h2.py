"""serve/h2.py: requests in at every split, the relay rule out (one write = DATA now, split only by the peer's frame
size and windows), per-stream flow control mapped to the producer's pause/resume, resets, admission."""

from __future__ import annotations

import asyncio
import json

import h2.errors
import h2.events
import h2.settings
import pytest
from hyperframe.frame import DataFrame, PingFrame, PriorityFrame, SettingsFrame, WindowUpdateFrame

from tests.serve.h2harness import (
    Recorder,
    client,
    connected,
    exchange,
    request_headers,
    send_requests,
    server,
    signalling,
)
from tests.wire.battery import splits
from tokenpath.serve.admission import Admitted, BodyBudget, Refusal
from tokenpath.serve.h2 import PREFACE, H2Response
from tokenpath.serve.h2limits import H2Limits
from tokenpath.serve.http import Request
from tokenpath.wire.apis import Api
from tokenpath.wire.limits import ServerLimits


def sse(request: Request, response: H2Response) -> None:
    head = response.start_stream(200, [("Content-Type", "text/event-stream"), ("Connection", "keep-alive")])
    response.write(head + response.frame(b"data: a\n\n"))
    response.write(response.frame(b"data: b\n\n") + response.end_bytes(), last=True)


def events_of(kind: type, events: list[h2.events.Event]) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


async def settle(turns: int = 50) -> None:
    """Runs the loop until a chain of ready callbacks (a task, its awaits, its done-callback) is through: counted in
    loop turns, not wall time. A 10 ms sleep woke the test first when the process was descheduled mid-chain."""
    for _ in range(turns):
        await asyncio.sleep(0)


def test_a_request_at_every_split_reaches_the_handler_once_whole() -> None:
    cli = client()
    extra = [(b"content-type", b"application/json"), (b"cookie", b"a=1"), (b"cookie", b"b=2")]
    cli.send_headers(1, [*request_headers("/v1/chat/completions?x=1"), *extra])
    cli.send_data(1, b'{"model":"m"}', end_stream=True)
    raw = cli.data_to_send()

    async def main() -> None:
        for pieces in splits(raw):
            app = Recorder(sse)
            srv, _ = server(app)
            for piece in pieces:
                if piece:
                    srv.data_received(piece)
            assert len(app.requests) == 1, pieces
            req = app.requests[0]
            assert (req.method, req.path, req.query, req.http_version) == ("POST", "/v1/chat/completions", "x=1", "2")
            assert req.body == b'{"model":"m"}'
            assert req.header("host") == "gw.test"
            assert req.header("content-type") == "application/json"
            assert [v for k, v in req.headers if k == "cookie"] == ["a=1; b=2"]  # crumbs joined for HTTP/1.1
            assert not any(k.startswith(":") for k, _ in req.headers)

    asyncio.run(main())


def test_head_and_first_frame_leave_in_one_write_and_each_write_is_one_data_frame_now() -> None:
    async def main() -> None:
        cli = client()
        held: list[H2Response] = []

        def start(request: Request, response: H2Response) -> None:
            head = response.start_stream(200, [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "x")])
            assert head == b""
            held.append(response)
            response.write(head + b"data: first\n\n")

        srv, transport = server(Recorder(start))
        srv.data_received(cli.data_to_send())
        transport.take()
        cli.send_headers(1, request_headers(), end_stream=True)
        srv.data_received(cli.data_to_send())
        assert len(transport.writes) == 1  # HEADERS + DATA in one socket write
        events = exchange(cli, transport)
        (resp,) = events_of(h2.events.ResponseReceived, events)
        assert (b"transfer-encoding", b"x") not in resp.headers  # connection-specific: never in HTTP/2
        assert [e.data for e in events_of(h2.events.DataReceived, events)] == [b"data: first\n\n"]
        response = held[0]
        for i in range(3):
            response.write(b"data: %d\n\n" % i)
            data = events_of(h2.events.DataReceived, exchange(cli, transport))
            assert [e.data for e in data] == [b"data: %d\n\n" % i]  # at once, alone
        response.write(b"", last=True)
        assert events_of(h2.events.StreamEnded, exchange(cli, transport))
        assert response.finished

    asyncio.run(main())


def test_a_write_is_split_only_by_the_peers_max_frame_size() -> None:
    async def main() -> None:
        cli = client()
        big = b"x" * 40_000
        srv, transport = server(Recorder(lambda q, r: r.write(r.start_stream(200, []) + big, last=True)))
        cli.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        srv.data_received(cli.data_to_send())
        cli.send_headers(1, request_headers(), end_stream=True)
        cli.increment_flow_control_window(1 << 20)
        srv.data_received(cli.data_to_send())
        events = exchange(cli, transport)
        sizes = [len(e.data) for e in events_of(h2.events.DataReceived, events)]
        assert sizes == [16_384, 16_384, 40_000 - 2 * 16_384]
        assert events_of(h2.events.StreamEnded, events)

    asyncio.run(main())


def test_a_closed_window_pauses_only_its_own_stream_and_an_update_resumes_it() -> None:
    async def main() -> None:
        cli = client(initial_window_size=100)
        log: list[str] = []
        app = Recorder(signalling(log, b"a" * 250))
        srv, transport = connected(cli, app)  # the client's ACK of the server's SETTINGS leaves with the requests
        send_requests(cli, srv, 1, 3)
        got = {1: 0, 3: 0}
        for e in events_of(h2.events.DataReceived, exchange(cli, transport)):
            got[e.stream_id] += len(e.data)
        assert got == {1: 100, 3: 100}  # each stream's window, no more
        assert sorted(log) == ["pause 1", "pause 3"]
        cli.increment_flow_control_window(1000, stream_id=3)  # stream 3 only
        srv.data_received(cli.data_to_send())
        for e in events_of(h2.events.DataReceived, exchange(cli, transport)):
            got[e.stream_id] += len(e.data)
        assert got == {1: 100, 3: 250}
        assert log[-1] == "resume 3"
        assert "resume 1" not in log
        app.responses[0].write(b"more")  # stream 1's: buffered behind the closed window, not sent
        assert not events_of(h2.events.DataReceived, exchange(cli, transport))

    asyncio.run(main())


def test_a_full_socket_pauses_every_stream_and_resumes_them() -> None:
    async def main() -> None:
        cli = client()
        log: list[str] = []
        srv, _ = server(Recorder(signalling(log, b"x")))
        srv.data_received(cli.data_to_send())
        send_requests(cli, srv, 1, 3)
        srv.pause_writing()
        assert sorted(log) == ["pause 1", "pause 3"]
        srv.resume_writing()
        assert sorted(log[2:]) == ["resume 1", "resume 3"]

    asyncio.run(main())


def test_a_stream_opened_on_a_paused_connection_says_so_and_is_resumed_with_the_others() -> None:
    """The pause reached the streams open then; one opened after asks (writing_paused), and the resume reaches it."""

    async def main() -> None:
        cli = client()
        log: list[str] = []
        asked: list[bool] = []

        def reply(request: Request, response: H2Response) -> None:
            signalling(log, b"x")(request, response)
            asked.append(response.writing_paused)

        srv, _ = server(Recorder(reply))
        srv.data_received(cli.data_to_send())
        send_requests(cli, srv, 1)
        srv.pause_writing()
        send_requests(cli, srv, 3)
        assert asked == [False, True]
        assert log == ["pause 1"]
        srv.resume_writing()
        assert sorted(log[1:]) == ["resume 1", "resume 3"]

    asyncio.run(main())


def test_rst_stream_from_the_client_aborts_its_exchange_only() -> None:
    async def main() -> None:
        cli = client()
        log: list[str] = []
        app = Recorder(signalling(log))
        srv, transport = connected(cli, app)
        send_requests(cli, srv, 1, 3)
        exchange(cli, transport)
        cli.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        srv.data_received(cli.data_to_send())
        assert log == ["abort 1"]
        assert app.responses[0].client_gone
        assert not app.responses[1].client_gone
        app.responses[0].write(b"late")  # dropped, never an error
        app.responses[1].write(b"data: b\n\n", last=True)
        events = exchange(cli, transport)
        assert [e.stream_id for e in events_of(h2.events.StreamEnded, events)] == [3]

    asyncio.run(main())


def test_a_reset_in_the_same_read_as_the_request_never_reaches_the_handler() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder(sse)
        srv, _ = server(app)
        cli.send_headers(1, request_headers(), end_stream=True)
        cli.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        srv.data_received(cli.data_to_send())
        assert app.requests == []  # the rapid-reset pattern costs no request's work

    asyncio.run(main())


def test_streams_past_the_limit_are_refused_and_the_connection_lives() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder()  # holds every stream open
        srv, transport = server(app, h2limits=H2Limits(max_concurrent_streams=2))
        srv.data_received(cli.data_to_send())  # the client never reads our SETTINGS: it opens a third stream
        for sid in (1, 3, 5):
            cli.send_headers(sid, request_headers(), end_stream=True)
        srv.data_received(cli.data_to_send())
        events = exchange(cli, transport)
        resets = events_of(h2.events.StreamReset, events)
        assert [(e.stream_id, e.error_code) for e in resets] == [(5, h2.errors.ErrorCodes.REFUSED_STREAM)]
        assert not events_of(h2.events.ConnectionTerminated, events)
        assert len(app.requests) == 2
        assert srv.refused_streams == 1
        app.responses[0].send(200, [], b"ok")
        exchange(cli, transport)
        cli.send_headers(7, request_headers(), end_stream=True)  # a slot is free again
        srv.data_received(cli.data_to_send())
        assert len(app.requests) == 3

    asyncio.run(main())


def goaway(transport_events: list[h2.events.Event]) -> h2.events.ConnectionTerminated | None:
    found = events_of(h2.events.ConnectionTerminated, transport_events)
    return found[0] if found else None


@pytest.mark.parametrize("flood", ["ping", "settings", "reset"])
def test_control_floods_end_the_connection_with_enhance_your_calm(flood: str) -> None:
    async def main() -> None:
        cli = client()
        app = Recorder(lambda q, r: None)
        srv, transport = connected(cli, app)
        for i in range(1_500):
            if flood == "ping":
                cli.ping(i.to_bytes(8, "big"))
            elif flood == "settings":
                cli.update_settings({h2.settings.SettingCodes.ENABLE_PUSH: 0})
            else:  # rapid reset: open a stream, cancel it, again
                sid = 1 + 2 * i
                cli.send_headers(sid, request_headers(), end_stream=True)
                cli.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            if i % 50 == 49:
                srv.data_received(cli.data_to_send())
                if transport.closed:
                    break
        assert transport.closed
        raw = transport.take()
        end = goaway(cli.receive_data(raw))
        assert end is not None
        assert end.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        if flood == "reset":
            assert len(app.requests) == 0  # every stream was cancelled in the read that opened it

    asyncio.run(main())


def test_a_continuation_flood_ends_the_connection() -> None:
    async def main() -> None:
        cli = client()
        srv, transport = connected(cli, Recorder())
        block = cli.encoder.encode(request_headers())
        headers = len(block).to_bytes(3, "big") + b"\x01\x00" + (1).to_bytes(4, "big") + block  # no END_HEADERS
        cont = (0).to_bytes(3, "big") + b"\x09\x00" + (1).to_bytes(4, "big")  # empty CONTINUATION frames
        srv.data_received(headers + cont * 100)
        assert transport.closed
        end = goaway(cli.receive_data(transport.take()))
        assert end is not None
        assert end.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM

    asyncio.run(main())


def test_oversized_headers_end_the_connection_before_the_handler() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder(sse)
        srv, transport = connected(cli, app, limits=ServerLimits(max_body_bytes=1000, max_head_bytes=4096))
        cli.send_headers(1, [*request_headers(), (b"x-big", b"v" * 8000)], end_stream=True)
        srv.data_received(cli.data_to_send())
        assert transport.closed
        assert app.requests == []
        assert goaway(cli.receive_data(transport.take())) is not None

    asyncio.run(main())


def test_admission_runs_per_stream_and_refuses_with_the_openai_error_shape() -> None:
    class Gate(Recorder):
        def admit(self, head: Request) -> object:
            if head.header("authorization") == "Bearer ok":
                return Admitted(context="ctx")

            async def later() -> Refusal:
                await asyncio.sleep(0)
                return Refusal(401, "invalid or missing bearer token", "invalid_api_key", (("WWW-Authenticate", "B"),))

            return later()

    async def main() -> None:
        cli = client()
        app = Gate(sse)
        srv, transport = connected(cli, app)
        ok = [h for h in request_headers() if h[0] != b"authorization"] + [(b"authorization", b"Bearer ok")]
        cli.send_headers(1, ok, end_stream=True)
        cli.send_headers(3, request_headers(), end_stream=False)  # refused while its body is still to come
        srv.data_received(cli.data_to_send())
        await settle()
        events = exchange(cli, transport)
        heads = {e.stream_id: dict(e.headers) for e in events_of(h2.events.ResponseReceived, events)}
        assert heads[1][b":status"] == b"200"
        assert heads[3][b":status"] == b"401"
        assert heads[3][b"www-authenticate"] == b"B"
        body = b"".join(e.data for e in events_of(h2.events.DataReceived, events) if e.stream_id == 3)
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        resets = events_of(h2.events.StreamReset, events)
        assert [(e.stream_id, e.error_code) for e in resets] == [(3, h2.errors.ErrorCodes.NO_ERROR)]
        assert [r.context for r in app.responses] == ["ctx"]

    asyncio.run(main())


def test_a_body_over_the_limit_is_refused_with_413() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder(sse)
        srv, transport = connected(cli, app, limits=ServerLimits(max_body_bytes=100))
        cli.send_headers(1, request_headers())
        cli.send_data(1, b"x" * 101, end_stream=True)
        srv.data_received(cli.data_to_send())
        events = exchange(cli, transport)
        (head,) = events_of(h2.events.ResponseReceived, events)
        assert dict(head.headers)[b":status"] == b"413"
        assert app.requests == []

    asyncio.run(main())


def test_a_body_cut_short_resets_the_stream_and_a_whole_one_ends_it() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder()
        srv, transport = connected(cli, app)
        send_requests(cli, srv, 1, 3)
        cut, whole = app.responses
        cut.write(cut.start(200, [], 100) + b"x" * 10)
        cut.close_connection()  # fewer bytes than announced: the client must not take it as whole
        whole.write(whole.start_stream(200, []) + b"data: e\n\n" + whole.end_bytes())
        whole.close_connection()  # an error event written, then the end: clean END_STREAM
        events = exchange(cli, transport)
        assert [(e.stream_id, e.error_code) for e in events_of(h2.events.StreamReset, events)] == [
            (1, h2.errors.ErrorCodes.INTERNAL_ERROR)
        ]
        assert [e.stream_id for e in events_of(h2.events.StreamEnded, events)] == [3]
        assert not transport.closed

    asyncio.run(main())


def test_a_request_that_never_ends_is_reset_after_the_request_timeout() -> None:
    async def main() -> None:
        cli = client()
        app = Recorder(sse)
        srv, transport = connected(cli, app, limits=ServerLimits(max_body_bytes=100, request_timeout_s=0.01))
        cli.send_headers(1, request_headers())  # no END_STREAM, ever
        srv.data_received(cli.data_to_send())
        for _ in range(200):  # bounded: 2 s at most
            await asyncio.sleep(0.01)
            if transport.writes:
                break
        resets = events_of(h2.events.StreamReset, exchange(cli, transport))
        assert [(e.stream_id, e.error_code) for e in resets] == [(1, h2.errors.ErrorCodes.CANCEL)]
        assert app.requests == []

    asyncio.run(main())


def test_preface_constant() -> None:
    assert len(PREFACE) == 24


def test_a_refused_stream_reset_in_the_same_read_is_skipped_without_an_error() -> None:
    class Refuse(Recorder):
        asked = 0

        def admit(self, head: Request) -> Refusal:
            self.asked += 1
            return Refusal(401, "no", "invalid_api_key")

    async def main() -> None:
        cli = client()
        app = Refuse(sse)
        srv, transport = connected(cli, app)
        for sid in (1, 3, 5):  # each opened and cancelled before the server reads a byte of it
            cli.send_headers(sid, request_headers(), end_stream=True)
            cli.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        srv.data_received(cli.data_to_send())  # was: StreamIDTooLowError out of data_received, the connection lost
        assert not transport.closed
        assert not events_of(h2.events.ResponseReceived, exchange(cli, transport))
        assert app.asked == 0  # no admission work (a JWT check) for a stream already cancelled

    asyncio.run(main())


def test_a_body_waiting_for_admission_keeps_its_window_shut_until_admitted() -> None:
    class Slow(Recorder):
        gate: asyncio.Future[None] | None = None

        def admit(self, head: Request) -> object:
            async def later() -> Admitted:
                assert self.gate is not None
                await self.gate
                return Admitted()

            return later()

    async def main() -> None:
        cli = client()
        app = Slow(sse)
        app.gate = asyncio.get_running_loop().create_future()
        srv, transport = connected(cli, app)
        cli.send_headers(1, request_headers())
        for _ in range(4):
            cli.send_data(1, b"x" * 10_000)
        srv.data_received(cli.data_to_send())
        await asyncio.sleep(0)
        updates = events_of(h2.events.WindowUpdated, exchange(cli, transport))
        assert not [u for u in updates if u.stream_id == 1]  # nothing credited while admission is pending
        app.gate.set_result(None)
        await settle()
        updates = events_of(h2.events.WindowUpdated, exchange(cli, transport))
        assert [u.stream_id for u in updates if u.stream_id] == [1]  # credited once admitted
        cli.send_data(1, b"y", end_stream=True)
        srv.data_received(cli.data_to_send())
        assert app.requests[0].body == b"x" * 40_000 + b"y"

    asyncio.run(main())


def test_a_goaway_from_the_client_ends_its_open_streams_as_a_closed_socket_does() -> None:
    async def main() -> None:
        cli = client()
        log: list[str] = []
        app = Recorder(signalling(log))
        srv, transport = server(app)
        srv.data_received(cli.data_to_send())
        send_requests(cli, srv, 1)
        cli.close_connection()
        srv.data_received(cli.data_to_send())
        assert transport.closed
        app.responses[0].write(b"data: b\n\n")  # h2 would raise here (its connection is CLOSED): dropped instead
        srv.connection_lost(None)
        assert log == ["abort 1"]
        assert app.responses[0].client_gone

    asyncio.run(main())


def test_a_finished_response_whose_tail_the_client_never_takes_is_reset_after_the_timeout() -> None:
    async def main() -> None:
        cli = client(initial_window_size=10)
        app = Recorder(lambda q, r: r.write(r.start_stream(200, []) + b"x" * 100 + r.end_bytes(), last=True))
        srv, transport = connected(cli, app, limits=ServerLimits(max_body_bytes=100, request_timeout_s=0.02))
        cli.send_headers(1, request_headers(), end_stream=True)
        srv.data_received(cli.data_to_send())
        assert app.responses[0].finished  # the app is done; 90 bytes wait behind the shut window
        resets: list[h2.events.StreamReset] = []
        for _ in range(200):  # bounded: 2 s at most
            await asyncio.sleep(0.01)
            resets += events_of(h2.events.StreamReset, exchange(cli, transport))
            if resets:
                break
        assert [(e.stream_id, e.error_code) for e in resets] == [(1, h2.errors.ErrorCodes.CANCEL)]
        assert not srv._streams  # the slot is free again

    asyncio.run(main())


class Budgeted(Recorder):
    """A handler with a worker-wide body budget, as the gateway has."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.body_budget = BodyBudget(limit, Refusal(503, "bodies full", "overloaded", (("Retry-After", "1"),)))


def test_body_bytes_are_held_against_the_budget_as_they_arrive_and_given_back() -> None:
    """Was (issue 33): a stream with no content-length reserved the whole body limit on its head, so one connection's
    requests that never sent a body refused every other client. Now a stream holds what its window let in."""

    async def main() -> None:
        cli = client()
        app = Budgeted(1000)
        srv, transport = connected(cli, app)
        for sid in (1, 3, 5, 7, 9, 11, 13):  # seven bodies of unknown length, none sent: nothing held
            cli.send_headers(sid, request_headers())
        srv.data_received(cli.data_to_send())
        assert app.body_budget.held == 0
        cli.send_data(1, b"a" * 600)
        srv.data_received(cli.data_to_send())
        assert app.body_budget.held == 600
        cli.send_data(3, b"b" * 600)  # would take the worker past its 1000: this stream is refused, no other
        srv.data_received(cli.data_to_send())
        events = exchange(cli, transport)
        heads = {e.stream_id: dict(e.headers)[b":status"] for e in events_of(h2.events.ResponseReceived, events)}
        assert heads == {3: b"503"}
        assert app.body_budget.held == 600
        cli.reset_stream(1)  # a client that leaves gives its bytes back
        srv.data_received(cli.data_to_send())
        assert app.body_budget.held == 0
        cli.send_data(5, b'{"x": 1}', end_stream=True)
        srv.data_received(cli.data_to_send())
        assert [r.body for r in app.requests] == [b'{"x": 1}']
        assert app.body_budget.held == 8  # held by the handler's response until it ends (or the handler gives it back)
        app.responses[0].send(200, [], b"ok")
        assert app.body_budget.held == 0

    asyncio.run(main())


def test_a_refusal_takes_the_shape_of_the_api_the_path_is() -> None:
    """Was (issue 33): errors before the head were OpenAI-shaped on every route."""

    class Anthropic(Recorder):
        def admit(self, head: Request) -> object:
            return Refusal(401, "no key", "invalid_api_key", api=Api.ANTHROPIC)

    async def main() -> None:
        cli = client()
        srv, transport = connected(cli, Anthropic())
        cli.send_headers(1, request_headers("/v1/messages"), end_stream=True)
        srv.data_received(cli.data_to_send())
        events = exchange(cli, transport)
        body = b"".join(e.data for e in events_of(h2.events.DataReceived, events))
        assert json.loads(body) == {"type": "error", "error": {"type": "authentication_error", "message": "no key"}}

    asyncio.run(main())


def _frames(kind: str, i: int) -> bytes:
    """One flood unit of each kind, as raw frames (an h2 client state machine would refuse to send most of them)."""
    sid = 1 + 2 * i
    if kind == "settings_ack":
        return SettingsFrame(0, flags=["ACK"]).serialize()
    if kind == "ping_ack":
        return PingFrame(0, flags=["ACK"], opaque_data=b"\0" * 8).serialize()
    if kind == "priority":
        return PriorityFrame(sid, depends_on=0, stream_weight=15).serialize()
    if kind == "unknown":
        return b"\x00\x00\x00\x20\x00\x00\x00\x00\x00"  # type 0x20, empty: h2 reads it as UnknownFrameReceived
    if kind == "connection_window_update":
        return WindowUpdateFrame(0, window_increment=1).serialize()
    raise AssertionError(kind)


@pytest.mark.parametrize("flood", ["settings_ack", "ping_ack", "priority", "unknown", "connection_window_update"])
def test_floods_of_every_other_frame_type_end_the_connection(flood: str) -> None:
    """Was (issue 33): frames the guard did not count cost the worker unbounded CPU (200,000 SETTINGS ACKs 1.6 s,
    400,000 PRIORITY 2.6 s, 400,000 unknown frames 3.2 s, 400,000 connection WINDOW_UPDATEs 2.6 s) and the connection
    was never closed."""

    async def main() -> None:
        cli = client()
        srv, transport = connected(cli, Recorder(), clock=lambda: 0.0)
        for i in range(20):
            srv.data_received(b"".join(_frames(flood, 100 * i + k) for k in range(100)))
            if transport.closed:
                break
        assert transport.closed, f"2,000 {flood} frames and the connection lives"
        end = goaway(cli.receive_data(transport.take()))
        assert end is not None
        assert end.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM

    asyncio.run(main())


def test_browser_priority_frames_and_window_updates_for_its_streams_are_no_flood() -> None:
    """The bounds grow with what the client does honestly: PRIORITY with each request, WINDOW_UPDATEs as it reads."""

    async def main() -> None:
        cli = client()
        app = Recorder(lambda q, r: r.write(r.start_stream(200, []) + b"data: x\n\n" * 50, last=True))
        srv, transport = connected(cli, app)
        for i in range(600):
            sid = 1 + 2 * i
            cli.send_headers(sid, request_headers(), end_stream=True)
            cli.prioritize(sid, weight=220)
            srv.data_received(cli.data_to_send())
            for event in exchange(cli, transport):
                if isinstance(event, h2.events.DataReceived) and event.stream_id:
                    cli.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            srv.data_received(cli.data_to_send())
        assert not transport.closed
        assert len(app.requests) == 600

    asyncio.run(main())


@pytest.mark.parametrize("provoke", ["window_overflow", "data_after_end_stream", "data_on_closed_stream"])
def test_resets_the_client_makes_us_send_spend_the_reset_allowance(provoke: str) -> None:
    """Was (issue 33, MadeYouReset, CVE-2025-8671): a client that made the server reset its streams opened 11,220 in
    9 s on one connection, 9,657 forwarded upstream, no GOAWAY."""

    async def main() -> None:
        cli = client()
        app = Recorder()  # never answers: each request stays open until its stream is reset
        srv, transport = connected(cli, app, clock=lambda: 0.0)  # no allowance comes back while the test runs
        if provoke == "data_on_closed_stream":  # one stream, reset once by the client: then only DATA on it
            cli.send_headers(1, request_headers())
            cli.reset_stream(1)
            srv.data_received(cli.data_to_send())
        for i in range(2_000):
            sid = 1 + 2 * i
            if provoke == "data_on_closed_stream":
                srv.data_received(DataFrame(1, data=b"x").serialize() * 5)
                if transport.closed:
                    break
                continue
            cli.send_headers(sid, request_headers(), end_stream=True)
            srv.data_received(cli.data_to_send())  # the request reaches the handler
            if provoke == "window_overflow":
                srv.data_received(WindowUpdateFrame(sid, window_increment=2**31 - 1).serialize())
            else:
                srv.data_received(DataFrame(sid, data=b"x").serialize())
            if transport.closed:
                break
            exchange(cli, transport)  # the client reads our resets (its count of open streams goes down)
        assert transport.closed
        end = goaway(cli.receive_data(transport.take()))
        assert end is not None
        assert end.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert len(app.requests) <= 201  # the reset burst allowance (200), then the connection ends

    asyncio.run(main())


SEND_TABLE = [
    # (the client's initial stream window, the bytes, END_STREAM with them)
    (65_535, b"data: a\n\n", False),
    (65_535, b"data: a\n\n", True),
    (0, b"data: a\n\n", False),  # a zero window
    (0, b"data: a\n\n", True),
    (5, b"data: a\n\n", True),  # a window smaller than the frame
    (65_535, b"x" * 16_384, False),  # the peer's max frame size exactly
    (65_535, b"x" * 16_385, True),  # one byte past it
    (16_384, b"x" * 16_384, True),  # the window exactly
    (65_535, b"x" * 1023, False),  # under a KiB: still owed as one
    (65_535, b"x" * 3 * 1024, False),
    (65_535, b"", False),  # empty data (never the hot path)
    (65_535, b"", True),
]


@pytest.mark.parametrize(("window", "data", "end"), SEND_TABLE)
def test_send_s_inlined_hot_path_does_what_send_data_does(window: int, data: bytes, end: bool) -> None:
    """H2ServerConnection.send inlines _send_data for speed (once per relayed read): both routes, from the same
    state, leave the same bytes on the wire, the same bytes pending, the same end and the same window updates owed."""

    def route(inlined: bool) -> tuple[bytes, bytes, bool, bool, bool, int, list[str]]:
        cli = client(initial_window_size=window)
        log: list[str] = []
        app = Recorder(signalling(log, b""))
        srv, transport = connected(cli, app)
        send_requests(cli, srv, 1)
        transport.take()
        response = app.responses[0]
        assert response.head_sent  # the state the hot path is taken in
        assert not response.pending
        assert not response.paused
        if inlined:
            srv.send(response, data, end)
        else:
            srv._send(response, data, end)  # send without its inlined branch: _send_data for any data
            srv._flush()
        return (
            transport.take(),
            bytes(response.pending),
            response.end_pending,
            response.out_closed,
            response.paused,
            srv.guard.window_updates_owed,
            log,
        )

    async def main() -> None:
        assert route(inlined=True) == route(inlined=False)

    asyncio.run(main())
