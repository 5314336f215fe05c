"""The series a diagnosis runs (series.plan) and the probe configs it makes of them (measure.config_for)."""

from __future__ import annotations

import dataclasses

import pytest

from tokenpath.diagnose.measure import PACED_TOTAL_S, config_for
from tokenpath.diagnose.series import (
    BASE,
    BASE_LONG,
    FRAMES,
    LARGE_BYTES,
    LARGER,
    LONG,
    LONG_MS,
    MAX_STREAM_BYTES,
    SCHEDULES,
    SHORT_MS,
    SMALL_BYTES,
    TTFT_MS,
    paced,
    plan,
)
from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING, ProbeConfig, request_bytes
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats import FORMATS
from tokenpath.stub.frames import StreamRequest
from tokenpath.wire.apis import Api


def test_paced_series_varies_frame_size_interval_and_encoding() -> None:
    runs = {r.name: r for r in plan(controlled=True)}
    assert list(runs) == ["base", "slow", "large", "browser"]
    assert (runs["base"].frame_bytes, runs["base"].interval_ms) == (SMALL_BYTES, SHORT_MS)
    assert (runs["slow"].frame_bytes, runs["slow"].interval_ms) == (SMALL_BYTES, LONG_MS)
    assert (runs["large"].frame_bytes, runs["large"].interval_ms) == (LARGE_BYTES, SHORT_MS)
    assert runs["browser"].accept_encoding == BROWSER_ACCEPT_ENCODING
    assert all(r.accept_encoding is None for n, r in runs.items() if n != "browser")


def test_unpaced_series_varies_only_the_encoding() -> None:
    runs = plan(controlled=False)
    assert [(r.name, r.accept_encoding, r.stub_pacing()) for r in runs] == [
        ("base", None, None),
        ("browser", BROWSER_ACCEPT_ENCODING, None),
    ]
    assert [r.name for r in plan(controlled=False, encodings=False)] == ["base"]


def test_pacing_is_what_the_stub_accepts() -> None:
    """Every key is one the stub overrides per request (a typo would be the stub's 400)."""
    stub = Pacing(90.0, 14.0, 128, None, "openai")
    for run in plan(controlled=True):
        pacing = run.stub_pacing()
        assert pacing is not None
        assert set(pacing) <= set(Pacing.OVERRIDABLE)
        got = stub.override(pacing)
        assert (got.tokens, got.ttft_ms, got.format) == (FRAMES, TTFT_MS, "plain")
        assert (got.interval_ms, got.frame_bytes) == (run.interval_ms, run.frame_bytes)


def test_config_for_puts_the_pacing_in_the_body_and_the_header_on_the_wire() -> None:
    template = ProbeConfig(url="http://127.0.0.1:9/v1/chat/completions", total_timeout_s=600)
    _base, slow, _, browser = plan(controlled=True)
    cfg = config_for(template, slow)
    wire = request_bytes(cfg, cfg.target, "tp-1")
    assert b'"tokenpath":{"format":"plain","frame_bytes":60,"interval_ms":120.0' in wire
    assert b"accept-encoding" not in wire.lower()
    assert cfg.total_timeout_s == PACED_TOTAL_S  # a held paced run ends in seconds, not the user's 600
    wire = request_bytes(config_for(template, browser), cfg.target, "tp-2")
    assert f"Accept-Encoding: {BROWSER_ACCEPT_ENCODING}".encode() in wire


def test_config_for_an_endpoint_sends_no_pacing() -> None:
    template = ProbeConfig(url="http://127.0.0.1:9/v1/chat/completions")
    base, _browser = plan(controlled=False)
    wire = request_bytes(config_for(template, base), template.target, "tp-1")
    assert b'"tokenpath"' not in wire


def test_a_paced_run_asks_for_its_own_frames_whatever_max_tokens_says() -> None:
    """--max-tokens is for an endpoint that is not a stub: the stub takes the lower of it and the pacing's tokens,
    so a paced run sends its own count (long's 54 frames, base_long's 151, past the default 128)."""
    template = ProbeConfig(url="http://127.0.0.1:9/v1/chat/completions", max_tokens=4)
    for name in (LONG, BASE_LONG, BASE):
        run = paced(name)
        cfg = config_for(template, run)
        assert cfg.max_tokens == run.frames
        assert f'"max_tokens":{run.frames},'.encode() in request_bytes(cfg, cfg.target, "tp-1")
    endpoint = config_for(dataclasses.replace(template, max_tokens=128), plan(controlled=False)[0])
    assert endpoint.max_tokens == 128  # an endpoint that is not a stub gets the user's


@pytest.mark.parametrize("api", list(Api))
def test_every_run_stays_within_the_stated_bound_in_every_format(api: Api) -> None:
    """At most MAX_STREAM_BYTES a stream, as the stub writes it in the run's format: its own events (the Responses
    API's lead events and closing ones that repeat the text) counted with the token frames."""
    for name in SCHEDULES:
        pacing = paced(name).stub_pacing(api, "tokenpath-stub")
        assert pacing is not None
        got = Pacing().override(pacing)
        kind = "chat" if api is Api.OPENAI else api.value
        shape = FORMATS[api].shape(StreamRequest(kind, "tokenpath-stub", "tp-0123456789ab", got.tokens), got)
        assert sum(shape.sizes) <= MAX_STREAM_BYTES, (name, got.tokens)
        if name in (LONG, LARGER):  # the bound, not far below it
            assert sum(shape.sizes) > 0.9 * MAX_STREAM_BYTES, (name, got.tokens)
