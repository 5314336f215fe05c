"""`tokenpath load --api FORMAT --accept-encoding VALUE` on real processes: every stream in Anthropic's and Bedrock's
formats is joined to the stub's write log by its first content frame, none lost; through the gzip-flush relay with
`--accept-encoding gzip` the streams come back gzip, are decoded, and join the same way. Small runs (5 streams, 2 s):
functional, not timed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.serve.procs import tokenpath_argv

# The first content is due TTFT_MS after the frames that leave with the head: the gap a wrong join would read.
TTFT_MS = 100
SHORT = ("--concurrency", "5", "--warmup", "0.3", "--duration", "2", "--runs", "1", "--tokens", "10",
         "--ttft-ms", str(TTFT_MS), "--interval-ms", "10", "--client-workers", "1")  # fmt: skip


def load(tmp_path: Path, *args: str) -> dict[str, dict[str, Any]]:
    out = subprocess.run(tokenpath_argv("load", *args, "--out", str(tmp_path)), capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["api"] == args[args.index("--api") + 1]
    return {r["target"]: r for r in doc["levels"]}


def joined_cleanly(row: dict[str, Any]) -> None:
    assert row["errors"] == 0, row["error_samples"]
    assert row["streams"] > 0
    assert row["unjoined"] == 0
    assert row["frames_lost"] == 0
    assert row["frames_out_of_order"] == 0
    # every stream joined to its write, an added TTFT each, but for those the stub's audit failed: a loaded host's stub
    # that missed its own schedule (3 of 42 here under CPU load) is excluded by design, and is no join failure
    assert row["kept"] + row["audit_failed"] == row["streams_total"]
    assert row["kept"] > 0
    assert row["added_ttft_ms"]["p50"] is not None
    assert row["added_frame_delay_ms"]["p99"] is not None  # every later frame mapped to its write by its bytes


def joined_to_the_first_content_write(row: dict[str, Any]) -> None:
    """Direct on loopback adds well under a millisecond (a loaded host: some ms). Joined to a write before the first
    content (the frames that leave with the head, TTFT_MS earlier), it would read as TTFT_MS or more."""
    assert row["added_ttft_ms"]["p50"] < TTFT_MS / 2


def test_bedrock_streams_join_to_the_stub_by_their_first_content_frame(tmp_path: Path) -> None:
    rows = load(tmp_path, *SHORT, "--api", "bedrock")
    row = rows["direct"]
    joined_cleanly(row)
    joined_to_the_first_content_write(row)
    assert (row["api"], row["accept_encoding"], row["content_encoding"]) == ("bedrock", "identity", "identity")


def test_anthropic_through_the_gzip_flush_relay_is_decoded_and_joined(tmp_path: Path, service: Start) -> None:
    stub = service("stub", "--port", "0", "--api", "all", "--tokens", "10", "--ttft-ms", str(TTFT_MS),
                   "--interval-ms", "10", name="stub")  # fmt: skip
    relay = service("relay", "--upstream", netloc(stub.url), "--mode", "gzip-flush", name="gzip-flush")
    rows = load(tmp_path, *SHORT, "--api", "anthropic", "--accept-encoding", "gzip", "--target", relay.url or "",
                "--stub-url", stub.url or "")  # fmt: skip
    for name in ("direct", "target"):
        joined_cleanly(rows[name])
        assert rows[name]["api"] == "anthropic"
        assert rows[name]["accept_encoding"] == "gzip"
    joined_to_the_first_content_write(rows["direct"])
    assert rows["direct"]["content_encoding"] == "identity"  # the stub never compresses
    assert rows["target"]["content_encoding"] == "gzip"  # the relay did, and each stream was decoded


@pytest.mark.parametrize("api", ["anthropic"])
def test_a_stub_that_does_not_serve_the_format_is_refused_up_front(tmp_path: Path, service: Start, api: str) -> None:
    stub = service("stub", "--port", "0", "--api", "openai", name="stub")
    out = subprocess.run(tokenpath_argv("load", "--target", stub.url or "", "--stub-url", stub.url or "", "--api",
                                        api, "--out", str(tmp_path)),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert f"--api {api} or --api all" in out.stderr
