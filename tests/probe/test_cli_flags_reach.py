"""`tokenpath probe`'s request flags reach the bytes it sends: --prompt, --model, --max-tokens in the body, --header and
the --api-key-env key as headers, the stub's pacing flags as the body's `tokenpath` member, --connect-timeout as the
connect's deadline. The socket is replaced by a scripted peer (no network) that records what the probe wrote; each
flag is given a value other than its default, so a flag the CLI ignores fails its test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from typer.testing import CliRunner

import tokenpath.probe.stream
from tokenpath.cli import app
from tokenpath.probe.transport import Target, TLSOptions
from tokenpath.wire.request import DEFAULT_PROMPT

URL = "http://127.0.0.1:9/v1"  # never dialled: the connection is the scripted peer
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


ANSWER = HEAD + chunk(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n') + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


@dataclass
class Peer:
    """One connection the probe opened: what it wrote, the connect timeout it asked for; answers one short stream."""

    connect_timeout_s: float
    answer: bytes = ANSWER
    sent: bytes = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, timeout_s: float) -> bytes:
        data, self.answer = self.answer, b""
        return data

    def drain(self) -> bytes:
        return b""

    def close(self) -> None:
        pass

    def request(self) -> tuple[list[tuple[str, str]], dict[str, Any]]:
        """The request's headers (after the request line) and its JSON body."""
        head, _, body = self.sent.partition(b"\r\n\r\n")
        headers = []
        for line in head.decode().split("\r\n")[1:]:
            name, _, value = line.partition(": ")
            headers.append((name, value))
        return headers, json.loads(body)


@dataclass
class Peers:
    opened: list[Peer] = field(default_factory=list)

    def only(self) -> Peer:
        assert len(self.opened) == 1
        return self.opened[0]


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> Peers:
    seen = Peers()

    def open_connection(target: Target, *, connect_timeout_s: float, tls: TLSOptions, **_: Any) -> Peer:
        seen.opened.append(Peer(connect_timeout_s))
        return seen.opened[-1]

    monkeypatch.setattr(tokenpath.probe.stream, "open_connection", open_connection)
    monkeypatch.delenv("TOKENPATH_API_KEY", raising=False)
    return seen


def probe(*args: str) -> None:
    out = CliRunner().invoke(app, ["probe", URL, *args])
    assert out.exit_code == 0, out.output


def test_prompt_is_the_user_message_sent(peers: Peers) -> None:
    probe("--prompt", "Say one word.")
    _, body = peers.only().request()
    assert body["messages"] == [{"role": "user", "content": "Say one word."}]
    assert DEFAULT_PROMPT.encode() not in peers.only().sent


def test_model_is_the_model_sent(peers: Peers) -> None:
    probe("--model", "gpt-4o-mini")
    _, body = peers.only().request()
    assert body["model"] == "gpt-4o-mini"


def test_max_tokens_is_sent(peers: Peers) -> None:
    probe("--max-tokens", "7")
    _, body = peers.only().request()
    assert body["max_tokens"] == 7


def test_each_header_is_sent(peers: Peers) -> None:
    probe("--header", "X-Trace: abc", "--header", "X-Team:blue")
    headers, _ = peers.only().request()
    assert ("X-Trace", "abc") in headers
    assert ("X-Team", "blue") in headers


@pytest.mark.parametrize(
    ("api", "credential"),
    [("openai", ("Authorization", "Bearer sk-named")), ("anthropic", ("x-api-key", "sk-named"))],
)
def test_the_api_key_env_key_is_sent_as_the_format_s_credential(
    api: str, credential: tuple[str, str], peers: Peers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default variable holds another key: a CLI that ignored --api-key-env would send that one.
    monkeypatch.setenv("TOKENPATH_API_KEY", "sk-default")
    monkeypatch.setenv("TOKENPATH_TEST_NAMED_KEY", "sk-named")
    probe("--api", api, "--api-key-env", "TOKENPATH_TEST_NAMED_KEY")
    headers, _ = peers.only().request()
    assert credential in headers
    assert b"sk-default" not in peers.only().sent


def test_connect_timeout_is_the_connect_s_deadline(peers: Peers) -> None:
    probe("--connect-timeout", "2.5")
    assert peers.only().connect_timeout_s == 2.5


@pytest.mark.parametrize(
    ("flags", "member"),
    [
        (["--interval-ms", "25"], {"interval_ms": 25.0}),
        (["--reasoning-tokens", "3"], {"reasoning_tokens": 3}),
        (["--first-event-bytes", "900"], {"first_event_bytes": 900}),
        (["--pause-ms", "300", "--pause-after", "2"], {"pause_ms": 300.0, "pause_after": 2}),
        (["--head-at", "first-token"], {"head_at": "first-token"}),
    ],
    ids=["interval-ms", "reasoning-tokens", "first-event-bytes", "pause-after", "head-at"],
)
def test_a_pacing_flag_is_the_tokenpath_member_sent(flags: list[str], member: dict[str, Any], peers: Peers) -> None:
    probe(*flags)
    _, body = peers.only().request()
    assert body["tokenpath"] == member


@pytest.mark.parametrize("flags", [["--cacert", "/tmp/ca.pem"], ["--insecure"], ["--max-tokens", "0"]])
def test_a_flag_that_would_not_apply_is_refused_before_a_connection(flags: list[str], peers: Peers) -> None:
    """--cacert and --insecure beside an http:// URL verify nothing; max_tokens 0 or below asks for no answer."""
    out = CliRunner().invoke(app, ["probe", URL, *flags])
    assert out.exit_code == 2, out.output
    assert flags[0] in out.output
    assert peers.opened == []


@pytest.mark.parametrize(("api", "header"), [("openai", "Authorization"), ("anthropic", "X-Api-Key")])
def test_a_header_named_as_the_keys_beside_a_key_is_refused(
    api: str, header: str, peers: Peers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both were sent: two credentials, the server's pick. A header of another format's key name is not the key's."""
    monkeypatch.setenv("MY_KEY", "sk-test")
    out = CliRunner().invoke(app, ["probe", URL, "--api", api, "--api-key-env", "MY_KEY", "--header", f"{header}: x"])
    assert out.exit_code == 2, out.output
    assert f"{header} is given twice" in out.output
    assert peers.opened == []
    probe("--api-key-env", "MY_KEY", "--header", "X-Api-Key: x")  # openai's key is Authorization: both are sent


def test_frames_that_are_not_utf8_are_counted_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event stream is UTF-8 (WHATWG): a stream whose frames were not was called fine, the count nowhere shown
    (the monitor reports it; the probe did not)."""
    bad = HEAD + chunk(b"data: \xff\xfe\xc3( bad\n\n") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    def open_connection(target: Target, *, connect_timeout_s: float, tls: TLSOptions, **_: Any) -> Peer:
        return Peer(connect_timeout_s, answer=bad)

    monkeypatch.setattr(tokenpath.probe.stream, "open_connection", open_connection)
    monkeypatch.delenv("TOKENPATH_API_KEY", raising=False)
    out = CliRunner().invoke(app, ["probe", URL, "--json"])
    doc = json.loads(out.stdout)
    assert doc["runs"][0]["invalid_utf8_frames"] == 1
    shown = CliRunner().invoke(app, ["probe", URL], env={"COLUMNS": "200"})
    assert "run 1: 1 frames are not UTF-8" in shown.output
