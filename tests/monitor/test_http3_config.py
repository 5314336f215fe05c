"""HTTP/3 in the monitor's TOML (`http3 = true`, `h3_window`) and the single target's flags (--http3, --h3-window):
each reaches the probe's config, what cannot run is refused by name, and the probe of an HTTP/3 target opens its
own UDP socket (never the aborter's TCP connector, which probe_stream would refuse)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.errors import ConnectError, UsageError
from tokenpath.monitor import modules, probing, service
from tokenpath.monitor.config import MonitorConfig, Overrides, from_dict
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.h3figures import BROWSER_H3_WINDOW, DEFAULT_H3_WINDOW, H3Window
from tokenpath.probe.trace import Trace
from tokenpath.wire.httpversion import HttpVersion

TARGET = {"name": "edge", "url": "https://127.0.0.1:9/v1"}


def test_http3_and_its_window_reach_the_probe_of_every_route() -> None:
    cfg = from_dict(
        {
            "target": [
                {**TARGET, "http3": True, "h3_window": "browser", "direct_url": "https://127.0.0.1:10/v1"},
                {"name": "small", "url": "https://127.0.0.1:11", "http3": True, "h3_window": 100_000},
                {"name": "plain", "url": "https://127.0.0.1:12"},
            ]
        }
    )
    edge, small, plain = cfg.targets
    for route in edge.routes.values():
        assert route.http_version is HttpVersion.HTTP3
        assert route.h3_window == BROWSER_H3_WINDOW
    assert small.routes["via"].h3_window == H3Window(100_000, 100_000)
    assert plain.routes["via"].http_version is HttpVersion.HTTP11
    assert plain.routes["via"].h3_window == DEFAULT_H3_WINDOW


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({"h3_window": "browser"}, "`h3_window` is HTTP/3's"),
        ({"http3": True, "http2": True}, "`http2` and `http3`: pick one"),
        ({"http3": True, "url": "http://127.0.0.1:9/v1"}, "`http3` needs an https://"),
        ({"http3": True, "client": "chromium"}, "`http3` is the raw client's"),
        ({"http3": True, "api": "responses", "transport": "websocket"}, "does not run over HTTP/3"),
        ({"http3": True, "h3_window": "huge"}, "h3 window 'huge'"),
    ],
)
def test_what_http3_cannot_do_is_refused_by_name(target: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        from_dict({"target": [{**TARGET, **target}]})


def test_the_flags_make_the_url_target_http3() -> None:
    data = Overrides(url="https://127.0.0.1:9/v1", http3=True, h3_window="browser").apply({})
    via = from_dict(data).targets[0].routes["via"]
    assert via.http_version is HttpVersion.HTTP3
    assert via.h3_window == BROWSER_H3_WINDOW


def test_the_cli_flags_reach_the_url_targets_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    configs: list[MonitorConfig] = []
    monkeypatch.setattr(service, "serve", lambda cfg, announce: configs.append(cfg))
    argv = ["monitor", "--url", "https://127.0.0.1:9/v1", "--http3", "--h3-window", "browser"]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    via = configs[0].targets[0].routes["via"]
    assert via.http_version is HttpVersion.HTTP3
    assert via.h3_window == BROWSER_H3_WINDOW


def test_the_flags_are_refused_where_they_would_be_ignored() -> None:
    for args in (["some.toml", "--http3"], ["some.toml", "--h3-window", "browser"], ["--exporter", "--http3"]):
        out = CliRunner().invoke(app, ["monitor", *args])
        assert out.exit_code == 2, out.output
        assert f"{args[1]} is not read" in " ".join(out.output.split())
    out = CliRunner().invoke(app, ["monitor", "--url", "https://127.0.0.1:9/v1", "--h3-window", "browser", "--once"])
    assert out.exit_code == 2
    assert "--h3-window is HTTP/3's" in out.output  # the flag the user typed


def test_an_http3_probe_opens_its_own_socket_and_none_after_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def probe_stream(cfg: ProbeConfig, **kwargs: Any) -> Trace:
        calls.append(kwargs)
        return Trace(stream_id=kwargs["stream_id"], t_sent_ns=0)

    monkeypatch.setattr(probing, "probe_stream", probe_stream)
    aborter = probing.Aborter()
    prober = probing.default_prober(aborter)
    h3 = ProbeConfig(url="https://127.0.0.1:9/v1", http_version=HttpVersion.HTTP3)
    prober(h3, "tp-1")
    prober(ProbeConfig(url="https://127.0.0.1:9/v1"), "tp-2")
    assert "connect" not in calls[0]  # probe_stream refuses any connector for HTTP/3
    assert calls[1]["connect"] == aborter.connect
    aborter.stop()
    with pytest.raises(ConnectError, match="stopping"):
        prober(h3, "tp-3")
    assert len(calls) == 2


def test_a_module_with_http_version_3_probes_over_http3_and_only_https_targets() -> None:
    loaded = modules.from_dict({"modules": {"h3": {"http_version": "3", "h3_window": "browser"}, "h1": {}}})
    via = loaded["h3"].routes("https://10.0.0.5:8443/v1")["via"]
    assert via.http_version is HttpVersion.HTTP3
    assert via.h3_window == BROWSER_H3_WINDOW
    assert loaded["h1"].request.http_version is HttpVersion.HTTP11
    with pytest.raises(UsageError, match="speaks HTTP/3: the via URL must be https://"):
        loaded["h3"].routes("http://10.0.0.5:8000/v1")  # the /probe's 400, before anything is sent
    with pytest.raises(UsageError, match="`h3_window` is HTTP/3's"):
        modules.from_dict({"modules": {"a": {"http_version": "2", "h3_window": "browser"}}})
