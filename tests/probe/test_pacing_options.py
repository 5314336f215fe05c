"""`probe --pause-ms --heartbeat-ms ...`: the stub's pacing options ask a tokenpath stub behind the path for that
pacing, as the request body's `tokenpath` member (merged into one --body-json gave), checked by the stub's rules."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

import tokenpath.probe.stream
from tokenpath.cli import app
from tokenpath.cli.probe import stub_pacing
from tokenpath.errors import UsageError
from tokenpath.probe.client import ProbeConfig


def test_the_options_are_the_tokenpath_member() -> None:
    assert stub_pacing((("user", "me"),), {}) == (("user", "me"),)
    body = dict(stub_pacing((("tokenpath", {"tokens": 8}),), {"pause_ms": 500.0, "pause_after": 2}))
    assert body["tokenpath"] == {"tokens": 8, "pause_ms": 500.0, "pause_after": 2}
    with pytest.raises(UsageError, match="`pause_after` must be a whole number"):
        stub_pacing((), {"pause_after": 0})


def test_the_flags_reach_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ProbeConfig] = []

    def capture(cfg: ProbeConfig, **_: Any) -> Any:
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(tokenpath.probe.stream, "probe_stream", capture)
    CliRunner().invoke(app, ["probe", "http://127.0.0.1:9", "--pause-ms", "300", "--heartbeat-ms", "50"])
    assert dict(seen[0].extra_body)["tokenpath"] == {"pause_ms": 300.0, "heartbeat_ms": 50.0}
    out = CliRunner().invoke(app, ["probe", "http://127.0.0.1:9", "--head-at", "later"])
    assert "--head-at 'later': expected start or first-token" in out.output
