"""Whether a diagnosis's verdict rests on what the origin does (diagnose/origin.py), on modelled runs: which runs
tell (a plain origin, each behaviour alone), the rule's answer (origins/credit.py, the matrix's), and the words with
the fix a plain origin needs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.diagnose.test_classify import grown, streaming, whole
from tokenpath.diagnose import measure
from tokenpath.diagnose import series as s
from tokenpath.diagnose.classify import RunFigures
from tokenpath.diagnose.origin import PLAIN, OriginFinding, OriginRun, judge, origin_runs, seen_in_heads
from tokenpath.diagnose.report import diagnosis, lines
from tokenpath.stub.presets import PRESETS, OriginBehaviour

NGINX = [("Server", "nginx/1.22.1")]


def test_the_runs_that_tell_are_a_plain_origin_and_each_behaviour_alone() -> None:
    assert origin_runs(OriginBehaviour()) == []
    runs = origin_runs(PRESETS["llama-server"])
    assert [(r.name, r.parts, dict(r.member)) for r in runs] == [
        (PLAIN, frozenset(), {"plain_origin": True}),
        (
            "only HTTP/1.0: chunked",
            frozenset({"HTTP/1.0: chunked"}),
            {"plain_origin": True, "http10_framing": "chunked"},
        ),
        (
            "only X-Accel-Buffering: no",
            frozenset({"X-Accel-Buffering: no"}),
            {"plain_origin": True, "headers": {"X-Accel-Buffering": "no"}},
        ),
    ]
    one = origin_runs(OriginBehaviour("close", (("X-Accel-Buffering", "no"),)))
    assert [r.name for r in one] == [PLAIN]  # one behaviour: the plain origin alone tells


def measured(runs: list[OriginRun], streams: dict[str, bool]) -> list[tuple[OriginRun, RunFigures]]:
    return [(r, replace((streaming if streams[r.name] else whole)(s.BASE), name=r.name)) for r in runs]


def test_a_path_that_streams_only_because_of_the_origin_is_told_what_a_plain_one_needs() -> None:
    """Stock nginx in front of llama-cpp-python (its preset): streamed by X-Accel-Buffering alone; Cache-Control:
    no-store does nothing; a plain origin is held, and nginx's measured line streams it."""
    behaviour = PRESETS["llama-cpp-python"]
    runs = origin_runs(behaviour)
    seen = {PLAIN: False, "only X-Accel-Buffering: no": True, "only Cache-Control: no-store": False}
    found = judge(behaviour, streaming(s.BASE), measured(runs, seen))
    assert found.credit is not None
    assert found.credit.streams
    assert found.credit.credited == frozenset({"X-Accel-Buffering: no"})
    assert found.plain_streams is False
    verdict, figures = grown(streaming)
    plain = [f for _, f in measured(runs, seen)]
    d = diagnosis("http://p", True, figures, verdict, [NGINX], origin=found, origin_runs=plain)
    said = (
        "origin: this path streams only because the origin sends X-Accel-Buffering: no; an origin that does not "
        "will be held: add proxy_buffering off;"
    )
    assert said in lines(d)
    doc = d.to_json()["origin"]
    assert doc["credited"] == ["X-Accel-Buffering: no"]
    assert doc["streams_because"] is True
    assert doc["fix"] == "add proxy_buffering off;"
    # Not recognised: the rule's generic fix for a whole response held.
    anonymous = diagnosis("http://p", True, figures, verdict, [[]], origin=found, origin_runs=plain)
    assert anonymous.origin is not None
    assert anonymous.origin.fix
    assert "proxy_buffering" not in anonymous.origin.fix


def test_a_path_that_streams_a_plain_origin_too_does_not_rest_on_it() -> None:
    behaviour = PRESETS["llama-server"]
    runs = origin_runs(behaviour)
    found = judge(behaviour, streaming(s.BASE), measured(runs, dict.fromkeys([r.name for r in runs], True)))
    assert found.credit is None
    assert found.words == (
        "it streams a plain origin too: the verdict does not rest on the origin's HTTP/1.0: chunked and "
        "X-Accel-Buffering: no"
    )


def test_a_path_that_ignores_the_origins_behaviour_says_so() -> None:
    """nginx ignoring X-Accel-Buffering in front of llama-cpp-python: held, as a plain origin is."""
    behaviour = PRESETS["llama-cpp-python"]
    runs = origin_runs(behaviour)
    found = judge(behaviour, whole(s.BASE), measured(runs, dict.fromkeys([r.name for r in runs], False)))
    assert found.credit is not None
    assert not found.credit.streams
    assert found.words == (
        "this path holds the stream although the origin sends Cache-Control: no-store and X-Accel-Buffering: no: "
        "it ignores it"
    )


def test_a_plain_origin_or_no_measure_says_nothing_or_what_it_may_rest_on() -> None:
    plain = judge(OriginBehaviour(), streaming(s.BASE), [])
    assert plain.words is None
    heads = [[("X-Accel-Buffering", "no"), ("Cache-Control", "no-cache")], [("Cache-Control", "no-transform")]]
    seen = seen_in_heads(heads)
    assert seen.headers == (("X-Accel-Buffering", "no"), ("Cache-Control", "no-transform"))
    assert seen_in_heads([[("Cache-Control", "no-cache")]]).plain  # the stub's own SSE header: no path acts on it
    words = OriginFinding(seen, None).words
    assert words is not None
    assert words.startswith("the origin's answer carries X-Accel-Buffering: no and Cache-Control: no-transform")


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        ({"pacing": {}}, None),  # an older stub: says nothing of it
        ({"pacing": {}, "origin": "chunked"}, None),
        ({"pacing": {}, "origin": {"http10_framing": "gzip"}}, None),
        ({"pacing": {}, "origin": {"headers": ["X-Accel-Buffering"]}}, None),
        ({"pacing": {}, "origin": {"http10_framing": "close", "headers": {}}}, OriginBehaviour()),
        (
            {"pacing": {}, "origin": {"http10_framing": "chunked", "headers": {"x-accel-buffering": "no", "X-Y": 1}}},
            OriginBehaviour("chunked", (("X-Accel-Buffering", "no"),)),  # only what a path acts on, spelled as such
        ),
    ],
)
def test_what_a_stub_says_it_does_is_read_warily(
    monkeypatch: pytest.MonkeyPatch, health: dict[str, object], expected: OriginBehaviour | None
) -> None:
    monkeypatch.setattr(measure, "_health", lambda url, timeout_s=0.0: health)
    assert measure.stub_origin("http://p") == expected
