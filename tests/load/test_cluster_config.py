from __future__ import annotations

import sys

import pytest

from tokenpath.errors import UsageError
from tokenpath.load.clocksync import ClockOffset
from tokenpath.load.cluster import ClusterSpec, RunClock, cpus_per_client_node, parse_cluster, require_ray
from tokenpath.load.runner import LoadConfig


def test_cluster_addresses_parse_and_bad_ones_are_refused() -> None:
    assert parse_cluster("auto") == ClusterSpec("auto")
    assert parse_cluster("ray://head:10001") == ClusterSpec("ray://head:10001")
    assert parse_cluster("10.0.0.5:6379") == ClusterSpec("10.0.0.5:6379")
    assert parse_cluster("local:3") == ClusterSpec(None, 3)
    for bad, message in (("local:1", "2 to 16"), ("local:99", "2 to 16"), ("head", "expected auto")):
        with pytest.raises(UsageError, match=message):
            parse_cluster(bad)


def test_without_ray_the_cluster_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(UsageError, match=r"pip install 'tokenpath\[cluster\]'"):
        require_ray()


def test_a_one_box_run_never_imports_ray() -> None:
    import subprocess

    code = ("import sys; from tokenpath.load import runner, cluster; runner.LoadConfig(targets=('direct',)); "
            "print('ray' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_runs_clock_is_the_mean_of_its_two_estimates_with_the_drift_in_its_uncertainty() -> None:
    clock = RunClock("n1", ClockOffset(1_000_000, 20_000, 40_000, 64), ClockOffset(1_100_000, 30_000, 60_000, 64))
    assert clock.offset_ns == 1_050_000
    assert clock.drift_ns == 100_000
    assert clock.uncertainty_ns == 30_000 + 50_000
    assert clock.to_json()["uncertainty_ms"] == 0.08


def test_cluster_settings_are_checked_and_kept() -> None:
    assert cpus_per_client_node(None, 3) == 1
    assert cpus_per_client_node(5, 3) == 3
    with pytest.raises(UsageError, match="`stub_node` needs `cluster`"):
        LoadConfig(targets=("direct",), stub_node="10.0.0.2")
    assert LoadConfig(targets=("direct",), cluster="local:2").client_workers == 0  # the cluster decides
    remote = LoadConfig(targets=("direct",), target_url="http://127.0.0.1:9", stub_url="http://192.0.2.10:8000",
                        cluster="auto")  # fmt: skip
    assert remote.stub_url == "http://192.0.2.10:8000"  # across hosts the clock is estimated, so it is allowed
