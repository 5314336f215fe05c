"""A pool that lists `claims` serves only tokens that carry one (gateway/pools.py Router), through the gateway in this
process (config.from_dict, GatewayServer, HS256 tokens, members on loopback): a token with another tier, or none,
asking for the pro pool's model never reaches the pro member or its upstream key; with no other pool it may use, it is
a 403 in the route's error shape, naming the claim."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

from tests.gateway.test_config_keys_applied import RecordingMember, read_head
from tests.helpers import BackgroundLoop, post
from tokenpath.gateway import config as gwconfig
from tokenpath.gateway.server import GatewayServer

SECRET = "claims-routing-secret-" + "s" * 32


@pytest.fixture
def members() -> Iterator[tuple[RecordingMember, RecordingMember]]:
    pro, rest = RecordingMember(), RecordingMember()
    yield pro, rest
    pro.close()
    rest.close()


def run_gateway(pools: list[dict[str, Any]]) -> tuple[BackgroundLoop, GatewayServer]:
    data = {
        "listen": "127.0.0.1:0",
        "auth": {"secret_env": "GW_CLAIMS_SECRET", "algorithms": ["HS256"], "pool_claim": "tier"},
        "pool": pools,
    }
    cfg = gwconfig.from_dict(data)
    bg = BackgroundLoop()

    async def start() -> GatewayServer:
        server = GatewayServer(cfg)
        await server.start()
        return server

    return bg, bg.run(start())


def ask(port: int, path: str, model: str, **claims: Any) -> tuple[int, Any]:
    token = jwt.encode({"exp": int(time.time()) + 600, **claims}, SECRET, algorithm="HS256")
    body = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    raw = post(path, body, extra=f"Authorization: Bearer {token}\r\n")
    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        sock.sendall(raw)
        status, headers, rest = read_head(sock)
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, json.loads(rest) if rest else None


PRO = {"name": "pro", "models": ["pro-*"], "claims": ["pro"], "api_key_env": "GW_PRO_KEY"}


def test_a_token_without_the_claim_goes_to_the_next_pool_never_the_pro_key(
    members: tuple[RecordingMember, RecordingMember], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GW_CLAIMS_SECRET", SECRET)
    monkeypatch.setenv("GW_PRO_KEY", "pro-upstream-key")
    pro, rest = members
    pools = [{**PRO, "member": [{"url": pro.url}]}, {"name": "rest", "member": [{"url": rest.url}]}]
    bg, server = run_gateway(pools)
    try:
        for claims in ({}, {"tier": "enterprise"}, {"tier": True}, {"tier": ["pro"]}):
            assert ask(server.port, "/v1/chat/completions", "pro-large", **claims)[0] == 200
        assert ask(server.port, "/v1/chat/completions", "pro-large", tier="pro")[0] == 200
    finally:
        bg.run(server.close(0.2))
        bg.close()
    assert len(rest.seen) == 4
    assert len(pro.seen) == 1
    assert all("pro-upstream-key" not in str(headers) for _, _, headers in rest.seen)
    assert "pro-upstream-key" in str(pro.seen[0][2])


@pytest.mark.parametrize(("path", "anthropic"), [("/v1/chat/completions", False), ("/v1/messages", True)])
def test_a_token_no_pool_serves_is_a_403_in_the_routes_shape_naming_the_claim(
    members: tuple[RecordingMember, RecordingMember], monkeypatch: pytest.MonkeyPatch, path: str, anthropic: bool
) -> None:
    monkeypatch.setenv("GW_CLAIMS_SECRET", SECRET)
    monkeypatch.setenv("GW_PRO_KEY", "pro-upstream-key")
    pro, ent = members
    ent_pool = {"name": "ent", "claims": ["enterprise"], "member": [{"url": ent.url}]}
    pools = [{**PRO, "member": [{"url": pro.url}]}, ent_pool]
    bg, server = run_gateway(pools)  # every pool guarded: the pro pool is the first, and so the catch-all
    try:
        for claims in ({}, {"tier": "free"}, {"tier": True}, {"tier": "True"}):
            for model in ("pro-large", "other"):
                status, body = ask(server.port, path, model, **claims)
                assert status == 403, (claims, body)
                error = body["error"]
                assert "`tier`" in error["message"]
                assert "free" not in error["message"]
                if anthropic:
                    assert body["type"] == "error"
        assert ask(server.port, path, "anything", tier="pro")[0] == 200
        assert ask(server.port, path, "pro-large", tier="enterprise")[0] == 200
    finally:
        bg.run(server.close(0.2))
        bg.close()
    assert len(pro.seen) == 1
    assert len(ent.seen) == 1


def refused(port: int, authorization: str, request_id: str = "") -> tuple[int, dict[str, str], Any]:
    body = {"model": "pro-large", "messages": [{"role": "user", "content": "hi"}]}
    extra = f"Authorization: {authorization}\r\n" + (f"X-Request-Id: {request_id}\r\n" if request_id else "")
    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        sock.sendall(post("/v1/chat/completions", body, extra=extra))
        status, headers, rest = read_head(sock)
        while len(rest) < int(headers.get("content-length", "0")):
            rest += sock.recv(65536)
    return status, headers, json.loads(rest)


def test_a_refused_token_is_logged_under_the_request_id_its_client_gets(
    members: tuple[RecordingMember, RecordingMember], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A 401 (a bad token) and a 403 (a token no pool serves) were answered with no request id, and a 403 was not
    logged at all: an operator could not find what a refused client reports. Each now has the client's id, or one
    of its own, in its header, its message and its log line, with the reason the client is not told."""
    monkeypatch.setenv("GW_CLAIMS_SECRET", SECRET)
    monkeypatch.setenv("GW_PRO_KEY", "pro-upstream-key")
    pro, _ = members
    only_pro = {k: v for k, v in PRO.items() if k != "models"}
    bg, server = run_gateway([{**only_pro, "member": [{"url": pro.url}]}])
    free = jwt.encode({"exp": int(time.time()) + 600, "tier": "free"}, SECRET, algorithm="HS256")
    try:
        with caplog.at_level("WARNING", logger="tokenpath.gateway"):
            answers = [
                refused(server.port, "Bearer not-a-token"),
                refused(server.port, f"Bearer {free}"),
                refused(server.port, f"Bearer {free}", request_id="client-id-7"),
            ]
    finally:
        bg.run(server.close(0.2))
        bg.close()
    assert [status for status, _, _ in answers] == [401, 403, 403]
    assert answers[2][1]["x-request-id"] == "client-id-7"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"request_id"')]
    assert [line["status"] for line in lines] == [401, 403, 403]
    for (_, headers, body), line in zip(answers, lines, strict=True):
        request_id = headers["x-request-id"]
        assert line["request_id"] == request_id
        assert f"(request id {request_id})" in body["error"]["message"]
    assert lines[0]["error"].startswith("unauthorized: ")
    assert lines[1]["error"].startswith("forbidden: ")
    assert "`tier`" in lines[1]["error"]
    assert pro.seen == []
