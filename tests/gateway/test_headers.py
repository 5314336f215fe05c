"""Which headers cross the gateway (gateway/headers.py), without a network: the client's sent upstream, the
member's forwarded to the client."""

from __future__ import annotations

import uuid

import pytest

from tokenpath.gateway.headers import (
    FORWARD_DROP,
    Forwarding,
    client_request_id,
    forwarded_head,
    forwarded_target,
    new_request_id,
    upstream_headers,
)
from tokenpath.wire.apis import Api
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing
from tokenpath.wire.server import Request

FORWARDING = Forwarding(FORWARD_DROP | {"x-request-id"}, "X-Request-Id", "https", pass_client_credentials=False)


def request(*headers: tuple[str, str], peer: str = "10.0.0.7") -> Request:
    return Request("POST", "/v1/messages", "/v1/messages", "", "1.1", True, headers, b'{"m":1}', peer)


def test_hop_by_hop_connection_listed_and_underscored_names_stay_behind() -> None:
    sent = upstream_headers(
        FORWARDING,
        request(
            ("Connection", "keep-alive, X-Secret"),
            ("X-Secret", "s"),
            ("Transfer-Encoding", "chunked"),
            ("X_Forwarded_For", "spoofed"),  # nginx ignores underscores: a CGI backend would read X-Forwarded-For
            ("X-Request-Id", "theirs"),
            ("Accept", "text/event-stream"),
        ),
        "ours",
        None,
        None,
    )
    assert sent == [
        ("Accept", "text/event-stream"),
        ("X-Forwarded-For", "10.0.0.7"),
        ("X-Forwarded-Proto", "https"),
        ("Content-Length", "7"),
        ("X-Request-Id", "ours"),
    ]


def test_connection_tokens_are_found_whatever_case_the_client_writes() -> None:
    sent = upstream_headers(
        FORWARDING,
        request(("CONNECTION", "keep-alive, X-Secret"), ("x-secret", "s"), ("Accept", "*/*")),
        "ours",
        None,
        None,
    )
    assert [k for k, _ in sent] == ["Accept", "X-Forwarded-For", "X-Forwarded-Proto", "Content-Length", "X-Request-Id"]


def test_the_forwarded_chain_grows_and_the_pools_key_replaces_every_client_credential() -> None:
    client = request(("X-Forwarded-For", "1.2.3.4"), ("Authorization", "Bearer client"), ("x-api-key", "client"))
    pairs = upstream_headers(FORWARDING, client, "rid", Api.ANTHROPIC, "pool-key")
    assert [v for k, v in pairs if k.lower() == "x-api-key"] == ["pool-key"]  # the client's own is not sent too
    sent = dict(pairs)
    assert sent["X-Forwarded-For"] == "1.2.3.4, 10.0.0.7"
    assert "Authorization" not in sent
    no_auth = Forwarding(FORWARDING.drop, "X-Request-Id", "http", pass_client_credentials=True)
    sent = dict(upstream_headers(no_auth, client, "rid", Api.ANTHROPIC, None))
    assert sent["Authorization"] == "Bearer client"  # --no-auth: the upstream checks the client's key
    assert sent["x-api-key"] == "client"  # without a pool key the client's own key header rides along


def test_a_members_head_loses_its_hop_by_hop_headers_and_says_what_the_relay_needs() -> None:
    headers = (
        ("Content-Type", "text/event-stream"),
        ("Connection", "close, X-Hop"),
        ("X-Hop", "1"),
        ("Content-Length", "12"),
        ("Content-Encoding", "gzip"),
        ("Cache-Control", "no-cache"),
    )
    head = forwarded_head(ResponseHead(200, "1.1", headers, Framing.LENGTH, False), "X-Request-Id", "rid")
    assert head.headers == [
        ("Content-Type", "text/event-stream"),
        ("Content-Encoding", "gzip"),
        ("Cache-Control", "no-cache"),
        ("X-Request-Id", "rid"),
    ]
    assert (head.length, head.content_type, head.encoded) == (12, "text/event-stream", True)
    chunked = forwarded_head(ResponseHead(200, "1.1", headers, Framing.CHUNKED, True), "X-Request-Id", "rid")
    assert chunked.length is None  # a Content-Length beside chunked framing is not the body's length


def test_a_client_request_id_is_passed_on_only_when_it_is_a_plain_token() -> None:
    assert client_request_id("abc-123.x:y_z") == "abc-123.x:y_z"
    assert client_request_id("a b") is None
    assert client_request_id("x" * 129) is None
    assert client_request_id(None) is None


def test_the_gateways_own_request_id_is_a_random_version_4_uuid() -> None:
    """What llama-cpp-python's server accepts (docs/findings.md §17): str(uuid.uuid4())'s form, its bits random."""
    ids = [new_request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert str(parsed) == value  # lower-case hex, 8-4-4-4-12
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    # every one of the 122 random bits takes both values over 2,000 ids (a stuck bit would be a fixed-bit bug)
    ones = 0
    zeros = 0
    for value in ids:
        bits = uuid.UUID(value).int
        ones |= bits
        zeros |= ~bits
    fixed = (0xF << 76) | (0x3 << 62)  # the version nibble and the variant's two bits
    assert (ones & zeros & ((1 << 128) - 1)) == ((1 << 128) - 1) & ~fixed


GEMINI = "/v1beta/models/m:streamGenerateContent"


@pytest.mark.parametrize(
    ("query", "forwarded"),
    [
        ("?alt=sse&key=CLIENT", "?alt=sse"),
        ("?key=A&alt=sse&key=B", "?alt=sse"),
        ("?%6Bey=A&alt=sse", "?alt=sse"),
        ("?key=A", ""),
        ("?keys=1&alt=sse", "?keys=1&alt=sse"),
        ("", ""),
    ],
)
def test_a_gemini_clients_key_in_the_query_is_left_out_beside_the_pools(query: str, forwarded: str) -> None:
    assert forwarded_target(GEMINI + query, Api.GEMINI, keyed=True) == GEMINI + forwarded
    assert (
        forwarded_target(GEMINI + query, Api.GEMINI, keyed=False) == GEMINI + query
    )  # no pool key: the member checks the client's


def test_only_a_format_that_takes_a_key_in_its_query_loses_a_key_parameter() -> None:
    assert forwarded_target("/v1/chat/completions?key=1", Api.OPENAI, keyed=True) == "/v1/chat/completions?key=1"
    assert forwarded_target("/x?key=1", None, keyed=True) == "/x?key=1"
