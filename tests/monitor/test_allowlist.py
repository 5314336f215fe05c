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
