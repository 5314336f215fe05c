"""`load --stub-url`: the stub's own pacing is read from it; streams another stub served are named as such."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import BackgroundLoop
from tokenpath.audit import completion_id
from tokenpath.errors import ServiceError, UsageError
from tokenpath.load.runner import Cell, LoadConfig, _level_row
from tokenpath.load.stubinfo import fetch_pacing, served_by_a_stub, with_stub_pacing
from tokenpath.results.model import MedianAndTail
from tokenpath.stub.config import Pacing, StubConfig
from tokenpath.stub.server import StubServer

STUB = "http://127.0.0.1:8000"
PACING = {"ttft_ms": 20.0, "interval_ms": 10.0, "tokens": 60, "frame_bytes": None, "format": "openai"}


def _cfg(**kw: Any) -> LoadConfig:
    """A --stub-url run's config; the Pacing fields among `kw` are its pacing."""
    pacing = Pacing(**{k: kw.pop(k) for k in list(kw) if k in Pacing.OVERRIDABLE})
    return LoadConfig(("direct",), target_url=STUB, stub_url=STUB, client_workers=1, pacing=pacing, **kw)


def test_the_stubs_pacing_replaces_loads_defaults() -> None:
    cfg = with_stub_pacing(_cfg(), STUB, PACING)
    assert (cfg.pacing.tokens, cfg.pacing.interval_ms, cfg.pacing.ttft_ms) == (60, 10.0, 20.0)
    assert with_stub_pacing(_cfg(), STUB, None).pacing.tokens == 128  # a stub too old to say: load's own


def test_a_flag_that_disagrees_with_the_stub_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as info:
        with_stub_pacing(_cfg(tokens=128, pacing_given=("tokens",)), STUB, PACING)
    assert str(info.value) == (f"`tokens` 128 but the stub at {STUB} was started with `tokens` 60: drop `tokens` "
                               "(load reads the stub's own) or start the stub with the same value")  # fmt: skip
    same = with_stub_pacing(_cfg(tokens=60, pacing_given=("tokens",)), STUB, PACING)
    assert same.pacing.tokens == 60
    with pytest.raises(UsageError, match="sends plain frames"):
        with_stub_pacing(_cfg(), STUB, {**PACING, "format": "plain"})


def test_the_stub_reports_its_pacing_on_health_and_a_non_stub_is_refused() -> None:
    loop = BackgroundLoop()
    server = StubServer(StubConfig(port=0, tokens=60, ttft_ms=20, interval_ms=10))
    loop.run(server.start())
    try:
        assert fetch_pacing(server.url) == PACING
        with pytest.raises(ServiceError, match="is the stub running"):
            fetch_pacing("http://127.0.0.1:9")
    finally:
        loop.run(server.close())
        loop.close()


def test_a_stub_chunk_id_marks_a_stream_some_stub_served() -> None:
    assert served_by_a_stub(completion_id("abc"))
    assert not served_by_a_stub("chatcmpl-9a8b7c")  # a gateway's own ids
    assert not served_by_a_stub("ab12cd34")  # a stream id


def test_streams_served_by_another_stub_are_not_blamed_on_a_dropped_header() -> None:
    cell = Cell("target", 50, streams=100, unjoined=30, foreign=30)
    kinds = {w.kind: w for w in _level_row(cell, MedianAndTail(), _cfg()).warnings}
    assert set(kinds) == {"other_stub"}
    assert kinds["other_stub"].message.startswith("30 of 100 streams served by a stub that is not --stub-url")
    cell.unjoined = 35
    kinds = {w.kind: w for w in _level_row(cell, MedianAndTail(), _cfg()).warnings}
    assert kinds["unjoined"].message.startswith("5 of 100 streams could not be joined")
