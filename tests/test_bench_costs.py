"""bench/gateway_cpu.py's split of a target's CPU into a cost per request and a cost per frame (`--tokens 8,128`)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import load_script

BENCH = Path(__file__).parent.parent / "bench" / "gateway_cpu.py"


@pytest.fixture(scope="module")
def gateway_cpu() -> ModuleType:
    return load_script(BENCH, "gateway_cpu")


def test_two_stream_lengths_give_back_the_costs_that_made_them(gateway_cpu: ModuleType) -> None:
    per_request_s, per_frame_s = 1.4e-3, 70e-6
    short = (requests := 900) * per_request_s + (frames := 900 * 11) * per_frame_s, frames, requests
    long = 400 * per_request_s + 400 * 131 * per_frame_s, 400 * 131, 400
    q, f = gateway_cpu.per_request_and_frame(short, long)
    assert q == pytest.approx(1400)
    assert f == pytest.approx(70)


def test_lengths_that_cannot_be_told_apart_give_no_split(gateway_cpu: ModuleType) -> None:
    same = (1.0, 1100, 100)
    q, f = gateway_cpu.per_request_and_frame(same, (2.0, 2200, 200))  # the same frames per request twice
    assert math.isnan(q)
    assert math.isnan(f)


def test_costs_per_request_are_compared_round_by_round_to_a_reference(gateway_cpu: ModuleType) -> None:
    costs = {
        "gateway": [(300.0, 20.0), (400.0, 21.0)],
        "pipe": [(100.0, 15.0), (-5.0, 14.0)],
        "lean": [(200, 17), (0, 1)],
    }
    ratios = gateway_cpu.request_ratios(costs, "pipe")
    assert set(ratios) == {"gateway", "lean"}  # not the reference itself
    assert ratios["gateway"][0] == pytest.approx(3.0)
    assert math.isnan(ratios["gateway"][1])  # a round that solved the reference's cost to <= 0 gives no ratio
    assert ratios["lean"][0] == pytest.approx(2.0)


@pytest.mark.parametrize("tokens", ["8,x", "8,8", "0,128", "8,32,128"])
def test_a_bad_tokens_list_is_refused_by_name(tokens: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--src", "src", "--tokens", tokens], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--tokens" in done.stderr


def test_a_profile_is_refused_with_two_lengths(tmp_path: Path) -> None:
    """--profile records one measurement: with two stream lengths it would record one of them silently."""
    argv = [sys.executable, str(BENCH), "--src", "src", "--tokens", "8,128", "--profile", str(tmp_path / "p.txt")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--profile" in done.stderr
