from __future__ import annotations

import pytest

from tokenpath.errors import UsageError
from tokenpath.load.plan import CLIENT_US, PROXY_US, UTILISATION, plan


def test_frames_and_cores_follow_from_the_workload_and_the_costs() -> None:
    (level,) = plan((1000,), tokens=128, interval_ms=14, ttft_ms=90)
    stream_s = (90 + 128 * 14) / 1000
    assert level.frames_per_s == pytest.approx(1000 * 131 / stream_s)
    client, stub, proxy = level.roles
    assert client.cores == pytest.approx(level.frames_per_s * CLIENT_US * 1e-6 / UTILISATION)
    assert proxy.us_per_frame == PROXY_US["gateway"]
    assert stub.processes >= level.frames_per_s / 40_000


def test_every_cost_flag_is_the_one_applied() -> None:
    base = plan((500,), tokens=64, interval_ms=20, ttft_ms=100)[0].roles
    given = plan((500,), tokens=64, interval_ms=20, ttft_ms=100, client_us=2 * CLIENT_US, stub_us=50, proxy="nginx",
                 proxy_us=80)[0].roles  # fmt: skip
    assert given[0].cores == pytest.approx(2 * base[0].cores)
    assert given[1].cores == pytest.approx(2 * base[1].cores)
    assert given[2].us_per_frame == 80
    assert plan((500,), tokens=64, interval_ms=20, ttft_ms=100, proxy="node")[0].roles[2].us_per_frame == 45


def test_an_unmeasured_proxy_needs_its_cost() -> None:
    with pytest.raises(UsageError, match="`proxy_us_per_frame`"):
        plan((10,), tokens=8, interval_ms=10, ttft_ms=10, proxy="haproxy")
    with pytest.raises(UsageError, match="must be > 0"):
        plan((10,), tokens=8, interval_ms=10, ttft_ms=10, client_us=0)


def test_the_plan_flags_are_the_costs_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from tokenpath import cli
    from tokenpath.cli import app

    # The CLI's console took its width when it was imported (COLUMNS then): a narrow one wraps the table's cells.
    # Its private _width, not the width property: undoing a property's setattr would pin the width read then (80)
    # for every later test in this worker.
    monkeypatch.setattr(cli.console, "_width", 200)

    out = CliRunner().invoke(app, ["load", "--plan", "--concurrency", "1000", "--client-us-per-frame", "19.2",
                                   "--stub-us-per-frame", "77", "--proxy", "node", "--proxy-us-per-frame", "88"],
                             env={"COLUMNS": "200"})  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "19.2" in out.output
    assert "77" in out.output
    assert "88" in out.output
    assert "proxy (node)" in out.output
    refused = CliRunner().invoke(app, ["load", "--client-us-per-frame", "5"])
    assert refused.exit_code == 2


def test_the_plan_takes_the_runs_own_pacing_and_refuses_what_only_a_run_does() -> None:
    from typer.testing import CliRunner

    from tokenpath.cli import app

    for flag in (["--json"], ["--fail-on", "errors>0"]):
        refused = CliRunner().invoke(app, ["load", "--plan", "--concurrency", "50", *flag])
        assert refused.exit_code == 2, refused.output  # was: parsed, then ignored
    # An explicit 0 is the user's value (refused by the plan's checks or planned as given), never the default's.
    zero = CliRunner().invoke(app, ["load", "--plan", "--concurrency", "50", "--client-us-per-frame", "0"])
    default = CliRunner().invoke(app, ["load", "--plan", "--concurrency", "50"])
    assert zero.output != default.output
