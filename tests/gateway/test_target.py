"""The gateway routes and forwards one parsed target: nothing it did not route reaches an upstream."""

from __future__ import annotations

import pytest

from tokenpath.gateway.target import BadTarget, origin_form


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/models?limit=2", "/v1/models?limit=2"),
        ("http://gw.example/v1/chat/completions", "/v1/chat/completions"),
        ("HTTPS://gw.example/v1/models?x=1", "/v1/models?x=1"),
        ("http://gw.example", "/"),
        ("/v1/a%20b", "/v1/a%20b"),
    ],
)
def test_origin_form_of_good_targets(target: str, expected: str) -> None:
    assert origin_form(target) == expected


@pytest.mark.parametrize(
    "target",
    [
        "/v1/../internal/reset",
        "/v1/%2e%2e/internal/reset",
        "/v1/%2E%2e/internal",
        "/v1/./chat",
        "/v1/.%2e/x",
        "/v1/..;/internal",  # Tomcat and kin resolve `..;` as `..`
        "/v1/%2e%2e;x=1/internal",
        "/v1/chat%2fcompletions",
        "/v1/chat%5Ccompletions",
        "/v1/a\\b",
        "/v1/a%00b",
        "http://evil/v1/../admin",
        "*",
        "gw.example:443",
        "/v1/x#frag",
        "/v1/\x7f",
        "http://user:pass@gw.example/v1/chat/completions",  # nginx: 400 (was forwarded as /v1/chat/completions)
        "https://user@gw.example/v1/models",
    ],
)
def test_targets_a_server_could_resolve_differently_are_refused(target: str) -> None:
    with pytest.raises(BadTarget):
        origin_form(target)
