"""bench/client_scaling.py --floor (bench/client_floor.py): the counting client reads the same closed-loop streams
from a stub and reports the frames it counted and its CPU; with --floor the bench's point carries its figure, and
without it does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Start
from tests.helpers import load_script
from tokenpath.load.integrity import expected_frames

pytestmark = pytest.mark.e2e

BENCH = Path(__file__).parents[2] / "bench"


def test_the_counting_client_counts_every_frame_of_the_streams_it_ran(service: Start) -> None:
    client_floor = load_script(BENCH / "client_floor.py", "client_floor")
    stub = service("stub", "--port", "0", "--tokens", "4", "--interval-ms", "5", name="stub")
    assert stub.url is not None
    # A stream lasts ~0.11 s (the stub's 90 ms first token, 4 tokens 5 ms apart): a second's window leaves a host
    # nine times slower than that room for every user to start one in it.
    frames, cpu_s = client_floor.floor(stub.url, streams=3, tokens=4, duration=1.0)
    per_stream = len(expected_frames("tp-x", "tokenpath-stub", 4))  # the role delta, 4 tokens, the finish, [DONE]
    assert frames % per_stream == 0, frames  # whole streams, every frame of each counted
    assert frames >= 3 * per_stream  # each of the 3 users finished a stream in the measured second
    assert 0 < cpu_s < 30


def test_the_floor_figure_is_in_the_point_only_when_asked() -> None:
    def point(*extra: str) -> dict[str, float]:
        argv = [sys.executable, str(BENCH / "client_scaling.py"), "--workers", "1", "--streams", "2", "--tokens", "4"]
        done = subprocess.run(
            [*argv, "--duration", "1", "--json", *extra], capture_output=True, text=True, timeout=120, check=True
        )
        points: list[dict[str, float]] = json.loads(done.stdout)["points"]
        return points[0]

    assert point("--floor")["floor_frames_per_cpu_s"] > 0
    assert "floor_frames_per_cpu_s" not in point()
