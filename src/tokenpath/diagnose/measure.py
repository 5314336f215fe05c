"""Runs a diagnosis's series (series.plan) through the probe and turns each trace into classify.RunFigures.

The only I/O of the diagnosis: one request to the stub's control plane (is a tokenpath stub behind the path?),
then one probe_stream per run, one after another.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokenpath.diagnose.classify import RunFigures
from tokenpath.diagnose.series import Run
from tokenpath.errors import ProtocolError, UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.probe.transport import parse_target
from tokenpath.stub.control import exchange
from tokenpath.wire.ending import StreamEnd

HEALTH_PATH = "/_tokenpath/health"
HEALTH_TIMEOUT_S = 2.0  # a stub answers its health at once; anything slower is not one
# A paced run takes ttft + frames x interval (~1.5 s at most): these bound a path that holds it far longer.
PACED_FIRST_BYTE_S = 10.0
PACED_IDLE_S = 10.0
PACED_TOTAL_S = 30.0

Probe = Callable[[ProbeConfig], Trace]


def is_stub(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether `url`'s origin answers the stub's health (a stub, or a proxy that forwards every path to one)."""
    target = parse_target(url)
    if target.scheme != "http":
        return False  # the control plane is read over plain HTTP; name a stub behind https with --stub-url
    try:
        status, body = exchange(target.origin, "GET", HEALTH_PATH, timeout_s=timeout_s)
    except (OSError, ProtocolError):
        return False
    if status != 200:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("pacing"), dict)


def check_stub(stub_url: str) -> None:
    if not is_stub(stub_url):
        raise UsageError(f"`stub_url` {stub_url} does not answer as a tokenpath stub (GET {HEALTH_PATH})")


@dataclass(frozen=True, slots=True)
class Measured:
    figures: RunFigures
    headers: tuple[tuple[str, str], ...]  # the response head's, for recognising the proxy
    # How the run's stream ended (wire/ending.py: complete, cut_error, cut_silent); None: not classified. Exposed
    # for the verdicts (classify.py) to read; a cut run's figures are a short stream's.
    end: StreamEnd | None = None


def run_series(template: ProbeConfig, runs: Sequence[Run], probe: Probe = probe_stream) -> list[Measured]:
    """Each run of the series, in order: its pacing in the body (paced runs) and its Accept-Encoding. One stream of
    the first run goes first and is not classified: a path just started (a Node or Python app's first request,
    a proxy's first upstream connection) adds tens of ms to every event of its first stream, which would read as
    a hold that is not there."""
    out = []
    if runs:
        probe(config_for(template, runs[0]))  # the warm-up; a failure here fails the series as the run would
    for run in runs:
        cfg = config_for(template, run)
        trace = probe(cfg)
        out.append(Measured(figures(run, trace), trace.head.headers if trace.head else (), trace.end))
    return out


def config_for(template: ProbeConfig, run: Run) -> ProbeConfig:
    pacing = run.stub_pacing()
    if pacing is None:
        return dataclasses.replace(template, accept_encoding=run.accept_encoding)
    return dataclasses.replace(
        template,
        accept_encoding=run.accept_encoding,
        extra_body=(*template.extra_body, ("tokenpath", pacing)),
        first_byte_timeout_s=min(template.first_byte_timeout_s, PACED_FIRST_BYTE_S),
        idle_timeout_s=min(template.idle_timeout_s, PACED_IDLE_S),
        total_timeout_s=min(template.total_timeout_s, PACED_TOTAL_S),
    )


def figures(run: Run, trace: Trace) -> RunFigures:
    """Per arrival, in order: frames, decoded frame bytes and time since the request was sent."""
    arrivals = [(i, r) for i, r in enumerate(trace.reads) if r.frames > 0]
    nbytes: dict[int, int] = {}
    for f in trace.frames:
        nbytes[f.read_index] = nbytes.get(f.read_index, 0) + len(f.frame.raw)
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
        ttft_ms=ms(trace.t_first_content_ns),
        accept_encoding=run.accept_encoding,
        content_encoding=trace.content_encoding,
        interval_ms=run.interval_ms,
        frame_bytes=run.frame_bytes,
        stub_ttft_ms=run.ttft_ms,
    )
