"""The API format and the request's Accept-Encoding as matrix conditions: parsed, labelled, recorded, and what
the runner sends the stub and the probe for them."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tokenpath.audit import AuditVerdict
from tokenpath.errors import UsageError
from tokenpath.experiment.compose import experiment_toml
from tokenpath.experiment.measure import RunRecord, join
from tokenpath.experiment.rows import Floor, build_row
from tokenpath.experiment.runner import SAME_MOMENT_MS, _write_groups
from tokenpath.experiment.spec import Condition, PathSpec, parse, stub_member
from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING
from tokenpath.probe.metrics import RunMetrics
from tokenpath.probe.trace import Trace
from tokenpath.wire.acceptencoding import IDENTITY
from tokenpath.wire.apis import Api


def test_defaults_are_openai_without_accept_encoding() -> None:
    (cond,) = parse({}).conditions
    assert (cond.api, cond.accept_encoding, cond.frame_bytes) == ("openai", IDENTITY, 60)
    assert not cond.compressed
    assert cond.label == "60 B @ 50 ms, loopback"  # unchanged for files that set neither
    assert cond.to_json()["api"] == "openai"
    assert cond.to_json()["accept_encoding"] == IDENTITY


def test_api_and_accept_encoding_are_axes_of_the_grid() -> None:
    exp = parse({"conditions": {"api": ["openai", "anthropic", "bedrock"], "accept_encoding": ["identity", "gzip"]}})
    got = [(c.api, c.accept_encoding) for c in exp.conditions]
    assert got == [(a, e) for a in ("openai", "anthropic", "bedrock") for e in ("identity", "gzip")]
    labels = [c.label for c in exp.conditions]
    assert len(set(labels)) == len(labels)  # floors and exclusion shares are matched by label
    assert "unpadded @ 50 ms, loopback, anthropic, Accept-Encoding: gzip" in labels
    assert [c.compressed for c in exp.conditions] == [False, True] * 3


def test_browser_is_the_browsers_header_and_identity_sends_none() -> None:
    exp = parse({"conditions": {"accept_encoding": ["browser", "Identity", "br"]}})
    assert [c.accept_encoding for c in exp.conditions] == [BROWSER_ACCEPT_ENCODING, IDENTITY, "br"]


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"api": ["grpc"]}, "unknown API format 'grpc'"),
        ({"api": []}, "must not be empty"),
        ({"accept_encoding": ["gzip\r\nX-Evil: 1"]}, "not a header value"),
        ({"accept_encoding": [""]}, "not a header value"),
        ({"accept_encoding": ["g" * 300]}, "not a header value"),
        ({"api": ["anthropic"], "frame_bytes": [60]}, r"frame_bytes 60 with api anthropic: .*need|smaller"),
    ],
)
def test_bad_conditions_say_what_is_wrong(conditions: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse({"conditions": conditions})


def test_another_format_takes_a_declared_size_that_holds_its_frames_else_its_own() -> None:
    padded = parse({"conditions": {"api": ["openai", "gemini"], "frame_bytes": [400]}}).conditions
    assert [(c.api, c.frame_bytes) for c in padded] == [("openai", 400), ("gemini", 400)]
    own = parse({"conditions": {"api": ["openai", "ollama"]}}).conditions
    assert [(c.api, c.frame_bytes) for c in own] == [("openai", 60), ("ollama", 0)]


def test_against_a_real_endpoint_the_format_and_encoding_are_not_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = {"url": "https://api.example.com/v1", "model": "m"}
    with pytest.raises(UsageError, match="api"):
        parse({"upstream": upstream, "conditions": {"api": ["anthropic"]}})


def test_pacing_per_format() -> None:
    openai = stub_member(Condition(50.0, 60, "loopback", False), 12, 20.0)
    assert openai == {"interval_ms": 50.0, "tokens": 12, "ttft_ms": 20.0, "format": "plain", "frame_bytes": 60}
    # Another format's route refuses `format` plain: its own frames, padded only when a size was declared.
    own = stub_member(Condition(50.0, 0, "loopback", False, api=Api.ANTHROPIC), 12, 20.0)
    assert own == {"interval_ms": 50.0, "tokens": 12, "ttft_ms": 20.0}
    padded = stub_member(Condition(50.0, 400, "loopback", False, api=Api.BEDROCK), 12, 20.0)
    assert padded["frame_bytes"] == 400
    assert "format" not in padded


def test_write_groups_count_writes_made_at_their_own_moment() -> None:
    # Anthropic: message_start, content_block_start and ping together, then a token every 50 ms, the end together.
    writes = [0.0, 0.1, 0.2, 20.0, 70.0, 120.0, 120.1, 120.2]
    assert _write_groups(writes, SAME_MOMENT_MS) == 4
    assert _write_groups(writes, 0.0) == len(writes)
    assert _write_groups([], SAME_MOMENT_MS) == 0


def _record(encoding: str) -> RunRecord:
    metrics = RunMetrics("s", 200, 10, 10, 1.0, 0.3, 20.0, {}, {1: 10}, 500.0)
    audit = AuditVerdict("s", "complete", 10, 10.0, 0.0, 0.0, 0.0, 0, True)
    return RunRecord("p", "s", metrics=metrics, path_added_ttft_ms=0.2, audit=audit, content_encoding=encoding)


def test_rows_carry_the_format_the_encoding_asked_and_the_one_answered() -> None:
    cond = Condition(50.0, 0, "loopback", False, api=Api.BEDROCK, accept_encoding="gzip")
    records = [_record("gzip"), _record("gzip"), _record("identity")]
    row = build_row(PathSpec("nginx", "gzip"), cond, records, Floor.from_direct(records))
    assert (row.condition.api, row.condition.accept_encoding, row.content_encoding) == (
        "bedrock",
        "gzip",
        "gzip/identity",
    )
    assert [r.to_run().content_encoding for r in records] == ["gzip", "gzip", "identity"]
    same = build_row(PathSpec("direct"), cond, records[2:], None)
    assert same.content_encoding == "identity"


def test_join_records_the_traces_content_encoding() -> None:
    trace = Trace("s", 0)
    trace.content_encoding = "gzip"
    record = RunRecord("p", "s")
    join(record, trace, None)
    assert record.content_encoding == "gzip"


def test_a_format_that_reads_above_one_direct_is_late_not_coalescing_at_directs_fpr() -> None:
    def run(arrivals: int, added: float) -> RunRecord:
        metrics = RunMetrics("s", 200, 14, arrivals, 14 / arrivals, 0.3, 20 + added, {}, {1: arrivals - 1, 4: 1}, 9.0)
        audit = AuditVerdict("s", "complete", 14, 10.0, 0.0, 0.0, 0.0, 0, True)
        return RunRecord("p", "s", metrics=metrics, path_added_ttft_ms=added, audit=audit)

    cond = Condition(50.0, 0, "loopback", False, api=Api.RESPONSES)
    direct = [run(11, 0.1), run(11, 0.1), run(11, 0.2)]  # fpr 1.27: four events written at once
    floor = Floor.from_direct(direct)
    late = build_row(PathSpec("caddy"), cond, [run(11, 30.0)] * 3, floor)
    assert late.verdict.startswith("streams, but late"), late.verdict
    bunched = build_row(PathSpec("haproxy"), cond, [run(3, 180.0)] * 3, floor)
    assert bunched.verdict.startswith("coalesces"), bunched.verdict


@pytest.mark.parametrize(
    "conditions",
    [
        {"api": ["openai", "anthropic"], "accept_encoding": ["identity", "browser"]},
        {"api": ["openai", "gemini"], "frame_bytes": [400]},
    ],
)
def test_the_compose_export_keeps_the_format_and_encoding_conditions(
    tmp_path: Path, conditions: dict[str, Any]
) -> None:
    exp = parse({"conditions": conditions, "proxy": [{"name": "nginx"}]})
    text = experiment_toml(exp, exp.conditions, [("nginx-stock", "http://nginx-stock:8080", "nginx (image)")])
    inner = parse(tomllib.loads(text))
    assert [c.label for c in inner.conditions] == [c.label for c in exp.conditions]


@pytest.mark.parametrize("websocket", [{"fallback": 2, "retry_delay_ms": 50}, {"fallback": 1}, {"fallback": 0}, {}])
def test_the_compose_export_keeps_the_websocket_fallback_policy(websocket: dict[str, Any]) -> None:
    """The exported experiment's [websocket] is the file's (it was dropped: the Compose run fell back as Codex's
    default, 6 upgrades 200 ms apart); none where no condition is over WebSocket (that file would refuse it)."""
    ws = {"api": "responses", "transport": ["sse", "websocket"]}
    exp = parse({"conditions": ws, "proxy": [{"name": "nginx"}], **({"websocket": websocket} if websocket else {})})
    text = experiment_toml(exp, exp.conditions, [("nginx-stock", "http://nginx-stock:8080", "nginx (image)")])
    assert parse(tomllib.loads(text)).ws_fallback == exp.ws_fallback
    plain = parse({"proxy": [{"name": "nginx"}]})
    assert "[websocket]" not in experiment_toml(plain, plain.conditions, [])
