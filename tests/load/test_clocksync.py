"""The cross-host clock estimate on synthetic exchanges with known offsets and delays (a real stub on a skewed
clock: tests/e2e/test_clock.py)."""

from __future__ import annotations

import random

import pytest

from tokenpath.load.clocksync import estimate

MS = 1_000_000


def exchanges(offset_ns: int, n: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """The client asks at t0; the request takes `up`, the answer `down` (asymmetric, queueing now and then)."""
    out, t = [], 10**12
    for _ in range(n):
        up = rng.randint(50_000, 150_000) + (rng.random() < 0.3) * rng.randint(0, 5 * MS)
        down = rng.randint(50_000, 150_000) + (rng.random() < 0.3) * rng.randint(0, 5 * MS)
        out.append((t, t + up + offset_ns, t + up + down))
        t += 2 * MS
    return out


@pytest.mark.parametrize("offset_ms", [0, 250, -3_600_000, 0.04])
def test_the_estimate_is_within_its_uncertainty_of_the_true_offset(offset_ms: float) -> None:
    rng = random.Random(str(offset_ms))
    true = round(offset_ms * MS)
    got = estimate(exchanges(true, 64, rng))
    assert abs(got.offset_ns - true) <= got.uncertainty_ns
    assert got.uncertainty_ns <= 150_000  # half the fastest round trip, not of the queued ones
    assert got.samples == 64


def test_queueing_on_one_side_does_not_move_the_estimate() -> None:
    # Every answer is delayed 3 ms on the way back except a few: an average would be 1.5 ms off.
    samples = [(t, t + 100_000, t + 200_000 + (0 if i % 10 == 0 else 3 * MS)) for i, t in
               enumerate(range(0, 64 * MS, MS))]  # fmt: skip
    got = estimate(samples)
    assert abs(got.offset_ns) <= got.uncertainty_ns == 100_000


def test_the_uncertainty_covers_every_sample_the_estimate_used() -> None:
    """A loaded host: most of the fastest fifth queued one way (1 ms round trips, all of it on the way up), a few
    not. The median of the fifth would be 0.4 ms off with 0.1 ms claimed; only round trips near the smallest are
    used, and the uncertainty is half the largest of those."""
    fast = [(t, t + 100_000, t + 200_000) for t in range(0, 5 * MS, MS)]
    queued = [(t, t + 900_000, t + 1_000_000) for t in range(10 * MS, 70 * MS, MS)]
    got = estimate(fast + queued)
    assert abs(got.offset_ns) <= got.uncertainty_ns == 100_000
