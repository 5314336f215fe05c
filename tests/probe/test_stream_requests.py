"""probe/client.py StreamRequests: the load client's per-stream request from a template made once is, byte for
byte, what request_bytes builds for that stream, in every format; where the swap of the id cannot be proven to give
that (an id the prompt holds, an id of another length) each request is built."""

from __future__ import annotations

import pytest

from tokenpath.probe import client
from tokenpath.probe.client import ProbeConfig, StreamRequests, new_stream_id, request_bytes
from tokenpath.wire.apis import SPECS, Api


@pytest.mark.parametrize("api", [api for api, spec in SPECS.items() if not spec.websocket_only], ids=str)
def test_each_streams_request_is_request_bytes_for_its_id(api: Api) -> None:
    cfg = ProbeConfig(
        "http://127.0.0.1:9/v1", model="m", api=api, api_key="k", headers=(("X-A", "1"),), accept_encoding="gzip"
    )
    requests = StreamRequests(cfg)
    for _ in range(20):
        sid = new_stream_id()
        assert requests.of(sid) == request_bytes(cfg, cfg.target, sid)
    assert requests._template is not None  # the template was used, not a build per stream


def test_a_swap_that_would_touch_more_than_the_id_is_never_made(monkeypatch: pytest.MonkeyPatch) -> None:
    placeholder = "tp-0123456789abcdef"
    ids = iter([placeholder, "tp-1111111111111111", "tp-2222222222222222"])
    monkeypatch.setattr(client, "new_stream_id", lambda: next(ids))
    cfg = ProbeConfig("http://127.0.0.1:9/v1", prompt=f"say {placeholder}")  # the prompt holds the placeholder
    requests = StreamRequests(cfg)
    sid = "tp-ffffffffffffffff"
    assert requests.of(sid) == request_bytes(cfg, cfg.target, sid)
    assert requests._template is None
    assert placeholder.encode() in requests.of(sid)  # the prompt as given


def test_an_id_of_another_length_is_built() -> None:
    cfg = ProbeConfig("http://127.0.0.1:9/v1")
    requests = StreamRequests(cfg)
    requests.of(new_stream_id())
    assert requests.of("my-own-stream-id") == request_bytes(cfg, cfg.target, "my-own-stream-id")
