"""tokenpath/riders.py: typed values riding on an exception (the stream's end, the trace so far), and an error raised
in another's place carrying all of them."""

from __future__ import annotations

from tokenpath.errors import NetworkError, RemoteProtocolError
from tokenpath.probe.trace import PARTIAL_TRACE, Trace
from tokenpath.riders import handed_on
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind, StreamEnd

END = StreamEnd(EndKind.CUT_ERROR, BodyEnd.RESET, 5, 1)


def test_a_value_rides_and_comes_back_typed() -> None:
    exc = STREAM_END.attach(RemoteProtocolError("cut"), END)
    assert isinstance(exc, RemoteProtocolError)  # the same error, returned for `raise`
    assert STREAM_END.of(exc) is END
    assert STREAM_END.of(RemoteProtocolError("other")) is None
    assert STREAM_END.attach(exc, None) is exc  # None attaches nothing
    assert STREAM_END.of(exc) is END


def test_riders_do_not_see_each_others_values() -> None:
    trace = Trace("tp-1", 0)
    exc = PARTIAL_TRACE.attach(STREAM_END.attach(NetworkError("reset"), END), trace)
    assert (STREAM_END.of(exc), PARTIAL_TRACE.of(exc)) == (END, trace)


def test_an_error_raised_in_anothers_place_carries_all_it_carried() -> None:
    trace = Trace("tp-1", 0)
    source = PARTIAL_TRACE.attach(STREAM_END.attach(ConnectionResetError(), END), trace)
    out = handed_on(source, NetworkError("the connection was reset"))
    assert (STREAM_END.of(out), PARTIAL_TRACE.of(out)) == (END, trace)
    bare = handed_on(ConnectionResetError(), NetworkError("reset"))
    assert (STREAM_END.of(bare), PARTIAL_TRACE.of(bare)) == (None, None)
