"""The monitor per target: `api` and `accept_encoding` in a [[target]] (and --api / --accept-encoding for --url)
reach the probe's config; the first-token figure (reasoning or content) gets its own histogram."""

from __future__ import annotations

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor.config import Overrides, from_dict
from tokenpath.monitor.metrics import MonitorMetrics
from tokenpath.monitor.probing import OK, ProbeOutcome
from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING
from tokenpath.probe.metrics import RunMetrics
from tokenpath.wire.apis import Api

TARGET = {"name": "edge", "url": "http://127.0.0.1:9"}


def test_api_and_accept_encoding_per_target_reach_each_route() -> None:
    cfg = from_dict({
        "defaults": {"accept_encoding": "browser"},
        "target": [{**TARGET, "api": "anthropic", "direct_url": "http://127.0.0.1:10"},
                   {"name": "plain", "url": "http://127.0.0.1:11", "accept_encoding": "gzip"}],
    })  # fmt: skip
    edge, plain = cfg.targets
    for route in ("via", "direct"):
        probe = edge.routes[route]
        assert probe.api is Api.ANTHROPIC
        assert probe.target.path == "/v1/messages"  # a base URL gets the format's route
        assert probe.accept_encoding == BROWSER_ACCEPT_ENCODING
    assert plain.routes["via"].api is Api.OPENAI
    assert plain.routes["via"].accept_encoding == "gzip"


def test_without_the_keys_nothing_changes() -> None:
    probe = from_dict({"target": [TARGET]}).targets[0].routes["via"]
    assert probe.api is Api.OPENAI
    assert probe.accept_encoding is None


@pytest.mark.parametrize(
    ("target", "message"),
    [({**TARGET, "api": "antropic"}, "unknown API format 'antropic'"), ({**TARGET, "api": 3}, "`api`")],
)
def test_a_wrong_api_is_named_before_any_probe(target: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        from_dict({"target": [target]})


def test_the_url_form_takes_api_and_accept_encoding() -> None:
    data = Overrides(url="http://127.0.0.1:9", api="bedrock", accept_encoding="zstd").apply({})
    probe = from_dict(data).targets[0].routes["via"]
    assert probe.api is Api.BEDROCK
    assert probe.accept_encoding == "zstd"


def test_first_token_is_its_own_histogram_beside_ttft() -> None:
    m = MonitorMetrics(from_dict({"target": [TARGET]}))
    run = RunMetrics("s", 200, 10, 10, 1.0, 1.0, 300.0, {}, {1: 10}, 400.0, first_token_ms=120.0)
    m.record(ProbeOutcome("edge", "via", "tp-1", OK, "", run, (), 1_700_000_000.0))
    labels = {"target": "edge", "route": "via"}
    sample = m.registry.get_sample_value
    assert sample("tokenpath_monitor_first_token_seconds_sum", labels) == pytest.approx(0.12)
    assert sample("tokenpath_monitor_ttft_seconds_sum", labels) == pytest.approx(0.3)
