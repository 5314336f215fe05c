"""What a real origin does besides pacing, as matrix conditions (issue 37 §3): `origin` (the plain stub, a stub
preset, a replayed recording) and `http10_framing`, parsed, labelled, and sent to the stub in each request."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment.spec import load, parse, stub_member

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "origins"
CHAT = EXAMPLES / "llama-cpp-python.chat.json"
ANTHROPIC = EXAMPLES / "llama-server.anthropic.json"


def origin_parts(member: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in member.items() if k in ("http10_framing", "headers", "replay")}


def test_each_origin_is_a_condition_and_the_stub_is_told_what_to_do() -> None:
    exp = parse(
        {
            "conditions": {
                "origin": ["stub", "stub:llama-server", "stub:llama-cpp-python", f"replay:{CHAT}"],
                "http10_framing": ["close", "chunked"],
                "stub_headers": {"Cache-Control": "no-cache"},
            }
        }
    )
    got = [(c.label, origin_parts(stub_member(c, 4, 20.0))) for c in exp.conditions]
    no_cache = {"Cache-Control": "no-cache"}
    assert got == [
        ("60 B @ 50 ms, loopback, stub sends Cache-Control: no-cache", {"headers": no_cache}),
        (
            "60 B @ 50 ms, loopback, HTTP/1.0 chunked, stub sends Cache-Control: no-cache",
            {"http10_framing": "chunked", "headers": no_cache},
        ),
        (
            "60 B @ 50 ms, loopback, stub as llama-server, stub sends Cache-Control: no-cache",
            {"http10_framing": "chunked", "headers": {"X-Accel-Buffering": "no", **no_cache}},
        ),
        (
            # the declared header replaces the preset's own of that name
            "60 B @ 50 ms, loopback, stub as llama-cpp-python, stub sends Cache-Control: no-cache",
            {"headers": {"X-Accel-Buffering": "no", **no_cache}},
        ),
        (
            "60 B @ 50 ms, loopback, replay llama-cpp-python.chat, stub sends Cache-Control: no-cache",
            {"replay": "llama-cpp-python.chat", "headers": no_cache},  # on top of the recording's own head
        ),
    ]  # http10_framing varies only with the plain stub: a preset or a recording has its own
    assert exp.conditions[4].to_json()["origin"] == f"replay:{CHAT.resolve()}"


@pytest.mark.parametrize(
    ("conditions", "says"),
    [
        ({"origin": "llama-server"}, "expected stub, a stub preset"),  # a real origin is an [upstream]
        ({"origin": "stub:nginx"}, "expected stub"),
        ({"origin": "replay:/nonexistent.json"}, "cannot read recording"),
        ({"origin": f"replay:{ANTHROPIC}"}, "recording is of the anthropic API, not openai"),
        ({"http10_framing": "gzip"}, "http10_framing"),
        ({"origin": "stub:llama-server", "http10_framing": "chunked"}, "plain stub"),
    ],
)
def test_an_origin_that_cannot_be_is_refused_before_anything_starts(conditions: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse({"conditions": conditions})


def test_a_replay_in_its_own_api() -> None:
    (cond,) = parse({"conditions": {"api": "anthropic", "origin": f"replay:{ANTHROPIC}"}}).conditions
    assert origin_parts(stub_member(cond, 4, 20.0)) == {"replay": "llama-server.anthropic"}


def test_a_real_upstream_paces_and_frames_its_own_stream() -> None:
    with pytest.raises(UsageError, match="origin: the stub's pacing"):
        parse({"upstream": {"url": "http://127.0.0.1:9", "model": "m"}, "conditions": {"origin": "stub:llama-server"}})


def test_a_relative_recording_is_read_beside_the_experiment_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not where the file is
    exp = load(EXAMPLES / "presets.toml")
    replays = [c.origin for c in exp.conditions if c.origin.startswith("replay:")]
    assert replays == [f"replay:{EXAMPLES / 'llama-server.chat.json'}", f"replay:{CHAT}"]


@pytest.mark.parametrize(
    "pacing",
    [{"interval_ms": [20, 50]}, {"frame_bytes": [60, 400]}, {"pause_ms": [0, 2000]}, {"reasoning_tokens": [0, 4]}],
)
def test_a_pacing_axis_that_varies_over_a_replay_is_refused(pacing: dict[str, object]) -> None:
    """A recording streams its own pacing: two conditions over it that differ in the stub's pacing stream the same
    bytes under different labels (an audit found such rows, e.g. "@ 20 ms" and "@ 50 ms" of one recording)."""
    with pytest.raises(UsageError, match="a replay origin streams its recording's own pacing"):
        parse({"conditions": {"origin": ["stub", f"replay:{CHAT}"], **pacing}})
    stub_only = parse({"conditions": {"origin": ["stub", "stub:llama-server"], **pacing}})  # the stub paces these
    assert len(stub_only.conditions) == 4
