"""Which origin behaviour made a path's verdict (experiment/attribution.py), on injected rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tokenpath.axes import DEFAULT_CONDITION
from tokenpath.experiment.attribution import attribute, behaviour, describe, origin_effects
from tokenpath.results.model import MatrixRow

XAB = (("X-Accel-Buffering", "no"),)
PLAIN_HELD = "(held with a plain origin)"


def row(proxy: str, variant: str, streams: bool, **cond: object) -> MatrixRow:
    condition = replace(DEFAULT_CONDITION, **cond)  # type: ignore[arg-type]
    # Streamed or held by frames per read; within the floor or not says nothing here (a path that streams may add
    # a millisecond).
    return MatrixRow(proxy, variant, condition, 3, 0, "v", fpr_median=1.08 if streams else 8.0, within_floor=False)


def effects(rows: list[MatrixRow]) -> dict[str, str]:
    return {describe(r, e).removesuffix(f": {e}"): e for r, e in origin_effects(rows)}


def test_a_verdict_is_said_against_the_same_path_with_a_plain_origin() -> None:
    rows = [
        row("direct", "stock", True),
        row("nginx", "stock", False),  # the baseline: held
        row("nginx", "stock", True, http10_framing="chunked"),
        row("nginx", "stock", True, stub_headers=XAB),
        row("nginx", "stock", True, origin="stub:llama-server"),
        row("nginx", "stock", True, origin="stub:llama-cpp-python", interval_ms=10.0),  # pacing set aside
        row("nginx", "ignore_x_accel", False),
        row("nginx", "ignore_x_accel", False, origin="stub:llama-cpp-python"),
        row("nginx", "ignore_x_accel", True, origin="stub:llama-server"),
        row("nginx", "proxy_buffering_off", True),
        row("nginx", "proxy_buffering_off", True, origin="stub:llama-server"),
    ]
    assert effects(rows) == {
        "nginx (stub: HTTP/1.0: chunked)": f"streams because the origin sends HTTP/1.0: chunked {PLAIN_HELD}",
        "nginx (stub: X-Accel-Buffering: no)": f"streams because the origin sends X-Accel-Buffering: no {PLAIN_HELD}",
        # both of llama-server's behaviours stream stock nginx alone: both named
        "nginx (stub as llama-server)": "streams because the origin sends HTTP/1.0: chunked and X-Accel-Buffering: no "
        "(held with a plain origin)",
        # only the header was seen to stream it alone: Cache-Control is not named
        "nginx (stub as llama-cpp-python)": "streams because the origin sends X-Accel-Buffering: no (held with a "
        "plain origin)",
        "nginx:ignore_x_accel (stub as llama-cpp-python)": "held although the origin sends Cache-Control: no-store "
        "and X-Accel-Buffering: no: the path ignores it",
        "nginx:ignore_x_accel (stub as llama-server)": "streams because the origin sends HTTP/1.0: chunked and "
        "X-Accel-Buffering: no (held with a plain origin)",
    }  # proxy_buffering_off streams a plain origin: the path's doing, nothing said


def test_no_baseline_no_word() -> None:
    assert origin_effects([row("nginx", "stock", True, origin="stub:llama-server")]) == []


def test_a_condition_says_what_its_origin_does() -> None:
    assert behaviour(DEFAULT_CONDITION).plain
    preset = replace(DEFAULT_CONDITION, origin="stub:llama-cpp-python", stub_headers=(("Cache-Control", "no-cache"),))
    assert behaviour(preset).parts() == ("X-Accel-Buffering: no", "Cache-Control: no-cache")


def test_a_replays_behaviour_is_its_recordings_with_the_declared_headers_on_top() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "origins" / "llama-server.chat.json"
    cond = replace(DEFAULT_CONDITION, origin=f"replay:{path}")
    assert behaviour(cond).parts() == ("HTTP/1.0: chunked", "X-Accel-Buffering: no")
    declared = replace(cond, stub_headers=(("X-Accel-Buffering", "yes"),))
    assert behaviour(declared).parts() == ("HTTP/1.0: chunked", "X-Accel-Buffering: yes")


def test_the_rows_carry_it_with_the_plain_row_they_were_judged_against() -> None:
    plain = row("nginx", "ignore_x_accel", False)
    rows = [
        row("direct", "stock", True),
        plain,
        row("nginx", "ignore_x_accel", True, origin="stub:llama-server"),
        row("nginx", "ignore_x_accel", False, origin="stub:llama-cpp-python"),
        row("nginx", "ignore_x_accel", True, http10_framing="chunked"),
    ]
    got = attribute(rows)
    assert [r.attribution is None for r in got] == [True, True, False, False, False]
    streams, held, chunked = (r.attribution for r in got[2:])
    assert streams is not None
    assert held is not None
    assert chunked is not None
    # The chunked answer alone streamed this path: of llama-server's two behaviours only it is credited.
    assert streams.streams
    assert streams.credited == ("HTTP/1.0: chunked",)
    assert streams.baseline == f"nginx:ignore_x_accel ({plain.condition.label})"
    assert streams.origin == "stub as llama-server"
    assert streams.words == f"streams because the origin sends HTTP/1.0: chunked {PLAIN_HELD}"
    assert not held.streams
    assert held.credited == ("Cache-Control: no-store", "X-Accel-Buffering: no")
    assert chunked.origin == "stub: HTTP/1.0: chunked"
    # An attribution a row carried is decided again over the rows given: without the plain row, none.
    assert all(r.attribution is None for r in attribute([got[2], got[3]]))


def test_the_runners_results_carry_it(tmp_path: Path) -> None:
    """What results.json holds (MatrixRunner.results, written after every condition): decided over every row so far."""
    from rich.console import Console

    from tokenpath.experiment.runner import MatrixRunner
    from tokenpath.experiment.spec import parse

    runner = MatrixRunner(parse({"proxy": [{"name": "nginx"}]}), tmp_path, console=Console(quiet=True))
    runner.rows = [row("nginx", "stock", False), row("nginx", "stock", True, stub_headers=XAB)]
    plain, header = runner.results().rows
    assert plain.attribution is None
    assert header.attribution is not None
    assert header.attribution.credited == ("X-Accel-Buffering: no",)
    assert runner.rows[1].attribution is None  # the rows measured stay as measured; the results say it
