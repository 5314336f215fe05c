"""The stub serving HTTP/2 with prior knowledge on its cleartext port (issue 25): curl and a raw h2 client, many
streams on one connection, one stub write = one DATA frame, the audit join unchanged; HTTP/1.1 on the same port as
before, and an h2c Upgrade still answered in HTTP/1.1."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator

import h2.events
import pytest

from tests.e2e.h2raw import CHAT, RawH2
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stub.control import fetch_audit

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    argv = tokenpath_argv("stub", "--port", "0", "--ttft-ms", "5", "--interval-ms", "5", "--tokens", "10")
    with ServiceProcess(argv, "stub") as proc:  # stopped, and its log removed, on the way out
        assert proc.url is not None
        yield proc.url


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_http2_prior_knowledge_streams_from_the_stub(stub: str) -> None:
    done = subprocess.run(
        ["curl", "-sS", "-N", "--http2-prior-knowledge", "-w", "\n%{http_version}", "-H",
         "content-type: application/json", "-d", json.dumps(CHAT), f"{stub}/v1/chat/completions"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    body, _, version = done.stdout.rpartition(b"\n")
    assert version == b"2"
    assert body.count(b'"content":" ') == 10
    assert body.endswith(b"data: [DONE]\n\n")


def test_streams_share_one_connection_and_each_write_is_one_data_frame(stub: str) -> None:
    client = RawH2(*hostport(stub))
    try:
        sids = [client.request() for _ in range(3)]
        assert client.wait(lambda: set(sids) <= client.ended)
        frames: dict[int, list[bytes]] = {sid: [] for sid in sids}
        for event in client.events:
            if isinstance(event, h2.events.DataReceived) and event.data:
                frames[event.stream_id].append(event.data)
        stream_ids = []
        for sid in sids:
            data = b"".join(frames[sid])
            # the head left with the role delta; then every token, the finish and [DONE] each in a DATA frame of
            # its own: one SSE event per DATA frame, never two, never half of one
            assert all(f.endswith(b"\n\n") and f.count(b"\n\n") == 1 for f in frames[sid][1:])
            assert data.count(b'"content":" ') == 10
            stream_ids.append(client.heads[sid][b"x-tokenpath-stream"].decode())
        audit = fetch_audit(stub, stream_ids, with_log=False)
        assert audit.missing == ()
        assert [e.verdict.state for e in audit.streams] == ["complete"] * 3
        # the join: each stream's logged writes are its DATA frames, one for one. (Not `audit.failed == 0`: that is
        # the stub's 2 ms pacing tolerance, which a loaded host misses now and then, over HTTP/1.1 as over h2.)
        writes = {e.verdict.stream_id: e.verdict.writes for e in audit.streams}
        assert writes == {name: len(frames[sid]) for name, sid in zip(stream_ids, sids, strict=True)}, writes
    finally:
        client.close()


def test_http1_on_the_same_port_is_unchanged_and_an_h2c_upgrade_is_not_taken(stub: str) -> None:
    with socket.create_connection(hostport(stub), timeout=10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                     b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")  # fmt: skip
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    assert head.startswith(b"HTTP/1.1 200 "), head[:80]  # never 101 Switching Protocols
