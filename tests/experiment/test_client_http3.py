"""`client_http = "3"` (issue 38 item 2): the matrix takes it, over TLS on loopback only (refused by name elsewhere,
never moved to another version), certified over HTTP/3 through Caddy 2.11's clean h3 site; load and monitor keep
refusing "3" with the one message; which catalogue paths serve HTTP/3."""

from __future__ import annotations

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment import h3controls
from tokenpath.experiment.spec import parse
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import H3_NONE
from tokenpath.wire.httpversion import HTTP3_CLIENTS, HttpVersion, parse_http_version, parse_matrix_version


def test_the_matrix_measures_http3_over_tls() -> None:
    exp = parse({"conditions": {"client_http": ["2", "3"], "tls": [True]}})
    assert sorted((c.tls, c.http_version) for c in exp.conditions) == [(True, "2"), (True, "3")]
    h3 = next(c for c in exp.conditions if c.http_version is HttpVersion.HTTP3)
    assert h3.label.endswith(", HTTP/3")
    assert h3.to_json()["client_http"] == "3"
    assert h3.probe_settings()["http_version"] is HttpVersion.HTTP3  # the probe's h3 client runs the row
    assert parse_matrix_version(3) is HttpVersion.HTTP3


def test_http3_on_a_clear_text_path_is_refused_by_name() -> None:
    with pytest.raises(UsageError, match=r'client_http: client_http = \["3"\] needs tls = \[true\]'):
        parse({"conditions": {"client_http": ["3"]}})
    with pytest.raises(UsageError, match=r'needs link = \["loopback"\]'):
        parse({"conditions": {"client_http": ["3"], "tls": [True], "link": ["veth"]}})


def test_a_clear_text_point_with_http3_is_left_out_not_moved_to_another_version() -> None:
    exp = parse({"conditions": {"client_http": ["1.1", "3"], "tls": [False, True]}})
    assert sorted((c.tls, c.http_version) for c in exp.conditions) == [(False, "1.1"), (True, "1.1"), (True, "3")]


def test_websocket_is_not_asked_over_http3() -> None:
    table = {"client_http": ["1.1", "3"], "tls": [True], "transport": ["sse", "websocket"], "api": ["responses"]}
    exp = parse({"conditions": table})
    expected = [("1.1", "sse"), ("1.1", "websocket"), ("3", "sse")]
    assert sorted((c.http_version, c.transport) for c in exp.conditions) == expected
    with pytest.raises(UsageError, match=r"HTTP/1\.1 upgrade"):
        parse({"conditions": {"client_http": ["3"], "tls": [True], "transport": ["websocket"], "api": ["responses"]}})


@pytest.mark.parametrize("value", ["3", 3, "HTTP/3"])
def test_clients_without_http3_refuse_it_with_the_one_message(value: object) -> None:
    with pytest.raises(ValueError, match="probe --http3") as refused:
        parse_http_version(value)  # load and monitor's parse: the default accepts the TCP versions only
    assert HTTP3_CLIENTS in str(refused.value)
    assert '"1.1", "2"' in str(refused.value)


def test_which_catalogue_paths_serve_http3() -> None:
    proxies = catalogue()
    caddy, envoy, nginx = proxies["caddy-2.11"], proxies["envoy"], proxies["nginx"]
    assert caddy.client_h3_unsupported(caddy.variant("stock"), True) == ""
    assert "TLS only" in caddy.client_h3_unsupported(caddy.variant("stock"), False)
    assert "no h3" in caddy.client_h3_unsupported(caddy.variant("h2c"), True)
    assert envoy.client_h3_unsupported(envoy.variant("http3"), True) == ""
    assert "http3 variant" in envoy.client_h3_unsupported(envoy.variant("stock"), True)
    assert envoy.client_http_unsupported(envoy.variant("http3"), True, "2") == ""  # ALPN h2 on its TCP listener
    assert nginx.client_h3_unsupported(nginx.variant("stock"), True) == H3_NONE
    assert proxies["pass"].client_h3_unsupported(proxies["pass"].variant("stock"), True) == H3_NONE


def test_the_http3_certificate_names_each_control_it_cannot_run_and_why() -> None:
    checks = {c.name: c for c in h3controls.not_run_checks()}
    assert set(checks) == {"direct over HTTP/3: not run", "pass over HTTP/3: not run"}
    assert all(c.passed and "QUIC" in c.evidence for c in checks.values())
    assert [c.name for c in h3controls.H3_CONTROLS] == ["h3-direct", "h3-buffer", "h3-cork"]
    held = next(c for c in h3controls.H3_CONTROLS if c.name == "h3-buffer")
    assert catalogue()[h3controls.H3_FRONT].variant(held.variant).line == "response_buffers 1m"
