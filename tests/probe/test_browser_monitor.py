"""`client = "chromium"` on a monitor target: checked with the config, and its probes made by the browser prober
(the browser itself is stood in for here; tests/e2e/test_probe_browser.py runs the real one)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor import probing
from tokenpath.monitor.config import from_dict
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import Trace, TraceLimits

TARGET = {"name": "edge", "url": "http://127.0.0.1:9/v1", "direct_url": "http://127.0.0.1:10/v1"}


def test_the_client_is_read_per_target_and_defaults_to_raw() -> None:
    cfg = from_dict({"target": [{**TARGET, "client": "chromium"}, {"name": "plain", "url": "http://127.0.0.1:11"}]})
    assert [t.spec.client for t in cfg.targets] == ["chromium", "raw"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"client": "firefox"}, "choose raw or chromium"),
        ({"client": "chromium", "accept_encoding": "gzip"}, "its own Accept-Encoding"),
        ({"client": "chromium", "headers": {"Cookie": "a=b"}}, "may not set"),
        ({"client": "chromium", "http2": True}, "negotiates h2 by itself"),
    ],
)
def test_what_a_browser_cannot_do_is_refused_with_the_config(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        from_dict({"target": [{**TARGET, **extra}]})


def test_a_chromium_targets_routes_are_probed_by_the_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, TraceLimits]] = []

    def browser_trace(cfg: ProbeConfig, stream_id: str, limits: TraceLimits) -> Trace:
        calls.append((cfg.url, stream_id, limits))
        return Trace(stream_id, 0)

    def raw(cfg: ProbeConfig, stream_id: str) -> Trace:
        raise AssertionError("the raw prober probed a chromium target")

    monkeypatch.setattr("tokenpath.probe.browser.browser_trace", browser_trace)
    chromium, plain = from_dict(
        {"target": [{**TARGET, "client": "chromium"}, {"name": "plain", "url": "http://127.0.0.1:11"}]}
    ).targets
    outcomes = probing.probe_cycle(chromium, raw, direct_first=False)
    assert [o.route for o in outcomes] == ["via", "direct"]
    assert [url for url, _, _ in calls] == [TARGET["url"], TARGET["direct_url"]]
    assert [sid for _, sid, _ in calls] == [o.stream_id for o in outcomes]
    # the monitor's limits, with the bound for the answer it asked for
    assert all(replace(limits, response_bytes=None) == probing.MONITOR_LIMITS for _, _, limits in calls)
    assert all(limits.response_bytes for _, _, limits in calls)

    seen: list[str] = []

    def recording(cfg: ProbeConfig, stream_id: str) -> Trace:
        seen.append(cfg.url)
        return Trace(stream_id, 0)

    probing.probe_cycle(plain, recording, direct_first=False)
    assert seen == ["http://127.0.0.1:11"]
    assert len(calls) == 2  # the raw target never reached the browser
