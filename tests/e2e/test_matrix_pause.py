"""A silence mid-stream as a matrix condition, end to end: a real stub pauses each stream of the paused condition
after its second token, as the body's `tokenpath` member asks; its audit passes (the pause is in the schedule), the
rows of direct and the pass relay show the silence in the writes and in the arrivals, and pass stays within the
floor. 2 conditions x 2 paths x 2 runs of 4 tokens after certification: ~15 s here, with the host shared."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.e2e.test_matrix import run_matrix

pytestmark = pytest.mark.e2e

INTERVAL_MS, PAUSE_MS, AFTER = 15, 200, 2
EXPERIMENT = f"""
name = "a pause mid-stream"
frames = 4
runs = 2
ttft_ms = 20

[conditions]
interval_ms = [{INTERVAL_MS}]
pause_ms = [0, {PAUSE_MS}]
pause_after = [{AFTER}]

[[proxy]]
name = "pass"
"""


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results, _ = run_matrix(tmp_path_factory.mktemp("pause"), EXPERIMENT, timeout=120)
    return results


def test_the_stub_pauses_as_told_and_its_audit_passes(doc: dict[str, Any]) -> None:
    assert doc["certification"]["passed"]
    rows = {(r["proxy"], r["pause_ms"]): r for r in doc["rows"]}
    assert set(rows) == {(p, ms) for p in ("direct", "pass") for ms in (0.0, float(PAUSE_MS))}
    for (path, pause), row in rows.items():
        where = (path, pause, row["verdict"])
        assert row["runs"] - row["excluded"] >= 1, where  # kept: the audit holds writes to the paused schedule
        assert row["pause_after"] == (AFTER if pause else 1), where
        for run in (r for r in row["raw"] if r["included"]):
            writes = run["writes_ms"]
            gaps = [b - a for a, b in itertools.pairwise(writes)]
            assert (max(gaps) >= PAUSE_MS) == bool(pause), (where, gaps)
            if pause:  # and the client waited through it (an unpaused stream's arrivals a loaded host may delay)
                arrivals = [t for t, _ in run["arrivals"]]
                assert max(b - a for a, b in itertools.pairwise(arrivals)) >= PAUSE_MS - 5, (where, arrivals)
        if path == "pass":
            assert row["within_floor"], where
    paused = [c for c in doc["experiment"]["conditions"] if c.get("pause_ms")]
    assert [(c["pause_ms"], c["pause_after"]) for c in paused] == [(PAUSE_MS, AFTER)]
    labels = {f["label"] for f in doc["floors"]}
    assert f"60 B @ {INTERVAL_MS} ms, loopback, pause {PAUSE_MS} ms after token {AFTER}" in labels
