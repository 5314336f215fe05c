"""Runs a diagnosis's series (series.py) through the probe, growing it until classify() can tell, and turns each
trace into classify.RunFigures.

The only I/O of the diagnosis: one request to the stub's control plane (is a tokenpath stub behind the path?), then
one stream per run, one after another (the raw probe's, or a browser's: `Probe`), each followed, when paced, by the
stub's write log of that stream (its audit), so every frame's hold is its arrival minus its own write.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpath.audit import StreamLog
from tokenpath.diagnose.classify import (
    CLEAR_HELD,
    Cause,
    Check,
    RunFigures,
    Verdict,
    classify,
    disagree,
    intermittent,
    least_held,
    most_held,
    shares,
)
from tokenpath.diagnose.origin import OriginRun
from tokenpath.diagnose.series import BASE, Run, paced
from tokenpath.diagnose.shape import CLOCK_SLACK_MS
from tokenpath.errors import PeerError, ProtocolError, StreamFormatError, UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import PARTIAL_TRACE, Trace
from tokenpath.probe.transport import parse_target
from tokenpath.stub.control import MAX_HEALTH_BYTES, exchange, fetch_audit
from tokenpath.stub.presets import OriginBehaviour, parse_http10_framing, relevant_headers
from tokenpath.wire.apis import Api
from tokenpath.wire.carrier import SSE, WEBSOCKET
from tokenpath.wire.ending import STREAM_END, BodyEnd, StreamEnd

HEALTH_PATH = "/_tokenpath/health"
HEALTH_TIMEOUT_S = 2.0  # a stub answers its health at once; anything slower is not one
AUDIT_TIMEOUT_S = 5.0  # the stub answers its audit at once too; a slow one leaves that run on its schedule
# The longest paced run takes ttft + 3 s (series.MAX_STREAM_MS): these bound a path that holds it far longer.
PACED_FIRST_BYTE_S = 10.0
PACED_IDLE_S = 10.0
PACED_TOTAL_S = 30.0
MAX_ROUNDS = 4  # the series grows at most this many times (each names runs not measured yet, so it ends anyway)
MAX_REPEATS = 2  # an unsure answer's series is measured again at most this many times (a busy host's delays pass)

Probe = Callable[[ProbeConfig], Trace]
Audit = Callable[[str], StreamLog | None]  # a stream id -> the stub's write log of it (None: not known)


def is_stub(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether `url`'s origin answers the stub's health (a stub, or a proxy that forwards every path to one)."""
    return _health(url, timeout_s) is not None


def _health(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> dict[str, object] | None:
    target = parse_target(url)
    if target.scheme != "http":
        return None  # the control plane is read over plain HTTP; name a stub behind https with --stub-url
    try:
        status, body = exchange(target.origin, "GET", HEALTH_PATH, timeout_s=timeout_s, max_bytes=MAX_HEALTH_BYTES)
    except (OSError, ProtocolError):
        return None
    if status != 200:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("pacing"), dict) else None


def stub_origin(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> OriginBehaviour | None:
    """What the stub at `url` does besides pacing that a path acts on (its health's `origin`: a preset's, or its
    flags'); None when it does not say (an older stub) or says it malformed."""
    origin = (_health(url, timeout_s) or {}).get("origin")
    if not isinstance(origin, dict) or not isinstance(origin.get("headers", {}), dict):
        return None
    try:
        framing = parse_http10_framing(origin.get("http10_framing", "close"))
    except UsageError:
        return None
    headers = [(str(k), str(v)) for k, v in origin.get("headers", {}).items()]
    return OriginBehaviour(framing, relevant_headers(headers))


def check_stub(stub_url: str) -> None:
    if not is_stub(stub_url):
        raise UsageError(f"`stub_url` {stub_url} does not answer as a tokenpath stub (GET {HEALTH_PATH})")


def stub_audit(stub_url: str) -> Audit:
    """The write log of one stream, read from the stub's audit (None when it cannot be read: that run is then
    placed on its schedule)."""

    def audit(stream_id: str) -> StreamLog | None:
        try:
            entry = fetch_audit(stub_url, [stream_id], timeout_s=AUDIT_TIMEOUT_S).by_id().get(stream_id)
        except PeerError:
            return None
        return entry.log if entry is not None else None

    return audit


@dataclass(frozen=True, slots=True)
class Measured:
    figures: RunFigures
    headers: tuple[tuple[str, str], ...]  # the response head's, for recognising the proxy
    # How the run's stream ended (wire/ending.py: complete, cut_error, cut_silent); None: not classified. Exposed
    # for the verdicts (classify.py) to read; a cut run's figures are a short stream's.
    end: StreamEnd | None = None
    # Why the stub's write log of this run was not used (off_clock: not on the client's clock), "" when it was.
    clock_note: str = ""


def diagnose_series(
    template: ProbeConfig,
    first: Sequence[Run],
    probe: Probe = probe_stream,
    audit: Audit | None = None,
    accept_encoding: str | None = None,
    checks: Sequence[Check] = (),
) -> tuple[list[Measured], Verdict]:
    """The series: its first runs, then what classify() wants next, until it wants nothing (or MAX_ROUNDS). An
    answer still unsure is measured again: every run of the series repeated (up to MAX_REPEATS times), each run
    read by its repeat held least (classify.least_held), so a stream a busy host delayed is no evidence against the
    others; while some run's repeats still disagree (held in some, not in others) the series is measured again, to
    tell one loaded-host outlier from a hold the path makes only sometimes. A hold in a clear share of a run's
    repeats is the answer (classify.intermittent: "holds in 2 of 3 runs", exit 16), its runs the most-held repeats;
    unsure after that is the runs' own ambiguity. An unpaced series' unsure that no repeat changes (too few frames,
    bursts whose timing and size are both regular: _inherent) is not repeated. A cut is measured again when the
    uncut runs refute its limit or it is the series' only one (cuts.in_doubt), and while its repeats disagree; it is
    the answer (exit 19) when a clear share of a run's repeats were cut (cuts.repeated_cut), else a cut seen once
    (unsure, or a note on a hold). Grown runs of a compressing client send `accept_encoding` (the first runs' own
    when None); `checks` go to classify()."""
    judge: Any = next((c for c in checks if hasattr(c, "repeated")), None)  # cuts.CutCheck: how cuts repeat
    pool = run_series(template, first, probe, audit)
    asked = {run.name: run for run in first}
    sent = accept_encoding or next((r.accept_encoding for r in first if r.accept_encoding), None)
    measured = pool
    verdict = classify([m.figures for m in measured], checks)
    rounds = repeats = 0
    why = ""
    while True:
        every = [m.figures for m in pool]
        again = _undecided(verdict, repeats, every, judge)
        if verdict.wants and rounds < MAX_ROUNDS:
            rounds += 1
            more = [paced(name, sent) if sent else paced(name) for name in verdict.wants]
            asked |= {run.name: run for run in more}
            pool = pool + run_series(template, more, probe, audit, warm=False)
        elif repeats < MAX_REPEATS and again is not None:
            repeats += 1
            why = why or again
            pool = pool + run_series(template, list(asked.values()), probe, audit, warm=False)
        else:
            break
        measured = least_held(pool, lambda m: m.figures)
        verdict = classify([m.figures for m in measured], checks)
    cut = judge.repeated(every, verdict) if judge is not None and repeats else None
    if cut is not None:
        hit = next((p for p in pool if cut.end is not None and p.figures.end is cut.end), None)
        if hit is not None:  # the runs as read, the cut repeat in its name's place
            measured = [hit if m.figures.name == hit.figures.name else m for m in measured]
        return measured, _clock_note(_measured_again(cut, repeats, every, why), pool)
    found = intermittent(every, checks) if repeats and not verdict.held and verdict.cause is not Cause.CUT else None
    if found is not None:
        return most_held(pool, lambda m: m.figures), _clock_note(_measured_again(found, repeats, every, why), pool)
    return measured, _clock_note(_measured_again(verdict, repeats, every, why), pool)


def _undecided(verdict: Verdict, repeats: int, runs: Sequence[RunFigures], judge: Any = None) -> str | None:
    """Why the series is measured (again), in the note's words; None when the answer stands. Unsure (unless the
    runs cannot tell however often they are measured: _inherent); a cut in doubt (cuts.in_doubt: refuted by the
    uncut runs, or the series' only one) or whose repeats disagree (cut in some, not in others) and are not yet a
    clear share; repeats read as streaming, but some run held in some of them: another repeat tells one busy-host
    outlier from a hold the path makes only sometimes. `judge`: the check that names cuts (cuts.CutCheck), if any."""
    if judge is not None and not repeats and (doubt := judge.in_doubt(runs)) is not None:
        return str(doubt)
    if judge is not None and repeats:
        counted = judge.shares(runs)
        if any(0 < s.held < s.runs for s in counted) and not any(s.clear for s in counted):
            return "a cut came in some repeats and not others"
    if verdict.cause is Cause.UNSURE:
        return None if _inherent(verdict, runs) else "the answer was unsure"
    if repeats > 0 and verdict.cause is Cause.STREAMS and disagree(runs):
        return "the runs disagreed"
    return None


def _inherent(verdict: Verdict, runs: Sequence[RunFigures]) -> bool:
    """An unsure answer no repeat changes: an unpaced series (only the client's side varies, so a repeat sends the
    same request again) whose base run is too short to show a shape, or whose bursts' timing and size are both
    regular (one pacing cannot tell a timer from a size), or too few to tell. A paced series grows instead."""
    from tokenpath.diagnose.shape import Kind

    base = next((r for r in runs if r.name == BASE), None)
    if base is None or base.paced or verdict.wants:
        return False
    if base.seen().kind is Kind.TOO_SHORT:
        return True
    return "both regular" in verdict.summary or "too few of them" in verdict.summary


def _measured_again(verdict: Verdict, repeats: int, runs: Sequence[RunFigures], why: str = "") -> Verdict:
    """The verdict, with a note when it rests on repeats (why they were measured: a cut in doubt, an unsure answer,
    runs that disagreed), and one naming a run held in too few of its repeats to count (one loaded-host outlier, or
    a hold too rare to tell)."""
    if not repeats:
        return verdict
    read = (
        "its repeat held most (a hold seen in a clear share of repeats is the path's)"
        if verdict.held_runs is not None
        else "its repeat held least (a busy host only delays a stream, a path's steady hold is in every repeat)"
    )
    notes = [
        f"{why or 'the runs disagreed'}, so the series was measured {repeats + 1} times; each run is read by {read}"
    ]
    outliers = [s for s in shares(runs) if s.held > 0 and not s.clear]
    if outliers and verdict.held_runs is None:
        notes.append(
            f"held in too few repeats to count ({', '.join(s.words() for s in outliers)}): one busy-host delay, or a "
            f"hold rarer than {CLEAR_HELD} in {1 + MAX_REPEATS} runs"
        )
    return dataclasses.replace(verdict, notes=(*verdict.notes, *notes))


def run_series(
    template: ProbeConfig,
    runs: Sequence[Run],
    probe: Probe = probe_stream,
    audit: Audit | None = None,
    warm: bool = True,
) -> list[Measured]:
    """Each run, in order: its pacing in the body (paced runs) and its Accept-Encoding. With `warm`, one stream of
    the first run goes first and is not classified: a path just started (a Node or Python app's first request, a
    proxy's first upstream connection) adds tens of ms to every event of its first stream, which would read as a
    hold that is not there."""
    out = []
    if runs and warm:
        read_stream(probe, config_for(template, runs[0]))  # the warm-up; a failure fails the series as the run would
    for run in runs:
        trace, end = read_stream(probe, config_for(template, run))
        log = audit(trace.stream_id) if audit is not None and run.controlled else None
        found = dataclasses.replace(figures(run, trace, log, template.api), end=end)
        skew = off_clock(trace, log) or ""
        out.append(Measured(found, trace.head.headers if trace.head else (), trace.end or end, skew))
    return out


def run_origin(
    template: ProbeConfig, runs: Sequence[OriginRun], probe: Probe = probe_stream, audit: Audit | None = None
) -> list[tuple[OriginRun, RunFigures]]:
    """The base run again under each origin run's behaviour (diagnose/origin.py): its pacing, with what the run's
    `tokenpath` member adds (a plain origin, one behaviour alone)."""
    out = []
    base = paced(BASE)
    for origin in runs:
        cfg = config_for(template, base)
        member = {**(base.stub_pacing(template.api) or {}), **origin.member}
        cfg = dataclasses.replace(cfg, extra_body=(*template.extra_body, ("tokenpath", member)))
        trace, end = read_stream(probe, cfg)
        log = audit(trace.stream_id) if audit is not None else None
        found = dataclasses.replace(figures(base, trace, log, template.api), name=origin.name, end=end)
        out.append((origin, found))
    return out


CUTS = (BodyEnd.RESET, BodyEnd.TRUNCATED)  # how a path's cut breaks a body (an error status stays an error)


def read_stream(probe: Probe, cfg: ProbeConfig) -> tuple[Trace, StreamEnd | None]:
    """One stream, and its end when it did not complete: a reset or a body cut short (the probe's error carries the
    trace so far and the end wire/ending.py gave it), or an end on the trace (cut_silent, or the format's own error
    frame). Which of those is the path's cut is cuts.py's to say (cuts.path_cut: not the origin's error event, not
    an empty answer, not an end sooner than any limit); the figures keep every end so the report can name it. Bytes
    that broke HTTP (BodyEnd.MALFORMED: a bad chunk size, bytes past the body's end, a 101 never asked for) are the
    peer's error and raised (exit 10), as is any other failure."""
    try:
        trace = probe(cfg)
    except PeerError as exc:
        partial = PARTIAL_TRACE.of(exc)
        end = STREAM_END.of(exc)  # every client attaches the end it gave the stream (probe/client.py)
        if partial is None or end is None or end.how not in CUTS or isinstance(exc, StreamFormatError):
            raise  # no stream's end (a timeout of ours, an error status), or a malformed frame: not a cut
        return partial, end
    return trace, trace.end if trace.end is not None and trace.end.cut else None


def config_for(template: ProbeConfig, run: Run) -> ProbeConfig:
    """The probe config of one run. A paced run asks for its own frames: its max-tokens field is the pacing's token
    count (the stub takes the lower of the two, so the user's --max-tokens, meant for an endpoint that is not a
    stub, would cut the series' streams short; a format that requires the field, Anthropic's, still gets one)."""
    pacing = run.stub_pacing(template.api, template.model)
    if pacing is None:
        return dataclasses.replace(template, accept_encoding=run.accept_encoding)
    return dataclasses.replace(
        template,
        accept_encoding=run.accept_encoding,
        max_tokens=pacing["tokens"],
        extra_body=(*template.extra_body, ("tokenpath", pacing)),
        first_byte_timeout_s=min(template.first_byte_timeout_s, PACED_FIRST_BYTE_S),
        idle_timeout_s=min(template.idle_timeout_s, PACED_IDLE_S),
        total_timeout_s=min(template.total_timeout_s, PACED_TOTAL_S),
    )


def figures(run: Run, trace: Trace, log: StreamLog | None = None, api: Api = Api.OPENAI) -> RunFigures:
    """Per arrival, in order: frames, decoded frame bytes and time since the request was sent; and each frame's
    write, from the stub's log when it lines up with the frames, else from the run's schedule. The frames without
    output (keep-alives, control events, the end marker) are counted apart too (`other_frames`): a stream of nothing
    else is no stream to judge (classify). They stay in the shape: a path's holds are judged on every frame it held,
    and a format's control events are part of what it releases."""
    from tokenpath.wire.kinds import FrameKind
    from tokenpath.wire.reader import frame_reader

    kind = frame_reader(trace.api).kind
    arrivals = [(i, r) for i, r in enumerate(trace.reads) if r.frames > 0]
    nbytes: dict[int, int] = {}
    other = 0
    for f in trace.frames:
        nbytes[f.read_index] = nbytes.get(f.read_index, 0) + len(f.frame.raw)
        other += kind(f.frame) not in (FrameKind.CONTENT, FrameKind.REASONING)
    sent = trace.t_sent_ns

    def ms(t: int | None) -> float | None:
        return (t - sent) / 1e6 if t is not None else None

    return RunFigures(
        name=run.name,
        frames=trace.frame_count,
        bursts=tuple(r.frames for _, r in arrivals),
        burst_bytes=tuple(nbytes.get(i, 0) for i, _ in arrivals),
        arrivals_ms=tuple((r.t_ns - sent) / 1e6 for _, r in arrivals),
        ttfb_ms=ms(trace.t_first_byte_ns),
        head_ms=ms(trace.t_head_ns),
        ttft_ms=ms(trace.t_first_content_ns),
        accept_encoding=run.accept_encoding,
        content_encoding=trace.content_encoding,
        interval_ms=run.interval_ms,
        frame_bytes=run.frame_bytes,
        stub_ttft_ms=run.ttft_ms,
        writes_ms=frame_writes(run, trace, log, api),
        http_version=trace.http_version,
        transport=WEBSOCKET if trace.ws is not None and not trace.ws.fell_back else SSE,
        other_frames=other,
    )


def frame_writes(run: Run, trace: Trace, log: StreamLog | None, api: Api) -> tuple[float, ...] | None:
    """Each frame's write, in ms since the request was sent: the write that completed it in the stub's log (the
    frames and the writes hold the same bytes, one frame a write or several) when that log is on the client's clock
    (off_clock), else the run's schedule when its frames are exactly the scheduled ones (OpenAI's bare frames), else
    None (the frames cannot be placed)."""
    logged = _logged_writes(trace, log)
    if logged is not None and off_clock(trace, log) is None:
        return tuple((t - trace.t_sent_ns) / 1e6 for t in logged)
    if run.controlled and api is Api.OPENAI and run.frames == trace.frame_count and run.ttft_ms is not None:
        interval = run.interval_ms or 0.0
        return tuple(run.ttft_ms + k * interval for k in range(trace.frame_count))
    return None


def _logged_writes(trace: Trace, log: StreamLog | None) -> list[int] | None:
    """Per frame, the stub's clock time (ns) of the write that completed it; None when the log does not line up
    with the frames (no log, a trace that kept fewer frames, other bytes than were written)."""
    frames = [len(f.frame.raw) for f in trace.frames]
    if log is None or not log.writes or len(frames) != trace.frame_count:
        return None
    ends, total = [], 0
    for w in log.writes:
        total += w.nbytes
        ends.append((total, w.actual_ns))
    out, k, at = [], 0, 0
    for n in frames:
        at += n
        while k < len(ends) and ends[k][0] < at:
            k += 1
        if k == len(ends):
            return None
        out.append(ends[k][1])
    return out if total == at else None


def off_clock(trace: Trace, log: StreamLog | None) -> str | None:
    """Why the stub's write log of this stream is not on the client's clock, in the note's words; None when it is
    (or does not line up with the frames, so is not used anyway). On one clock every write comes after the request
    was sent and before its frame arrived; a stub on another host reads its own CLOCK_MONOTONIC, and a hold
    computed across the two clocks is their difference, not the path's (seconds of "held" or of "early")."""
    logged = _logged_writes(trace, log)
    if logged is None:
        return None
    slack = CLOCK_SLACK_MS * 1e6  # the stub reads its clock before it writes: on one clock no slack is needed
    sent = trace.t_sent_ns
    early = min(logged) - sent
    if early < -slack:
        return f"its first write is {-early / 1e6:.0f} ms before the request was sent"
    late = max(t - f.t_ns for t, f in zip(logged, trace.frames, strict=True))
    if late > slack:
        return f"a write is {late / 1e6:.0f} ms after its frame arrived"
    return None


def _clock_note(verdict: Verdict, pool: Sequence[Measured]) -> Verdict:
    """The verdict, with a note when some run's write log was not used because it is not on the client's clock."""
    off = [m for m in pool if m.clock_note]
    if not off:
        return verdict
    placed = "on its schedule" if all(m.figures.writes_ms is not None for m in off) else "on its arrivals alone"
    note = (
        f"the stub's write log is not on this host's clock in {len(off)} of {len(pool)} runs ({off[0].clock_note}): "
        f"a stub on another host reads its own CLOCK_MONOTONIC, so its log was not used and each such run is read "
        f"{placed}; run the stub on this host for its write times"
    )
    return dataclasses.replace(verdict, notes=(*verdict.notes, note))
