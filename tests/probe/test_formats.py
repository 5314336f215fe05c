"""`probe --api FORMAT`: each format's route, request and Content-Type; its frames; TTFT at the first content
frame and the first token at the first reasoning-or-content frame; the wrong format named with the --api that reads
it. Scripted transports with a fake clock (exact timings), then real loopback servers (tests.helpers.accept_each)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.helpers import HTTP_APIS, accept_each
from tests.probe.test_client import FakeClock, ScriptedTransport
from tests.wire.samples import ERRORS, STREAMS, sse
from tokenpath.errors import ContentTypeError, HTTPStatusError, StreamFormatError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import probe_results, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace, TraceRecorder
from tokenpath.probe.transport import Target
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import frame_reader

MS = 1_000_000
APIS = HTTP_APIS


def head(api: Api, content_type: str | None = None, status: str = "200 OK") -> bytes:
    ct = content_type or SPECS[api].content_type
    return f"HTTP/1.1 {status}\r\nContent-Type: {ct}\r\nConnection: close\r\n\r\n".encode()


def frames_of(api: Api) -> tuple[list[bytes], list[FrameKind]]:
    reader = frame_reader(api)
    body, kinds = STREAMS[api]
    return [f.raw for f in reader.feed(body)], kinds


def paced(api: Api) -> list[tuple[float, bytes | None]]:
    """The head and the frames before the reasoning at 1 ms, the reasoning frame 10 ms later, the first content
    frame 30 ms after that, the rest 1 ms later; then EOF."""
    raws, kinds = frames_of(api)
    r, c = kinds.index(FrameKind.REASONING), kinds.index(FrameKind.CONTENT)
    return [
        (1, head(api) + b"".join(raws[:r])),
        (10, b"".join(raws[r:c])),
        (30, raws[c]),
        (1, b"".join(raws[c + 1 :])),
    ]


def run(
    api: Api, steps: list[tuple[float, bytes | None]], url: str = "http://127.0.0.1:9", **cfg: object
) -> tuple[ScriptedTransport, Trace]:
    clock = FakeClock()
    transport = ScriptedTransport(clock, steps)
    config = ProbeConfig(url=url, api=api, model="m-1", **cfg)  # type: ignore[arg-type]

    def connect(target: Target, c: ProbeConfig) -> ScriptedTransport:
        return transport

    return transport, probe_stream(config, stream_id="tp-s1", clock=clock, connect=connect)


def request_of(transport: ScriptedTransport) -> tuple[list[str], dict[str, object]]:
    head_bytes, _, body = transport.sent.partition(b"\r\n\r\n")
    return head_bytes.decode().split("\r\n"), json.loads(body)


ROUTES = {
    Api.OPENAI: "/v1/chat/completions",
    Api.RESPONSES: "/v1/responses",
    Api.ANTHROPIC: "/v1/messages",
    Api.GEMINI: "/v1beta/models/m-1:streamGenerateContent?alt=sse",
    Api.BEDROCK: "/model/m-1/converse-stream",
    Api.OLLAMA: "/api/chat",
}


@pytest.mark.parametrize("api", APIS)
def test_ttft_is_the_first_content_frame_and_first_token_the_first_reasoning(api: Api) -> None:
    _, trace = run(api, paced(api))
    metrics = run_metrics(trace)
    assert metrics.first_token_ms == 11.0  # the reasoning frame's arrival
    assert metrics.ttft_ms == 41.0  # the content frame's, 30 ms later: reasoning is never TTFT
    kinds = STREAMS[api][1]
    assert metrics.frames == len(kinds)
    assert metrics.arrivals == (4 if kinds[0] is not FrameKind.REASONING else 3)  # the head alone is no arrival
    assert metrics.ttft_note == ""
    assert trace.api is api


@pytest.mark.parametrize("api", APIS)
def test_the_request_uses_the_format_s_route_body_and_headers(api: Api) -> None:
    transport, _ = run(api, paced(api))
    lines, body = request_of(transport)
    assert lines[0] == f"POST {ROUTES[api]} HTTP/1.1"
    assert f"Accept: {SPECS[api].content_type}" in lines
    assert "X-Tokenpath-Stream: tp-s1" in lines  # every format
    assert ("anthropic-version: 2023-06-01" in lines) is (api is Api.ANTHROPIC)
    in_body = "tp-s1" in json.dumps(body)  # where the format has a user field
    assert in_body is (api in (Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC))


def test_a_base_url_with_v1_and_a_full_endpoint_both_reach_the_route() -> None:
    for url in ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1/messages"):
        transport, _ = run(Api.ANTHROPIC, paced(Api.ANTHROPIC), url=url)
        assert transport.sent.startswith(b"POST /v1/messages HTTP/1.1\r\n")


def test_the_api_key_goes_where_the_format_wants_it() -> None:
    transport, _ = run(Api.GEMINI, paced(Api.GEMINI), api_key="sekret")
    assert b"x-goog-api-key: sekret\r\n" in transport.sent
    assert b"Authorization" not in transport.sent


def test_the_body_options_are_merged_in_every_format() -> None:
    transport, _ = run(Api.BEDROCK, paced(Api.BEDROCK), extra_body=(("tokenpath", {"tokens": 3}),))
    assert request_of(transport)[1]["tokenpath"] == {"tokens": 3}


def test_a_chunked_event_stream_ends_with_its_last_chunk() -> None:
    body = STREAMS[Api.BEDROCK][0]
    chunked = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
    steps: list[tuple[float, bytes | None]] = [
        (1, head(Api.BEDROCK).replace(b"Connection: close", b"Transfer-Encoding: chunked") + chunked)
    ]
    _, trace = run(Api.BEDROCK, steps)
    assert trace.frame_count == 7
    assert trace.t_end_ns == MS


@pytest.mark.parametrize("api", [Api.BEDROCK, Api.OLLAMA])
def test_a_message_cut_short_at_the_end_is_a_stream_format_error(api: Api) -> None:
    body = STREAMS[api][0]
    with pytest.raises(StreamFormatError, match="truncated"):
        run(api, [(1, head(api) + body[:-3])])


def test_an_ndjson_last_line_without_a_line_end_arrives_with_the_end_of_the_body() -> None:
    body = STREAMS[Api.OLLAMA][0]
    _, trace = run(Api.OLLAMA, [(1, head(Api.OLLAMA) + body.rstrip(b"\n"))])
    assert trace.frame_count == 3
    assert [(r.nbytes > 0, r.frames) for r in trace.reads] == [(True, 2), (False, 1)]  # the EOF completed the last


def test_a_binary_format_with_an_error_status_reports_the_status_not_a_bad_crc() -> None:
    steps: list[tuple[float, bytes | None]] = [
        (1, head(Api.BEDROCK, "application/json", "429 Too Many Requests") + b'{"message":"Too many requests"}')
    ]
    with pytest.raises(HTTPStatusError, match=r"HTTP 429 .*Too many requests"):
        run(Api.BEDROCK, steps)


@pytest.mark.parametrize(
    ("api", "content_type", "hint"),
    [
        (Api.BEDROCK, "text/event-stream",
         "an SSE stream, which --api bedrock does not read: pass --api openai or responses or anthropic or gemini"),
        (Api.OPENAI, "application/vnd.amazon.eventstream", "the bedrock format: pass --api bedrock"),
        (Api.ANTHROPIC, "application/x-ndjson", "the ollama format: pass --api ollama"),
        (Api.OLLAMA, "application/json", "is 'stream' honoured?"),
    ],
)  # fmt: skip
def test_a_wrong_content_type_is_a_clear_error_that_names_the_format(api: Api, content_type: str, hint: str) -> None:
    body = STREAMS[Api.ANTHROPIC][0]  # SSE bytes: never fed to a binary reader before the head is checked
    with pytest.raises(ContentTypeError) as caught:
        run(api, [(1, head(api, content_type) + body)])
    assert f"expected Content-Type {SPECS[api].content_type}, got {content_type}" in str(caught.value)
    assert hint in str(caught.value)


@pytest.mark.parametrize(
    ("api", "stream_of", "says"),
    [
        (Api.OPENAI, Api.ANTHROPIC, "the Anthropic format: pass --api anthropic"),
        (Api.OPENAI, Api.RESPONSES, "the Responses API format: pass --api responses"),
        (Api.OPENAI, Api.GEMINI, "the Gemini format: pass --api gemini"),
        (Api.ANTHROPIC, Api.OPENAI, "the OpenAI format: pass --api openai"),
        (Api.GEMINI, Api.RESPONSES, "the Responses API format: pass --api responses"),
    ],
)
def test_a_stream_in_another_format_has_no_ttft_and_names_the_api_to_pass(api: Api, stream_of: Api, says: str) -> None:
    _, trace = run(api, [(1, head(api) + STREAMS[stream_of][0])])
    metrics = run_metrics(trace)
    assert metrics.ttft_ms is None
    assert metrics.first_token_ms is None
    assert says in metrics.ttft_note


def test_a_foreign_format_the_probe_cannot_name_says_so() -> None:
    _, trace = run(Api.OPENAI, [(1, head(Api.OPENAI) + sse({"anything": 1}))])
    assert "another API format" in run_metrics(trace).ttft_note


@pytest.mark.parametrize("api", APIS)
def test_an_error_frame_before_any_content_is_named_in_the_note(api: Api) -> None:
    raws, kinds = frames_of(api)
    first = [raw for raw, kind in zip(raws, kinds, strict=True) if kind is FrameKind.CONTROL][:1]
    _, trace = run(api, [(1, head(api) + b"".join(first) + ERRORS[api][0])])
    note = run_metrics(trace).ttft_note
    [error] = frame_reader(api).feed(ERRORS[api][0])
    assert note.startswith(f"no content frame in {len(first) + 1} frames: the stream carried an error: ")
    assert (error.data or b"").decode()[:60] in note  # the error's own words


def test_only_reasoning_gives_a_first_token_and_no_ttft() -> None:
    reasoning = sse({"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]})
    _, trace = run(Api.OPENAI, [(1, head(Api.OPENAI) + reasoning), (5, b"data: [DONE]\n\n")])
    metrics = run_metrics(trace)
    assert (metrics.first_token_ms, metrics.ttft_ms) == (1.0, None)
    assert "only reasoning" in metrics.ttft_note


def test_the_json_document_names_the_format_and_the_first_token() -> None:
    _, trace = run(Api.OLLAMA, paced(Api.OLLAMA))
    doc = probe_results("http://x", [run_metrics(trace)], Api.OLLAMA).to_json()
    assert doc["api"] == "ollama"
    assert doc["runs"][0]["first_token_ms"] == 11.0
    assert doc["summary"]["first_token_ms"] == 11.0
    assert doc["summary"]["ttft_ms"] == 41.0


def test_event_stream_frames_are_not_counted_as_invalid_utf8() -> None:
    _, trace = run(Api.BEDROCK, paced(Api.BEDROCK))
    assert trace.invalid_utf8_frames == 0


def test_the_recorder_reads_an_openai_stream_by_default() -> None:
    rec = TraceRecorder("s", 0)
    rec.on_read(MS, head(Api.OPENAI) + STREAMS[Api.OPENAI][0])
    assert (rec.trace.api, rec.trace.first_token, rec.trace.first_content) == (Api.OPENAI, 1, 2)


def test_the_cli_refuses_an_unknown_format_with_the_list() -> None:
    from typer.testing import CliRunner

    from tokenpath.cli import app

    out = CliRunner().invoke(app, ["probe", "http://127.0.0.1:9", "--api", "grpc"])
    assert out.exit_code == 2
    assert "openai, responses, realtime, anthropic, gemini, bedrock, ollama" in out.output


# --- real loopback servers writing each format's bytes ------------------------------------------------------------


class FormatServer:
    """Answers each connection with one format's stream: the head and the frames before the first reasoning at
    once, the reasoning 50 ms later, the first content 150 ms after that, the rest, then close. Keeps each request."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        accept_each(self.listener, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head_bytes, _, body = data.partition(b"\r\n\r\n")
            length = int(next(h for h in head_bytes.split(b"\r\n") if h.lower().startswith(b"content-length:"))[15:])
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append(head_bytes + b"\r\n\r\n" + body)
            for delay_ms, piece in paced(self.api):
                time.sleep(delay_ms / 1000 * 5)  # 5, 50, 150, 5 ms
                assert piece is not None
                conn.sendall(piece)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FormatServer]:
    s = FormatServer(request.param)
    yield s
    s.close()


@pytest.mark.e2e
@pytest.mark.parametrize("server", APIS, indirect=True)
def test_probe_reads_each_format_from_a_real_server(server: FormatServer) -> None:
    cfg = ProbeConfig(url=server.url, api=server.api, model="m-1", total_timeout_s=10)
    metrics = run_metrics(probe_stream(cfg, stream_id="tp-real"))
    assert metrics.status == 200
    assert metrics.frames == len(STREAMS[server.api][1])
    assert metrics.first_token_ms is not None
    assert metrics.ttft_ms is not None
    assert metrics.ttft_ms - metrics.first_token_ms >= 140  # the content frame came 150 ms after the reasoning
    [request] = server.requests
    assert request.startswith(f"POST {ROUTES[server.api]} HTTP/1.1\r\n".encode())
    assert b"X-Tokenpath-Stream: tp-real\r\n" in request
