"""examples/timeouts_survey.py's summary (the survey itself is the lead's to run): each path's limits with the cut's
kind, and per proxy whether its long_streams variant came through every measure up to --max."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from tests.helpers import load_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "timeouts_survey.py"


def example() -> ModuleType:
    return load_script(EXAMPLE, "timeouts_survey")


def found(measure: str, survived: float | None, cut: float | None, kind: str = "cut_error") -> dict[str, Any]:
    return {
        "measure": measure,
        "longest_survived_s": survived,
        "shortest_cut_s": cut,
        "cut": {"kind": kind} if cut is not None else None,
    }


def path(proxy: str, *limits: dict[str, Any], reset: bool | None = None) -> dict[str, Any]:
    return {"proxy": proxy, "target": "http://x", "limits": list(limits), "keepalives_reset_idle": reset}


def test_the_summary_names_each_limit_and_whether_the_fix_holds() -> None:
    doc = {
        "paths": [
            path("nginx:stock", found("mid_stream", 58, 62), found("total", 660, None), reset=True),
            path("nginx:long_streams", found("mid_stream", 660, None), found("total", 660, None)),
            path("envoy:long_streams", found("mid_stream", 660, None), found("total", None, 1, "cut_silent")),
        ]
    }
    lines = example().summary(doc, 660.0)
    text = "\n".join(lines)
    assert "58-62 s (cut_error)" in text
    assert "none up to 660 s" in text
    assert "below 1 s (cut_silent)" in text
    assert "nginx: long_streams came through every measure up to 660 s" in lines
    assert "envoy: long_streams was cut: the fix does not hold" in lines
