"""probe --http2 against hostile or broken servers (the scripted h2 peer of test_h2stream.py): every one ends in a
bounded time with the error that names it, and the arrival figures stay the stream's own."""

from __future__ import annotations

import pytest
from hyperframe.frame import DataFrame, GoAwayFrame, PingFrame, WindowUpdateFrame

from tests.probe.test_h2stream import CONTENT, ROLE, SSE, H2Peer, run
from tokenpath.errors import FirstByteTimeout, IdleTimeout, NetworkError, RemoteProtocolError


def test_a_server_that_never_sends_settings_is_a_first_byte_timeout() -> None:
    with pytest.raises(FirstByteTimeout):
        run(lambda peer, sid: [])


def test_goaway_then_silence_on_an_open_socket_is_a_timeout_not_a_hang() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, ROLE)
        goaway = GoAwayFrame(0)
        goaway.last_stream_id = sid  # ours was taken: it may still finish, and never does
        return [peer.take() + bytes(goaway.serialize())]

    with pytest.raises(IdleTimeout):
        run(script)


def test_goaway_that_refuses_our_stream_fails_at_once() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        goaway = GoAwayFrame(0)
        goaway.last_stream_id = 0
        return [peer.take() + bytes(goaway.serialize())]

    with pytest.raises(NetworkError, match="REFUSED_STREAM"):
        run(script)


def test_pings_alone_do_not_keep_a_silent_stream_alive() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, ROLE)
        pings = [bytes(PingFrame(0, opaque_data=b"%08d" % i).serialize()) for i in range(50)]
        return [peer.take(), *pings * 40]  # 2,000 reads of one PING each, past the guard's burst: either ends it

    with pytest.raises((IdleTimeout, RemoteProtocolError)):
        run(script)


def test_a_window_update_overflow_on_our_stream_is_the_servers_protocol_error() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, ROLE)
        update = WindowUpdateFrame(sid)
        update.window_increment = 2**31 - 1
        return [peer.take(), bytes(update.serialize())]

    with pytest.raises(RemoteProtocolError, match="FLOW_CONTROL_ERROR"):
        run(script)  # it used to wait out the idle timeout: the stream was over, and nobody said so


def test_a_content_frame_cut_by_a_read_arrives_with_that_read() -> None:
    """One DATA frame holding the role and the first content event, the read cut just after the content: TTFT is
    that read's (an HTTP/1.1 reader has it then), not the next one's."""

    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        head = peer.take()
        raw = bytes(DataFrame(sid, ROLE + CONTENT + b"data: [DO").serialize())
        cut = len(raw) - len(b"data: [DO")
        end = DataFrame(sid, b"NE]\n\n")
        end.flags.add("END_STREAM")
        return [head, raw[:cut], raw[cut:] + bytes(end.serialize())]

    trace, _ = run(script)
    assert trace.frame_count == 3
    assert trace.read_count == 3
    assert [r.frames for r in trace.reads] == [0, 2, 1]
    assert trace.t_first_content_ns == trace.reads[1].t_ns
    assert trace.h2 is not None
    assert trace.h2.data_frames == 2
