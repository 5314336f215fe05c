"""`load --pause-ms --pause-after`: the stub load starts is given them as its flags (Pacing.to_argv), a --stub-url
stub's own are read from its health and adopted, and a flag that disagrees with that stub is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tokenpath.load.runner
from tests.load.test_first_token_options import PACING, STUB, _cfg
from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.load.runner import LoadConfig, LoadRunner
from tokenpath.load.stubinfo import with_stub_pacing


def test_the_stub_load_starts_pauses_as_asked(tmp_path: Path) -> None:
    cfg = LoadConfig(targets=("direct",), client_workers=1, pacing=_cfg(pause_ms=500.0, pause_after=2).pacing)
    argv = LoadRunner(cfg, tmp_path, Console(quiet=True))._stub_argv()
    assert argv[argv.index("--pause-ms") :] == ["--pause-ms", "500", "--pause-after", "2"]
    assert "--pause-ms" not in LoadRunner(LoadConfig(targets=("direct",)), tmp_path, Console())._stub_argv()


def test_a_stub_url_stubs_pause_is_adopted_and_a_flag_that_disagrees_refused() -> None:
    theirs = {**PACING, "pause_ms": 500.0, "pause_after": 3}
    adopted = with_stub_pacing(_cfg(), STUB, theirs).pacing
    assert (adopted.pause_ms, adopted.pause_after) == (500.0, 3)
    with pytest.raises(UsageError, match=r"`pause_ms` 100 but the stub at .* was started with `pause_ms` 500: drop"):
        with_stub_pacing(_cfg(pause_ms=100.0, pacing_given=("pause_ms",)), STUB, theirs)
    with pytest.raises(UsageError, match=r"`pause_ms` 100 .* with `pause_ms` 0"):  # a stub without a pause
        with_stub_pacing(_cfg(pause_ms=100.0, pacing_given=("pause_ms",)), STUB, PACING)


def test_the_flags_reach_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[LoadConfig] = []

    class Stop(Exception):
        pass

    def capture(self: Any, cfg: LoadConfig, *args: Any) -> None:
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(tokenpath.load.runner.LoadRunner, "__init__", capture)
    args = ["load", "--pause-ms", "250", "--pause-after", "4", "--client-workers", "1", "--out", str(tmp_path)]
    CliRunner().invoke(app, args)
    assert (seen[0].pacing.pause_ms, seen[0].pacing.pause_after) == (250.0, 4)
    assert set(seen[0].pacing_given) == {"pause_ms", "pause_after"}
    out = CliRunner().invoke(app, ["load", "--pause-after", "0", "--out", str(tmp_path)])
    assert out.exit_code != 0
    assert "--pause-after must be a whole number" in out.output
