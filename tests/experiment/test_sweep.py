from __future__ import annotations

from typing import Any

from tokenpath.experiment.sweep import infer


def point(size: int, interval: float, added: float, burst: int) -> dict[str, Any]:
    return {"frame_bytes": size, "interval_ms": interval, "fpr_median": float(burst), "added_ttft_ms_median": added,
            "modal_burst": burst, "within_floor": False}  # fmt: skip


def test_one_interval_names_no_rule_and_says_why() -> None:
    """At 50 ms only, bursts of 2 at 1,000 B and a 180 ms hold at 60 B fit a size and a timer alike."""
    pts = [point(60, 50, 180, 4), point(1000, 50, 50, 2), point(2000, 50, 0.1, 1) | {"within_floor": True}]
    inferred = infer(pts)
    assert inferred["size_bytes"] is None
    assert inferred["timer_ms"] is None
    assert "second interval" in inferred["rule"]
    assert "one interval (50 ms) cannot tell" in inferred["caveat"]


def test_two_intervals_name_the_rule() -> None:
    pts = [point(60, 50, 182, 4), point(60, 25, 183, 8), point(1000, 50, 50, 2), point(1000, 25, 25, 2)]
    inferred = infer(pts)
    assert inferred["timer_ms"] == 182.5
    assert inferred["size_bytes"] is not None
    assert inferred["caveat"] is None
