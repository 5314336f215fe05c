"""`tokenpath record` and `tokenpath origin`: every flag reaches what they run. record's URL, --api, --model, --prompt,
--max-tokens, --header and --api-key-env reach the probe config of the RecordRequest handed to origins.record, its
--seed and --keep-text that request's sampling and redaction, --name (default: --out's stem) the recording's name,
and --out is where the recording is written. origin's NAME, --host, --port and --threads reach process.serve. Both
are replaced by recorders: no server, no stream, no process. Each value given differs from the flag's default, so a
CLI that dropped the flag fails here."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tokenpath.origins.process
import tokenpath.origins.record
from tests.helpers import invoked_once
from tokenpath.cli import app
from tokenpath.origins.catalogue import MAX_THREADS, Origin, Settings
from tokenpath.origins.process import PROMPT
from tokenpath.origins.record import RecordRequest
from tokenpath.wire.apis import Api

URL = "http://127.0.0.1:9"


@dataclass
class FakeRecording:
    """What the command reads of the recording origins.record returns."""

    name: str
    source: dict[str, Any] = field(default_factory=dict)

    def dumps(self) -> str:
        return f'{{"name": "{self.name}"}}'

    def describe(self) -> str:
        return self.name


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[RecordRequest]:
    seen: list[RecordRequest] = []

    def record(request: RecordRequest) -> FakeRecording:
        seen.append(request)
        return FakeRecording(request.name)

    monkeypatch.setattr(tokenpath.origins.record, "record", record)
    return seen


def record(requests: list[RecordRequest], *args: str) -> RecordRequest:
    return invoked_once(requests, "record", URL, *args)[0]


def test_the_request_flags_reach_the_probe_config(
    requests: list[RecordRequest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVER_KEY", "sk-test")
    out = str(tmp_path / "r.json")
    flags = ["--api", "anthropic", "--model", "m1", "--prompt", "say hi", "--max-tokens", "7"]
    request = record(requests, "--out", out, *flags, "--header", "X-A:1", "--api-key-env", "MY_SERVER_KEY")
    probe = request.probe
    assert probe.url == URL
    assert probe.api is Api.ANTHROPIC  # the default: openai
    assert (probe.model, probe.prompt, probe.max_tokens) == ("m1", "say hi", 7)  # the defaults: default, PROMPT, 32
    assert probe.headers == (("X-A", "1"),)
    assert probe.api_key == "sk-test"


def test_the_defaults_are_openai_and_the_counting_prompt(requests: list[RecordRequest], tmp_path: Path) -> None:
    probe = record(requests, "--out", str(tmp_path / "r.json")).probe
    assert (probe.api, probe.model, probe.prompt, probe.max_tokens) == (Api.OPENAI, "default", PROMPT, 32)


def test_seed_and_keep_text_reach_the_request(requests: list[RecordRequest], tmp_path: Path) -> None:
    request = record(requests, "--out", str(tmp_path / "r.json"), "--seed", "5", "--keep-text")
    assert request.seed == 5  # the default: 1
    assert request.redact is False  # the default: redacted
    assert ("seed", 5) in request.config().extra_body


def test_the_name_is_outs_stem_unless_given(requests: list[RecordRequest], tmp_path: Path) -> None:
    assert record(requests, "--out", str(tmp_path / "chat.json")).name == "chat"
    requests.clear()
    assert record(requests, "--out", str(tmp_path / "chat.json"), "--name", "mine").name == "mine"


def test_out_is_where_the_recording_is_written(requests: list[RecordRequest], tmp_path: Path) -> None:
    out = tmp_path / "kept.json"
    record(requests, "--out", str(out))  # the default: recording.json in the working directory
    assert out.read_text() == '{"name": "kept"}'


@dataclass(frozen=True, slots=True)
class Served:
    origin: Origin
    settings: Settings
    host: str
    port: int


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Served]:
    seen: list[Served] = []

    def serve(origin: Origin, settings: Settings, host: str, port: int, say: Any) -> None:
        seen.append(Served(origin, settings, host, port))

    monkeypatch.setattr(tokenpath.origins.process, "serve", serve)
    return seen


def origin(served: list[Served], *args: str) -> Served:
    return invoked_once(served, "origin", *args)[0]


def test_origin_name_host_and_port_reach_the_server(served: list[Served]) -> None:
    got = origin(served, "llama-cpp-python", "--host", "127.0.0.2", "--port", "8123")  # the defaults: 127.0.0.1, 0
    assert got.origin.name == "llama-cpp-python"
    assert (got.host, got.port) == ("127.0.0.2", 8123)


def test_origin_threads_reach_the_settings(served: list[Served]) -> None:
    threads = MAX_THREADS + 3  # never this machine's default, which is at most MAX_THREADS
    got = origin(served, "llama-server", "--threads", str(threads))
    assert got.settings == replace(Settings.for_this_machine(), threads=threads)  # nothing else changed


def test_origin_threads_default_to_this_machines(served: list[Served]) -> None:
    assert origin(served, "llama-server").settings == Settings.for_this_machine()


@pytest.mark.parametrize(
    ("flags", "said"),
    [(["--port", "-1"], "--port -1"), (["--port", "65536"], "--port 65536"), (["--threads", "0"], "--threads 0")],
)
def test_origin_refuses_a_port_or_threads_out_of_range(served: list[Served], flags: list[str], said: str) -> None:
    """They were passed on to the server (llama.cpp takes --threads 0 or less for its own default, unsaid; -1 is no
    port): each is refused before anything starts, naming the flag."""
    out = CliRunner().invoke(app, ["origin", "llama-server", *flags])
    assert out.exit_code == 2, out.output
    assert said in out.output
    assert served == []


def test_text_that_could_not_be_hidden_is_said_on_stderr(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Counted in the file's source only: a recording meant for sharing kept text without a word."""
    monkeypatch.setattr(tokenpath.origins.record, "record", lambda r: FakeRecording(r.name, {"unredacted_events": 2}))
    out = CliRunner().invoke(app, ["record", URL, "--out", str(tmp_path / "r.json")])
    assert out.exit_code == 0, out.output
    assert "2 events keep text that could not be hidden" in out.output
