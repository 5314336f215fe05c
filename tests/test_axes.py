"""The registry of measurement axes (tokenpath/axes.py) holds what every place that varies with an axis reads: the
Condition's fields, the stub's Pacing fields, the probe's settings and the CLI options are checked against it here,
so an axis cannot be declared in one place and forgotten in another (a label without it would merge two
conditions' rows in a table, a flag without it would set nothing)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import fields, replace
from typing import Any

import pytest
from typer.models import OptionInfo

from tokenpath import axes
from tokenpath.axes import AXES, BY_FIELD, DEFAULT_CONDITION, Condition, grid
from tokenpath.cli import options
from tokenpath.errors import UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.stub.config import Pacing, StubConfig
from tokenpath.wire.apis import Api
from tokenpath.wire.h2client import DEFAULT_WINDOW
from tokenpath.wire.httpversion import HttpVersion, parse_http_version

# A value off its default for every axis, as a condition holds it.
SET: dict[str, Any] = {
    "endpoint": "endpoint https://api.example.com",
    "frame_bytes": 400,
    "interval_ms": 14.0,
    "link": "veth",
    "tls": True,
    "api": Api.ANTHROPIC,
    "http_version": HttpVersion.HTTP2,
    "h2_window": "browser",
    "transport": "websocket",
    "accept_encoding": "gzip",
    "origin": "stub:llama-server",
    "http10_framing": "chunked",
    "stub_headers": (("X-Accel-Buffering", "no"),),
    "heartbeat_ms": 15000.0,
    "reasoning_tokens": 8,
    "first_event_bytes": 16384,
    "head_at": "first-token",
    "pause_ms": 5000.0,
    "pause_after": 3,
}


def test_the_condition_has_one_field_per_axis_with_the_axis_default() -> None:
    assert {f.name for f in fields(Condition)} == set(BY_FIELD)
    assert set(SET) == set(BY_FIELD)  # this test's own table covers every axis
    for axis in AXES:
        assert getattr(DEFAULT_CONDITION, axis.field) == axis.default, axis.key


def test_each_axis_says_itself_in_the_label() -> None:
    """A label is for people, but it must still tell two conditions apart: every axis moved off its default (where
    it applies: over HTTP/2, with a pause, in a format with a WebSocket mode) changes it."""
    base = replace(DEFAULT_CONDITION, http_version=HttpVersion.HTTP2, pause_ms=100.0, api=Api.RESPONSES)
    for axis in AXES:
        moved, unmoved = replace(base, **{axis.field: SET[axis.field]}), replace(base, **{axis.field: axis.default})
        assert moved.label != unmoved.label, axis.key


def test_the_label_is_the_one_every_condition_has_had() -> None:
    assert DEFAULT_CONDITION.label == "60 B @ 50 ms, loopback"
    every = replace(DEFAULT_CONDITION, **{k: v for k, v in SET.items() if k != "endpoint"})
    assert every.label == (
        "400 B @ 14 ms, veth, tls, anthropic, HTTP/2 (window browser), Accept-Encoding: gzip, stub as llama-server, "
        "stub sends "
        "X-Accel-Buffering: no, heartbeat 15000 ms, 8 reasoning tokens, first event 16384 B, head at first token, "
        "pause 5000 ms after token 3"
    )
    assert replace(DEFAULT_CONDITION, endpoint=SET["endpoint"], tls=True).label == (
        "endpoint https://api.example.com, loopback, tls"
    )


@pytest.mark.parametrize("row", [False, True])
def test_a_condition_round_trips_through_either_json_shape(row: bool) -> None:
    every = replace(DEFAULT_CONDITION, **SET)
    for cond in (DEFAULT_CONDITION, every, replace(every, pause_ms=0.0, http_version=HttpVersion.HTTP11)):
        doc = cond.to_json(row=row)
        assert Condition.from_json(doc, row=row) == cond
        assert hash(Condition.from_json(doc, row=row)) == hash(cond)  # what floors and shares are joined on
    assert set(every.to_json(row=True)) == set(BY_FIELD)  # a row: every axis, by field
    assert "client_http" in every.to_json()  # the experiment's echo: the file's key


def test_an_axis_that_does_not_apply_is_held_at_its_default_and_unsaid() -> None:
    h1 = replace(DEFAULT_CONDITION, pause_ms=0.0)
    assert "h2_window" not in h1.to_json()
    assert "pause_after" not in h1.to_json()
    points = grid(
        {"client_http": ["1.1", "2"], "h2_window": ["browser"], "pause_ms": [0, 10], "pause_after": [2]},
        [axes.HTTP_VERSION, axes.H2_WINDOW, axes.PAUSE_MS, axes.PAUSE_AFTER],
    )
    got = [(c.http_version, c.h2_window, c.pause_ms, c.pause_after) for c in points]
    one, two = ("1.1", "default"), ("2", "browser")
    assert got == [(*one, 0.0, 1), (*one, 10.0, 2), (*two, 0.0, 1), (*two, 10.0, 2)]
    with pytest.raises(UsageError, match="pause_after: where a pause falls needs pause_ms"):
        grid({"pause_after": [2]}, [axes.PAUSE_MS, axes.PAUSE_AFTER])


def test_sse_on_a_websocket_only_api_is_left_out_of_the_grid_and_refused_when_nothing_is_left() -> None:
    both = grid({"api": ["responses", "realtime"], "transport": ["sse", "websocket"]}, [axes.API, axes.TRANSPORT])
    got = [(c.api, c.transport) for c in both]
    assert got == [(Api.RESPONSES, "sse"), (Api.RESPONSES, "websocket"), (Api.REALTIME, "websocket")]
    only = grid({"api": ["realtime"], "transport": ["websocket"]}, [axes.API, axes.TRANSPORT])
    assert [(c.api, c.transport) for c in only] == [(Api.REALTIME, "websocket")]
    for table in ({"api": ["realtime"]}, {"api": ["realtime"], "transport": ["sse"]}):
        with pytest.raises(UsageError, match=r"transport: a WebSocket-only API \(realtime\) has no SSE stream"):
            grid(table, [axes.API, axes.TRANSPORT])
    assert axes.transport_for(Api.REALTIME) == "websocket"
    assert axes.transport_for(Api.RESPONSES) == "sse"


def test_every_setting_an_axis_feeds_exists_where_it_says() -> None:
    pacing = {f.name for f in fields(Pacing)}
    probe = {f.name for f in fields(ProbeConfig)}
    for axis in AXES:
        assert axis.pacing is None or axis.pacing in pacing, axis.key
        assert axis.probe is None or axis.probe in probe, axis.key
    every = replace(DEFAULT_CONDITION, **SET)
    replace(Pacing(), **every.pacing_settings()).check()  # the values it feeds are ones the stub takes
    replace(ProbeConfig("http://h"), **every.probe_settings())


def test_the_stub_takes_every_pacing_field_as_a_flag_with_the_same_default() -> None:
    assert {f.name for f in fields(StubConfig)} >= set(Pacing.OVERRIDABLE)
    assert StubConfig().pacing == Pacing()
    assert set(Pacing.OVERRIDABLE) == {f.name for f in fields(Pacing)}


def test_every_flagged_axis_has_its_one_shared_option() -> None:
    flags = {}
    for name, value in vars(options).items():
        option = next((m for m in getattr(value, "__metadata__", ()) if isinstance(m, OptionInfo)), None)
        if option is not None and typing.get_origin(value) is typing.Annotated:
            flags[option.param_decls[0] if option.param_decls else option.default] = name  # Annotated: the default
    # Besides the axes, the WebSocket client's policy (probe/wsfallback.py, issue 38) and the probe's HTTP/3 (no
    # matrix condition yet): not axes, declared once here all the same
    client = {f for f in flags if str(f).startswith(("--ws-", "--http3", "--h3-"))}
    assert client == {
        "--ws-fallback",
        "--ws-retry-delay-ms",
        "--ws-upgrade-timeout",
        "--ws-ping-s",
        "--http3",
        "--h3-window",
    }
    assert {a.flag for a in AXES if a.flag} == set(flags) - client


def test_pacing_is_serialised_one_way_and_read_back() -> None:
    paced = Pacing(20.0, 50.0, 40, None, "openai", 15.0, 3, 900, "first-token", 500.0, 2)
    assert Pacing.from_json(paced.to_json()) == paced
    expected: dict[str, object] = {"ttft_ms": 20.0, "interval_ms": 50.0, "tokens": 40, "heartbeat_ms": 15.0}
    expected["reasoning_tokens"] = 3
    expected |= {"first_event_bytes": 900, "head_at": "first-token", "pause_ms": 500.0, "pause_after": 2}
    assert paced.to_json() == expected  # the schedule, and every other field that is not at its default
    assert set(Pacing().to_json(with_frame=True)) == {"ttft_ms", "interval_ms", "tokens", "frame_bytes", "format"}
    assert StubConfig.paced(paced).pacing == paced
    assert Pacing().to_argv() == []
    assert paced.to_argv()[:6] == ["--ttft-ms", "20", "--interval-ms", "50", "--tokens", "40"]


def test_the_argv_is_what_the_stub_flags_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import tokenpath.stub.server
    from tokenpath.cli import app

    seen: list[StubConfig] = []
    monkeypatch.setattr(tokenpath.stub.server, "run", lambda cfg, announce, loop: seen.append(cfg))
    paced = Pacing(20.0, 50.0, 40, 60, "plain", 15.0, 0, None, "first-token", 500.0, 2)
    out = CliRunner().invoke(app, ["stub", *paced.to_argv()])
    assert out.exit_code == 0, out.output
    assert seen[0].pacing == paced


@pytest.mark.parametrize(("value", "expected"), [("1.1", "1.1"), ("2", "2"), (2, "2"), ("HTTP/2", "2"), (1.1, "1.1")])
def test_one_http_version_whatever_spells_it(value: object, expected: str) -> None:
    version = parse_http_version(value)
    assert version == expected
    assert version is HttpVersion(expected)
    assert HttpVersion.of(expected == "2") is version


@pytest.mark.parametrize("value", ["3", True, None, ""])
def test_an_http_version_that_is_not_one_says_which_are(value: object) -> None:
    with pytest.raises(ValueError, match=r'"1\.1", "2"'):
        parse_http_version(value)


def test_the_default_window_is_the_clients_own() -> None:
    assert str(DEFAULT_WINDOW) == axes.DEFAULT_H2_WINDOW
    assert axes.H2_WINDOW.read(1048576, "`h2_window`") == "1048576"


def test_a_declared_value_s_message_names_where_it_was_declared() -> None:
    with pytest.raises(UsageError, match=r"^\[conditions\] pause_ms: -1 is not allowed$"):
        axes.PAUSE_MS.values({"pause_ms": [-1]})
    with pytest.raises(UsageError, match=r"^--api: unknown API format 'soap'"):
        axes.API.read("soap", "--api")
    with pytest.raises(UsageError, match="must not be empty"):
        axes.PAUSE_AFTER.values({"pause_after": []})


def test_the_condition_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_CONDITION.pause_ms = 1.0  # type: ignore[misc]
