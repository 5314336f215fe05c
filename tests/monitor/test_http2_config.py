"""HTTP/2 in the monitor's TOML (`http2 = true`, `h2_window`), the exporter's modules (`http_version = "2"`) and the
single-target flags: each reaches the probe's config (its TLS context then offers h2 and insists on it)."""

from __future__ import annotations

import re

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor import modules
from tokenpath.monitor.config import Overrides, from_dict
from tokenpath.wire.h2client import BROWSER_WINDOW, DEFAULT_WINDOW, H2Window
from tokenpath.wire.httpversion import HttpVersion

TARGET = {"name": "edge", "url": "https://127.0.0.1:9/v1"}


def test_http2_and_the_window_reach_the_probe_of_every_route() -> None:
    cfg = from_dict({
        "target": [
            {**TARGET, "http2": True, "h2_window": "browser", "direct_url": "http://127.0.0.1:10/v1"},
            {"name": "small", "url": "http://127.0.0.1:11", "http2": True, "h2_window": 100_000},
            {"name": "plain", "url": "http://127.0.0.1:12"},
        ]
    })  # fmt: skip
    edge, small, plain = cfg.targets
    for route in edge.routes.values():
        assert route.http_version is HttpVersion.HTTP2
        assert route.h2_window == BROWSER_WINDOW
        assert route.tls.http2  # ALPN offers h2 and the handshake insists on it
        assert route.tls.context().get_ciphers()  # a context still builds
    assert small.routes["via"].h2_window == H2Window(100_000, 100_000)
    assert plain.routes["via"].http_version is not HttpVersion.HTTP2
    assert plain.routes["via"].h2_window == DEFAULT_WINDOW
    assert not plain.routes["via"].tls.http2


def test_defaults_can_make_every_target_http2() -> None:
    cfg = from_dict({"defaults": {"http2": True}, "target": [TARGET]})
    assert cfg.targets[0].routes["via"].http_version is HttpVersion.HTTP2


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({"h2_window": "browser"}, "`h2_window` is HTTP/2's"),
        ({"http2": "yes"}, "`http2` must be true or false"),
        ({"http2": True, "h2_window": "fast"}, "expected `default`, `browser`"),
        ({"http2": True, "h2_window": 0}, "stream window must be"),
    ],
)
def test_http2_mistakes_are_refused_at_start(target: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        from_dict({"target": [{**TARGET, **target}]})


def test_the_url_flags_make_an_http2_target() -> None:
    data = Overrides(url="http://127.0.0.1:9", http2=True, h2_window="browser").apply({})
    route = from_dict(data).targets[0].routes["via"]
    assert route.http_version is HttpVersion.HTTP2
    assert route.h2_window == BROWSER_WINDOW
    plain = from_dict(Overrides(url="http://127.0.0.1:9").apply({})).targets[0].routes["via"]
    assert plain.http_version is not HttpVersion.HTTP2


def test_a_module_with_http_version_2_probes_over_http2() -> None:
    loaded = modules.from_dict({
        "modules": {"h2": {"http_version": "2", "h2_window": "browser"}, "h1": {}, "h1x": {"http_version": "1.1"}}
    })  # fmt: skip
    via = loaded["h2"].routes("https://10.0.0.5:8443/v1")["via"]
    assert via.http_version is HttpVersion.HTTP2
    assert via.tls.http2
    assert via.h2_window == BROWSER_WINDOW
    assert loaded["h1"].routes("http://10.0.0.5:8000/v1")["via"].http_version is not HttpVersion.HTTP2
    assert loaded["h1x"].request.http_version is not HttpVersion.HTTP2


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"http_version": "4"}, "`http_version` must be one of 1.1, 2, 3"),  # "3": tests/monitor/test_http3_config
        ({"http_version": "1.1", "h2_window": "browser"}, "`h2_window` is HTTP/2's"),
    ],
)
def test_module_http_mistakes_are_refused(table: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        modules.from_dict({"modules": {"a": table}})
