"""`transport = "websocket"` in the monitor (issue 38): the target's probe speaks the format's WebSocket mode, a path
that does not carry the upgrade is its own outcome (never ok, never a bare no_content), and the flag is refused
where it would be ignored (a config file's targets, the exporter)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.monitor.config import Overrides, from_dict
from tokenpath.monitor.probing import WEBSOCKET_NOT_CARRIED, probe_route
from tokenpath.probe.trace import Trace
from tokenpath.probe.wsfigures import WsFigures

TARGET = {"name": "edge", "url": "http://127.0.0.1:9/v1", "api": "responses"}


def test_the_transport_reaches_the_probe_of_every_route() -> None:
    cfg = from_dict({"target": [{**TARGET, "transport": "websocket", "direct_url": "http://127.0.0.1:10/v1"}]})
    assert {route.transport for route in cfg.targets[0].routes.values()} == {"websocket"}
    assert from_dict({"target": [TARGET]}).targets[0].routes["via"].transport == "sse"
    one = Overrides(url="http://127.0.0.1:9/v1", api="responses", transport="websocket")
    assert from_dict(one.apply({})).targets[0].routes["via"].transport == "websocket"


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({**TARGET, "transport": "carrier-pigeon"}, "transport"),
        ({**TARGET, "api": "openai", "transport": "websocket"}, "WebSocket mode"),
        ({**TARGET, "transport": "websocket", "client": "chromium"}, "raw client"),
    ],
)
def test_a_transport_the_target_cannot_use_is_refused(target: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        from_dict({"target": [target]})


def test_a_path_that_does_not_carry_the_upgrade_is_its_own_outcome() -> None:
    trace = Trace("s", 0)
    trace.ws = WsFigures(False, 405, 0.7)
    cfg = from_dict({"target": [{**TARGET, "transport": "websocket"}]}).targets[0].routes["via"]
    out = probe_route("edge", "via", cfg, lambda c, s: trace)
    assert out.outcome == WEBSOCKET_NOT_CARRIED
    assert not out.ok
    assert "HTTP 405 instead of 101" in out.message


def test_the_flag_is_refused_where_it_would_be_ignored() -> None:
    for args in (["--exporter", "--transport", "websocket"], ["some.toml", "--transport", "websocket"]):
        out = CliRunner().invoke(app, ["monitor", *args])
        assert out.exit_code != 0
        assert "--transport is not read" in " ".join(out.output.split())
