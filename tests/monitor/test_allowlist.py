from __future__ import annotations

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor.allowlist import AllowList


@pytest.mark.parametrize(
    ("pattern", "url", "allowed"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1", True),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8001/v1", False),
        ("http://127.0.0.1", "http://127.0.0.1/v1", True),  # no port: the scheme's default only
        ("http://127.0.0.1", "http://127.0.0.1:8000/v1", False),
        ("http://127.0.0.1:*", "http://127.0.0.1:8000/v1", True),
        ("http://127.0.0.1:*", "https://127.0.0.1:8000/v1", False),  # the scheme is part of it
        ("*://127.0.0.1:*", "https://127.0.0.1:8000/v1", True),
        ("https://*.llm.example.com", "https://eu.llm.example.com/v1", True),
        ("https://*.llm.example.com", "https://EU.LLM.example.com/v1", True),  # host names are case-insensitive
        ("https://*.llm.example.com", "https://llm.example.com.evil.net/v1", False),
        ("https://*.llm.example.com", "https://evil.net/.llm.example.com/v1", False),  # * never crosses into the path
        ("https://*.llm.example.com", "https://eu.llm.example.com@evil.net/v1", False),  # userinfo is not the host
        ("http://10.0.0.5:8000/v1/*", "http://10.0.0.5:8000/v1", True),  # the path requested: /v1/chat/completions
        ("http://10.0.0.5:8000/v1/*", "http://10.0.0.5:8000/v2", False),
        ("http://10.0.0.[1-3]:80", "http://10.0.0.2/v1", True),
        ("http://10.0.0.[1-3]:80", "http://10.0.0.4/v1", False),
        ("http://[::1]:8000", "http://[::1]:8000/v1", True),
        ("http://[::1]:8000", "http://127.0.0.1:8000/v1", False),
        # a host's `*` (or `?`) matches within one DNS label: it never reaches a name someone else controls
        ("http://127.0.0.*:80", "http://127.0.0.1.attacker.example/v1", False),
        ("http://127.0.0.*:80", "http://127.0.0.1/v1", True),
        ("https://*.llm.example.com", "https://a.b.llm.example.com/v1", False),
        ("http://10.0.0.?:80", "http://10.0.0.1.x/v1", False),
        ("http://*", "http://a.b.example/v1", True),  # `*` alone: any host
    ],
)
def test_a_pattern_matches_part_by_part(pattern: str, url: str, allowed: bool) -> None:
    assert AllowList.parse([pattern]).allows(url) is allowed


def test_any_pattern_of_several_allows_and_none_allows_nothing() -> None:
    allow = AllowList.parse(["http://a.example:80", "http://b.example:80"])
    assert allow.allows("http://b.example/v1")
    assert not allow.allows("http://c.example/v1")
    assert not AllowList()
    assert not AllowList().allows("http://a.example/v1")


@pytest.mark.parametrize("pattern", ["127.0.0.1:8000", "ftp://x", "http://", "http://a:99999", "http://a:8x",
                                     "http://user@host"])  # fmt: skip
def test_a_pattern_that_is_not_one_is_a_usage_error(pattern: str) -> None:
    with pytest.raises(UsageError, match="`allow` pattern"):
        AllowList.parse([pattern])


def test_a_target_that_is_not_a_url_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        AllowList.parse(["http://*:*"]).allows("gopher://x")


PREFIXED = AllowList.parse(["http://127.0.0.1:8000/v1/*"])


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/v1/../internal/reset", "dot segment"),
        ("/v1/%2e%2e/internal/reset", "dot segment"),
        ("/v1/%2E%2e/internal/reset", "dot segment"),
        ("/v1/.%2E/internal/reset", "dot segment"),
        ("/v1/./../internal/reset", "dot segment"),
        ("/v1/chat/../../internal/completions", "dot segment"),
        ("/v1/..;/internal/reset", "dot segment with a parameter"),  # Tomcat resolves `..;` as `..`
        ("/v1/..%2finternal/reset", "encoded slash"),
        ("/v1/..%5Cinternal/reset", "encoded slash"),
        ("/v1/%00/completions", "backslash or a NUL"),
        ("/v1/..\\internal/reset", "'\\\\', which RFC 3986 does not allow"),  # a raw backslash is not a URL's
    ],
)
def test_a_path_a_server_could_resolve_elsewhere_is_refused_before_matching(path: str, says: str) -> None:
    """`/v1/*` allows /v1/../internal as a string; a server that normalises the path then serves /internal."""
    with pytest.raises(UsageError) as refused:
        PREFIXED.allows(f"http://127.0.0.1:8000{path}")
    assert says in str(refused.value)


def test_a_resolved_path_inside_the_pattern_is_still_allowed() -> None:
    assert PREFIXED.allows("http://127.0.0.1:8000/v1/chat/completions?x=..%2F")  # the query is not a path
    assert PREFIXED.allows("http://127.0.0.1:8000/v1/a..b/.well/completions")
    assert not PREFIXED.allows("http://127.0.0.1:8000/internal/completions")
