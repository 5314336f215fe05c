"""What each official SDK does with each kind of cut (issue 36 §2, docs/findings.md "What the SDKs do with a cut"):
a scripted upstream streams each format's sample (tests/wire/samples.py) up to its final event, then ends the body
each way — whole, the last chunk without the final event (cut_silent), the format's error frame, no last chunk (a
body cut short), a reset — and the SDK's own streaming call reads it. The finding this pins: on a silent cut every
SDK ends its iteration as if the answer were whole; only a client that knows the format (tokenpath's classifier)
can tell."""

from __future__ import annotations

import gc
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import accept_each
from tests.wire.samples import ERRORS, STREAMS
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.reader import frame_reader

WHOLE, SILENT, ERROR, TRUNCATED, RESET = "whole", "cut_silent", "error frame", "no last chunk", "reset"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def before_and_final(api: Api) -> tuple[bytes, bytes]:
    """The sample stream split before the frame that ends it."""
    body, _ = STREAMS[api]
    reader = frame_reader(api)
    frames = [*reader.feed(body), *reader.close()]
    at = next(i for i, frame in enumerate(frames) if reader.ends(frame))
    return b"".join(f.raw for f in frames[:at]), b"".join(f.raw for f in frames[at:])


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)


@pytest.fixture
def upstream() -> Iterator[Callable[[Api, str], int]]:
    listeners: list[socket.socket] = []

    def serve(api: Api, how: str) -> int:
        before, final = before_and_final(api)
        error = ERRORS[api][-1]  # Responses: the `error` event; Bedrock: an error message

        def handle(conn: socket.socket) -> None:
            with conn:
                _read_request(conn)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: %b\r\nTransfer-Encoding: chunked\r\n\r\n"
                conn.sendall(head % SPECS[api].content_type.encode() + chunk(before))
                time.sleep(0.05)
                if how == WHOLE:
                    conn.sendall(chunk(final) + b"0\r\n\r\n")
                elif how == SILENT:
                    conn.sendall(b"0\r\n\r\n")
                elif how == ERROR:
                    conn.sendall(chunk(error) + b"0\r\n\r\n")
                elif how == RESET:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # TRUNCATED: the connection closes after the silence, with no last chunk

        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        accept_each(listener, handle)
        return int(listener.getsockname()[1])

    yield serve
    for listener in listeners:
        listener.close()


# Each SDK's client is closed when its stream ends, whole or cut: a pooled connection left to the garbage collector
# is a ResourceWarning raised inside whichever test runs next on the worker (CI saw it in a Bedrock case).
def openai_chat(port: int) -> list[Any]:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        return [chunk.choices[0].delta.content if chunk.choices else None for chunk in stream]


def openai_responses(port: int) -> list[Any]:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0) as client:
        return [event.type for event in client.responses.create(model="m", input="hi", stream=True)]


def anthropic_messages(port: int) -> list[Any]:
    anthropic = pytest.importorskip("anthropic")
    messages = [{"role": "user", "content": "hi"}]
    with anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="x", max_retries=0) as client:
        stream = client.messages.create(model="m", max_tokens=5, messages=messages, stream=True)
        return [event.type for event in stream]


def gemini(port: int) -> list[Any]:
    genai = pytest.importorskip("google.genai")
    options = genai.types.HttpOptions(base_url=f"http://127.0.0.1:{port}")
    with genai.Client(api_key="x", http_options=options) as client:
        return [r.text for r in client.models.generate_content_stream(model="m", contents="hi")]


def bedrock(port: int) -> list[Any]:
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=Config(retries={"max_attempts": 1}),
    )
    answer: dict[str, Any] = {}
    try:
        answer = client.converse_stream(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])
        return [next(iter(event)) for event in answer["stream"]]
    finally:
        # The stream first: closing the client clears only its pool's idle connections, and an EventStreamError
        # raised mid-stream leaves the streaming one checked out.
        if "stream" in answer:
            answer["stream"].close()
        client.close()


SDKS: dict[Api, Callable[[int], list[Any]]] = {
    Api.OPENAI: openai_chat,
    Api.RESPONSES: openai_responses,
    Api.ANTHROPIC: anthropic_messages,
    Api.GEMINI: gemini,
    Api.BEDROCK: bedrock,
}
# What each SDK does (observed: openai 3.63, anthropic 2.17, google-genai 3.6.1, boto3 1.44.18). "ends": the
# iteration ends without an error, its last item given; otherwise the exception's class name.
FINDINGS: dict[tuple[Api, str], str] = {
    (Api.OPENAI, WHOLE): "ends",
    (Api.OPENAI, SILENT): "ends",
    (Api.OPENAI, ERROR): "APIError",
    (Api.OPENAI, TRUNCATED): "APIConnectionError",
    (Api.OPENAI, RESET): "APIConnectionError",
    (Api.RESPONSES, WHOLE): "ends",
    (Api.RESPONSES, SILENT): "ends",
    (Api.RESPONSES, ERROR): "ends",  # the `error` event is yielded as an event, never raised
    (Api.RESPONSES, TRUNCATED): "APIConnectionError",
    (Api.RESPONSES, RESET): "APIConnectionError",
    (Api.ANTHROPIC, WHOLE): "ends",
    (Api.ANTHROPIC, SILENT): "ends",
    (Api.ANTHROPIC, ERROR): "APIStatusError",
    (Api.ANTHROPIC, TRUNCATED): "APIConnectionError",
    (Api.ANTHROPIC, RESET): "APIConnectionError",
    (Api.GEMINI, WHOLE): "ends",
    (Api.GEMINI, SILENT): "ends",
    (Api.GEMINI, ERROR): "ServerError",
    (Api.GEMINI, TRUNCATED): "RemoteProtocolError",  # the HTTP library's own, not wrapped by the SDK
    (Api.GEMINI, RESET): "ReadError",
    (Api.BEDROCK, WHOLE): "ends",
    (Api.BEDROCK, SILENT): "ends",
    (Api.BEDROCK, ERROR): "EventStreamError",
    (Api.BEDROCK, TRUNCATED): "ProtocolError",  # urllib3's, not wrapped by botocore
    (Api.BEDROCK, RESET): "ProtocolError",
}
LAST = {  # the last item each SDK gave when a cut ended its iteration: never the final event
    Api.OPENAI: (None, "Hello"),  # the finish_reason chunk came; [DONE] did not
    Api.RESPONSES: ("response.output_text.done",),
    Api.ANTHROPIC: ("message_delta",),
    Api.GEMINI: ("Hello",),
    Api.BEDROCK: ("contentBlockStop",),
}


@pytest.mark.parametrize(("api", "how"), sorted(FINDINGS), ids=lambda x: getattr(x, "value", x))
def test_what_the_sdk_does_with_each_end(upstream: Callable[[Api, str], int], api: Api, how: str) -> None:
    port = upstream(api, how)
    expected = FINDINGS[(api, how)]
    raised, items = None, []
    try:
        items = SDKS[api](port)
    except Exception as exc:  # which one it raises is the finding
        raised = f"{type(exc).__name__}"
    assert (raised or "ends") == expected, f"{api.value} {how}: {raised or items[-3:]}"
    if how == SILENT:
        assert items[-1] in LAST[api], items[-3:]  # the caller got no word that the final event never came
    # A connection the SDK call left open is collected here, its ResourceWarning raised in this test, not at random
    # inside whichever test the collector next runs in on this worker.
    gc.collect()
