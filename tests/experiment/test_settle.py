"""The runner's extra rounds (runner._settle), with its streams scripted (no processes): a row whose first token the
rounds could not place against the direct floor (rows.ttft_evidence: ambiguous) gets more rounds of itself beside
the direct path, up to MAX_EXTRA_ROUNDS, and a decided row none; a load that never lifts leaves the row undecided,
never late."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from tests.experiment.test_certify_conditions import OPENAI, _run
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.rows import Floor, build_row
from tokenpath.experiment.runner import CERT_FRAMES, MAX_EXTRA_ROUNDS, Environment, MatrixRunner
from tokenpath.experiment.spec import Condition, PathSpec, parse

# What two CPU burners did to a streaming proxy's first token in the known-facts matrix (its three runs), while
# the direct path's three fell in quiet moments.
LOADED = (6.42, 11.21, 13.95)
QUIET = 0.2


class Rounds:
    """Each path's added TTFT by its n-th stream (`added(label, n)`); every round asked is kept."""

    def __init__(self, added: Callable[[str, int], float]) -> None:
        self.added = added
        self.rounds: list[list[str]] = []
        self.seen: dict[str, int] = {}

    def __call__(self, env: Environment, paths: list[tuple[str, str]], cond: Condition, tokens: int) -> list[RunRecord]:
        self.rounds.append([label for label, _ in paths])
        out = []
        for label, _ in paths:
            n = self.seen.get(label, 0)
            self.seen[label] = n + 1
            out.append(_run(label, CERT_FRAMES, self.added(label, n)))
        return out


def settle(tmp_path: Path, added: Callable[[str, int], float]) -> tuple[Rounds, dict[str, list[RunRecord]]]:
    runner = MatrixRunner(parse({}), tmp_path, console=Console(file=io.StringIO()))
    rounds = Rounds(added)
    runner._round = rounds  # type: ignore[method-assign]
    env = Environment("loopback", False, stub_url="http://127.0.0.1:1")
    paths = {label: (PathSpec(label), f"http://127.0.0.1:2/{label}") for label in ("direct", "pass", "late")}
    runs: dict[str, list[RunRecord]] = {label: [] for label in paths}
    for _ in range(3):  # the condition's own rounds
        for record in rounds(env, [(label, url) for label, (_, url) in paths.items()], OPENAI, CERT_FRAMES):
            runs[record.path].append(record)
    runner._settle(env, paths, runs, OPENAI, CERT_FRAMES)
    return rounds, runs


def within(runs: dict[str, list[RunRecord]], label: str) -> bool | None:
    return build_row(PathSpec(label), OPENAI, runs[label], Floor.from_direct(runs["direct"])).within_floor


def test_a_streaming_path_loaded_in_its_rounds_is_measured_again_until_it_is_placed(tmp_path: Path) -> None:
    def added(label: str, n: int) -> float:
        if label == "late":
            return 40.0 + n % 2  # a real delay: every run, decided at once
        if label == "pass" and n < 3:
            return LOADED[n]
        return QUIET

    rounds, runs = settle(tmp_path, added)
    assert rounds.rounds[3:] == [["direct", "pass"]]  # one extra round, the undecided path beside direct only
    assert within(runs, "pass") is True
    assert within(runs, "late") is False
    assert len(runs["late"]) == 3


def test_a_load_that_never_lifts_leaves_the_row_undecided_after_the_bound(tmp_path: Path) -> None:
    rounds, runs = settle(tmp_path, lambda label, n: LOADED[n % 3] if label == "pass" else QUIET)
    assert len(rounds.rounds) == 3 + MAX_EXTRA_ROUNDS
    assert all(r == ["direct", "pass"] for r in rounds.rounds[3:])
    assert within(runs, "pass") is None  # never "late": the load made those figures


def test_rows_the_rounds_placed_get_no_extra_round(tmp_path: Path) -> None:
    rounds, _ = settle(tmp_path, lambda label, n: 40.0 if label == "late" else QUIET)
    assert len(rounds.rounds) == 3
