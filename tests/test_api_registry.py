"""Each API format is declared once (wire/apispec.ApiSpec, one module per format in wire/formats/, the registry in
wire/apis.py): a fictitious seventh format, built here and added to the registry, is read, answered, relayed, named
and listed by every table and help text without a line anywhere else; and no module outside the registry's and the
stub's format modules names a format (beyond the default one)."""

from __future__ import annotations

import ast
import json
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.gateway import routes, streamformat
from tokenpath.gateway.streamformat import FAULTS
from tokenpath.load.tokens import content_text
from tokenpath.monitor.otel_names import GenAIAttributes
from tokenpath.probe.metrics import no_ttft_note
from tokenpath.probe.trace import TraceRecorder
from tokenpath.wire.apis import DEFAULT_API, SPECS, Api, api_names, parse_api, recognise
from tokenpath.wire.apispec import ApiSpec, ErrorReply, Fault, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.errorshape import error_reply
from tokenpath.wire.formats.shared import json_value
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import apis_for_content_type, frame_reader
from tokenpath.wire.request import api_headers, endpoint_target, stream_body
from tokenpath.wire.sse import Frame

SRC = Path(__file__).parent.parent / "src" / "tokenpath"


class Extra(StrEnum):
    MISTRAL = "mistral"


MISTRAL = cast(Api, Extra.MISTRAL)  # a seventh format: not an Api member, so nothing could have listed it


def _classify(frame: Frame) -> FrameKind:
    obj = json_value(frame.data)
    kind = str(obj.get("kind")) if isinstance(obj, dict) else ""
    kinds = {"hello": FrameKind.CONTROL, "token": FrameKind.CONTENT, "end": FrameKind.DONE, "error": FrameKind.ERROR}
    return kinds.get(kind, FrameKind.FOREIGN)


def _recognises(shape: Shape) -> bool:
    return isinstance(shape.obj, dict) and shape.obj.get("kind") in ("hello", "token", "end", "error")


def _error_frame(failure: StreamFailure, last: bytes) -> bytes:
    return (
        b"data: " + json.dumps({"kind": "error", "why": failure.fault.value, "code": failure.code}).encode() + b"\n\n"
    )


def _stream_body(ask: StreamAsk) -> dict[str, Any]:
    return {"prompt": ask.prompt, "limit": ask.max_tokens, "caller": ask.stream_id}


FAKE = ApiSpec(
    api=MISTRAL,
    framing=Framing.SSE,
    route="/v9/mistral/{model}:stream",
    content_type="application/x-mistral-stream",
    display_name="Mistral",
    otel_operation="chat",
    otel_provider="mistral_ai",
    classify=_classify,
    recognises=_recognises,
    content_text=lambda obj: obj.get("text") if isinstance(obj, dict) else None,
    error_reply=lambda status, message, code: ErrorReply(status, json.dumps({"oops": message}).encode()),
    error_frame=_error_frame,
    stream_body=_stream_body,
    ends_also=lambda frame: b'"last": true' in (frame.data or b""),
    key_header="X-Mistral-Key",
    headers=(("mistral-version", "9"),),
    aliases=("/v9/generate/{model}",),
)
BODY = (
    b'data: {"kind": "hello"}\n\n'
    b'data: {"kind": "token", "text": " tok7"}\n\n'
    b'data: {"kind": "token", "text": " tok8", "last": true}\n\n'
)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-mistral-stream\r\nConnection: close\r\n\r\n"


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SPECS, MISTRAL, FAKE)


def test_the_registry_holds_one_spec_per_format_under_its_own_name() -> None:
    assert list(SPECS) == list(Api)
    assert all(spec.api is api for api, spec in SPECS.items())
    assert len({spec.display_name for spec in SPECS.values()}) == len(SPECS)


@pytest.mark.usefixtures("registered")
def test_a_new_format_is_parsed_listed_and_read_from_its_spec_alone() -> None:
    assert parse_api(" Mistral ") is MISTRAL
    assert api_names().endswith(", ollama, mistral")
    assert apis_for_content_type("application/x-mistral-stream") == [MISTRAL]
    reader = frame_reader(MISTRAL)
    frames = reader.feed(BODY)
    assert [reader.kind(f) for f in frames] == [FrameKind.CONTROL, FrameKind.CONTENT, FrameKind.CONTENT]
    assert [reader.ends(f) for f in frames] == [False, False, True]
    assert content_text(MISTRAL, frames[1]) == " tok7"
    # read with another format's --api, its frames are recognised as its own, and the note names it
    assert recognise(frame_reader(Api.OPENAI).feed(BODY)[1]) is MISTRAL
    rec = TraceRecorder("s", 0, api=Api.OPENAI)
    rec.on_read(1_000_000, HEAD + BODY)
    assert rec.trace.foreign_api is MISTRAL
    assert "the Mistral format: pass --api mistral" in no_ttft_note(rec.trace)


@pytest.mark.usefixtures("registered")
def test_a_new_format_s_requests_errors_key_and_metric_names_come_from_its_spec() -> None:
    assert stream_body(MISTRAL, model="m", prompt="p", max_tokens=3, stream_id="tp-1") == {
        "prompt": "p",
        "limit": 3,
        "caller": "tp-1",
    }
    assert api_headers(MISTRAL, "tp-1", "k")[1:] == [("mistral-version", "9"), ("X-Mistral-Key", "k")]
    assert endpoint_target("/v9", MISTRAL, "a/b") == "/v9/mistral/a%2Fb:stream"
    assert error_reply(MISTRAL, 503, "busy").body == b'{"oops": "busy"}'
    assert streamformat.upstream_credential(MISTRAL, "k") == ("X-Mistral-Key", "k")
    attributes = GenAIAttributes.of("mistral", "m", "http://127.0.0.1:9/v9", "via")
    assert (attributes.operation, attributes.provider) == ("chat", "mistral_ai")


def test_the_gateway_s_tables_derive_a_new_format_s_relay_key_and_routes() -> None:
    specs = [*SPECS.values(), FAKE]
    relay = streamformat.stream_formats(specs)[MISTRAL]
    assert relay.framing is Framing.SSE
    assert isinstance(relay.new_cut(), streamformat.SSECut)
    assert json.loads(relay.error("m", "total_timeout", b"")[6:]) == {
        "kind": "error",
        "why": "timeout",
        "code": "total_timeout",
    }
    assert streamformat.readers_by_content_type(specs)["application/x-mistral-stream"] is MISTRAL
    assert streamformat.readers_by_content_type(specs)["text/event-stream"] is Api.OPENAI  # the first declared
    assert "x-mistral-key" in streamformat.credential_headers(specs)
    assert streamformat.credential_headers(SPECS.values()) == streamformat.CREDENTIAL_HEADERS
    table = routes.routes(specs)
    assert ("/v9/mistral/{model}:stream", MISTRAL) in table
    assert ("/v9/generate/{model}", MISTRAL) in table
    assert routes.served(specs).endswith(", /v9/mistral/{model}:stream")


def test_every_fault_the_gateway_names_is_one_a_format_can_say() -> None:
    assert set(FAULTS.values()) <= set(Fault)
    for spec in SPECS.values():  # every format says every fault (the tables inside cover them all)
        for fault in Fault:
            assert spec.error_frame(StreamFailure("m", "c", fault), b"")


@pytest.mark.parametrize("command", ["probe", "load", "monitor", "stub"])
def test_every_help_text_lists_the_formats_from_the_registry(command: str) -> None:
    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    assert api_names() in " ".join(out.output.split())


def _names_of_formats(path: Path) -> list[str]:
    """`Api.X` for every format X but the default one, and dict keys spelling a format's name, in one module."""
    names = {api.name for api in Api} - {DEFAULT_API.name}
    values = {api.value for api in Api} - {DEFAULT_API.value}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Api":
            if node.attr in names:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: Api.{node.attr}")
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            found += [f"{path.relative_to(SRC)}:{node.lineno}: {k!r}" for k in keys if k in values]
    return found


def test_no_module_outside_the_format_modules_names_a_format() -> None:
    """What varies with a format is its spec's (wire/formats/) or the stub's writer's (stub/formats/): a table or a
    branch keyed by a format anywhere else is one more place a new format would have to be added."""
    # Which formats a real inference server speaks (origins/catalogue.py) is a fact about that server (measured), not
    # a table a new format must join: a new format is never missing there.
    allowed = (
        *(SRC / "wire" / "formats", SRC / "wire" / "apispec.py", SRC / "stub" / "formats"),
        SRC / "origins" / "catalogue.py",
    )
    modules = [p for p in SRC.rglob("*.py") if not any(p == a or a in p.parents for a in allowed)]
    assert modules
    assert [hit for path in modules for hit in _names_of_formats(path)] == []
