"""The results model: what every run writes and every exporter reads (pyperf's `_bench.py` shape).

Frozen dataclasses whose field names are the JSON keys, each with `from_json` / `to_json`; one version map and the
migrations that bring an older file up to the current shape, so a reader never guesses at a missing key. Runners
build these, `write()` puts them on disk once, and the tables, the report page, its charts, `--compare` and the CSV
take them. Inputs echoed for provenance (the experiment as declared, a proxy's effective config, the stub's audit
verdicts, the load configuration) stay JSON objects: they are recorded, not computed on.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from tokenpath import __version__
from tokenpath.axes import AXES, Condition
from tokenpath.errors import UsageError
from tokenpath.probe.metrics import RunMetrics
from tokenpath.results.check import DocumentError, at, check, check_at_least, check_fields, check_keys
from tokenpath.userfiles import read_text, write_atomically
from tokenpath.wire.acceptencoding import IDENTITY as IDENTITY  # re-exported: what the results say of no coding
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import StreamEnd
from tokenpath.wire.httpversion import HttpVersion

Json = dict[str, Any]  # a JSON object as read or about to be written
Kind = Literal["matrix", "sweep", "load"]

# The results.json version each kind is written at, and the migrations that bring older files up to it.
# 1: the first release.
# 2: the exclusion rule as applied (each run's audit carries its tolerance), certification's emitter drift,
#    per-condition exclusion shares, stub_headers in conditions and rows, kept/total per load row.
# 3: written from this model: every key of a row, run, level and certification is present (a field that did not
#    apply is null or empty, never absent), and matrix files always carry their exclusion shares.
# 4: a load row's level is one field, `level` (streams held open, or arrivals per second), with `loop` saying which;
#    the pair `concurrency` / `rate` (one of them null) is gone.
# 5: matrix conditions and rows carry the streaming format (`api`) and the request's `accept_encoding`; rows and runs
#    the `content_encoding` that came back (older files: openai, no Accept-Encoding, identity). Load rows carry the
#    same three (`api`, `accept_encoding`, `content_encoding`) and `added_frame_delay_ms` (null before 5).
#    Later in 5, with defaults and no bump: what comes before the first token (issue 24 §4) on conditions and rows
#    (`heartbeat_ms`, `reasoning_tokens`, `first_event_bytes`, `head_at`), rows' `ttfb_ms_median` and
#    `first_token_ms_median`, load rows' `added_first_token_ms`. A file without them measured none of it, which is
#    exactly what the defaults say (so a migration would be a no-op), and an older reader ignores keys it does not know.
# 6: the client's HTTP version (issue 25): `http_version` ("1.1" or "2") on matrix runs and rows, `client_http` on
#    matrix conditions (over HTTP/2 also `h2_window` on conditions and rows: "default" when absent), `http_version`
#    on load rows with, over HTTP/2, `streams_per_connection`, `connections`, `connection_split`,
#    `flow_control_stalls` and `data_frames_per_read` (null over HTTP/1.1). Every file before 6 was HTTP/1.1.
# 7: floors and exclusion shares name their condition by its value (`condition`: the object `experiment.conditions`
#    holds, null for the overall share; `label` beside it for people) instead of by its label; matrix rows carry
#    every axis of tokenpath.axes (an axis added later reads, in an older file, as its default: nothing done).
# 8: how each stream ended (issue 36, wire/ending.py): `end` on matrix runs (kind, how, at_ms, since_last_byte_ms,
#    detail; in their metrics too) and `ends` (kind -> runs or streams) on matrix rows and load levels. A cut stream
#    is excluded from every figure and counted (a row's `exclusions` by kind, a level's `errors`). Files before 8
#    classified no end: their runs' `end` is null and `ends` empty (not known, never "complete").
#    Later in 8, with a default and no bump: `fallback_ms_median` on matrix rows (issue 38: a WebSocket row whose
#    path did not carry the upgrade, what the client's fallback to SSE cost; null: no fallback ran).
# 9: against a real origin (issue 37): `attribution` on matrix rows (which origin behaviour made the verdict, against
#    which plain row: experiment/attribution.py) and `pairing` (a started origin's paired runs: pairs kept and
#    excluded, by reason, what the path added, the origin's own TTFT and gap over its direct streams). Files before 9
#    stored neither: both null (the attribution was printed under the terminal table only, the pairing beside it).
#    Later in 9, with defaults and no bump: `transport` ("sse" before it) and `websocket` on load rows (issue 38:
#    `load --transport websocket`: upgrades, their time, what came instead of 101, messages per read; null over SSE);
#    `http_version` "3" and `handshake_ms` (p50/p99 of each stream's QUIC handshake) on load rows over HTTP/3.
SCHEMA_VERSION = 9
KNOWN_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)
DEFAULT_API = Api.OPENAI.value
HTTP11 = HttpVersion.HTTP11.value  # the client's HTTP version before schema 6, and the default

T = TypeVar("T")


# --- common ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    version: str


@dataclass(frozen=True, slots=True)
class Host:
    hostname: str
    kernel: str
    os: str
    machine: str
    cpus: int | None
    python: str

    @classmethod
    def this_machine(cls) -> Host:
        return cls(
            socket.gethostname(),
            platform.release(),
            platform.platform(),
            platform.machine(),
            os.cpu_count(),
            platform.python_version(),
        )


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where, when and with what a result was measured."""

    kind: Kind
    tool: Tool
    created: str
    host: Host
    schema_version: int = SCHEMA_VERSION  # the version the file was written at (files are written at the current)

    @classmethod
    def now(cls, kind: Kind) -> Provenance:
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return cls(kind, Tool("tokenpath", __version__), created, Host.this_machine())


@dataclass(frozen=True, slots=True)
class ResultWarning:
    """Why a figure should be read with care, and what to do about it."""

    kind: str
    message: str
    remedy: str


@dataclass(frozen=True, slots=True)
class PathSkip:
    """A matrix or sweep path that was not measured."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class TargetSkip:
    """A load target that was not measured."""

    target: str
    reason: str


# --- matrix and sweep ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    passed: bool
    evidence: str
    environment: str = ""


@dataclass(frozen=True, slots=True)
class Drift:
    """The emitter's pacing drift over the writes of certification's direct streams (ms)."""

    writes: int
    p50: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class Certification:
    passed: bool = False
    forced: bool = False
    checks: tuple[Check, ...] = ()
    emitter_drift_ms: Mapping[str, Drift] = field(default_factory=dict)  # per environment ("loopback, tls")


@dataclass(frozen=True, slots=True)
class MatrixRun:
    """One run of one path in one condition, joined to the stub's write log."""

    stream_id: str
    included: bool
    excluded_because: str | None
    metrics: RunMetrics | None
    path_added_ttft_ms: float | None
    frame_delay_ms: Mapping[str, float]
    audit: Json | None  # the stub's verdict, as judged by the declared rule
    arrivals: tuple[tuple[float, int], ...]  # (ms after the stub's first write, frames completed)
    writes_ms: tuple[float, ...]  # the stub's write of each frame, ms after its first
    error: str | None
    audited: bool = True  # False against a real endpoint (no write log); path_added_ttft_ms is then vs direct
    content_encoding: str = IDENTITY  # the response's Content-Encoding, as the probe decoded it (schema 5)
    http_version: HttpVersion = HttpVersion.HTTP11  # what the client spoke to the path (schema 6)
    # How the stream ended (schema 8): also for a run whose probe failed (a reset, a body cut short, an error
    # status); None when it never began (no connection, a timeout of the probe's own) or in files before 8.
    end: StreamEnd | None = None


@dataclass(frozen=True, slots=True)
class Attribution:
    """Which origin behaviour made a row's verdict (experiment/attribution.py decides): judged against the same path
    and client-side axes with a plain origin (close-delimited to HTTP/1.0, no header a path acts on)."""

    streams: bool  # True: it streams because of `credited`; False: held although the origin sends them
    credited: tuple[str, ...]  # the origin's behaviours named, in words ("X-Accel-Buffering: no")
    baseline: str  # the plain row it was judged against: its path and condition, as the tables label them
    words: str  # what the behaviours did, in words ("streams because the origin sends ...")
    origin: str = ""  # the row's origin in words ("stub as llama-server", "stub: X-Accel-Buffering: no")

    @classmethod
    def from_json(cls, data: Json) -> Attribution:
        credited = data.get("credited") or []
        if not isinstance(credited, list) or not all(isinstance(c, str) for c in credited):
            raise ValueError(f"attribution: `credited` is not a list of words: {credited!r}")
        return cls(bool(data["streams"]), tuple(credited), data["baseline"], data["words"], data.get("origin", ""))


@dataclass(frozen=True, slots=True)
class Paired:
    """A path's paired runs against a started origin in one condition (experiment/pairs.py): each run between two
    direct streams, what it added against their mean, and the origin's own pace over the condition's direct streams,
    apart from what the path added (never mixed into it)."""

    kept: int
    excluded: int
    reasons: Mapping[str, int] = field(default_factory=dict)  # excluded pairs by reason (pairs.py's first words)
    added_ttft_ms: float | None = None  # the median over the kept pairs, with its interval
    added_ttft_ms_low: float | None = None
    added_ttft_ms_high: float | None = None
    confidence: float | None = None  # the interval's own level (3 pairs: 75 %)
    added_gap_ms: float | None = None
    added_max_gap_ms: float | None = None
    directs: int = 0  # the origin's direct streams in the condition
    origin_ttft_ms: float | None = None  # median [low, high] over them
    origin_ttft_ms_low: float | None = None
    origin_ttft_ms_high: float | None = None
    origin_gap_ms: float | None = None  # the median gap between arrivals, median [low, high] over them
    origin_gap_ms_low: float | None = None
    origin_gap_ms_high: float | None = None


@dataclass(frozen=True, slots=True)
class MatrixRow:
    """One path in one condition, over its runs. In the file a row's condition is spelled out in its own keys, one
    per axis (tokenpath.axes: interval_ms, frame_bytes, link, tls, stub_headers, endpoint, api, accept_encoding,
    http_version, h2_window, what the stub sends besides its tokens); a row against a real endpoint
    has no stub audit, and its added TTFT is against direct per round."""

    proxy: str
    variant: str
    condition: Condition
    runs: int
    excluded: int
    verdict: str
    content_encoding: str = IDENTITY  # what the path answered with over the runs ("gzip", or "gzip/identity" mixed)
    exclusions: Mapping[str, int] = field(default_factory=dict)
    fpr_median: float | None = None
    fpr_min: float | None = None
    fpr_max: float | None = None
    added_ttft_ms_median: float | None = None
    added_ttft_ms_p90: float | None = None
    ttft_ms_median: float | None = None
    ttfb_ms_median: float | None = None
    first_token_ms_median: float | None = None  # reasoning or content: set when the stub sent reasoning first
    arrivals_median: float | None = None
    modal_burst: int | None = None
    modal_burst_gap_ms: float | None = None
    frame_delay_ms_median: float | None = None
    # Frames after the first content (issue 24 §6): each one's arrival minus its write, p50 and p99 per run, the
    # median over runs. A path that delivers the first token on time and bunches the rest shows here.
    after_first_delay_ms_p50: float | None = None
    after_first_delay_ms_p99: float | None = None
    within_floor: bool | None = None
    # Over WebSocket, where the path did not carry the upgrade: the median of what the client's fallback cost (its
    # first upgrade -> the first content event over SSE, probe/wsfallback.py), over the runs that fell back.
    fallback_ms_median: float | None = None
    # Runs by how their stream ended (schema 8; wire/ending.py kinds). A cut run is never in the figures above: it
    # is excluded and counted, by its kind, in `exclusions`.
    ends: Mapping[str, int] = field(default_factory=dict)
    # Against a real origin (schema 9): which origin behaviour made the verdict (None: none, or none could be told),
    # and a started origin's paired runs (None: the row was not paired).
    attribution: Attribution | None = None
    pairing: Paired | None = None
    raw: tuple[MatrixRun, ...] = ()

    @property
    def path_label(self) -> str:
        return self.proxy if self.variant == "stock" else f"{self.proxy} ({self.variant})"

    @property
    def kept(self) -> int:
        return self.runs - self.excluded

    def to_json(self) -> Json:
        out = _json_fields(self, exclude={"condition"})
        return {"proxy": out.pop("proxy"), "variant": out.pop("variant"), **self.condition.to_json(row=True), **out}


@dataclass(frozen=True, slots=True)
class FloorEntry:
    """The direct path's figures in one condition: anything within them is not a proxy effect."""

    condition: Condition
    fpr: float | None = None
    added_ttft_ms: float | None = None
    ttft_spread_ms: float | None = None

    def to_json(self) -> Json:
        return _named(self.condition, _json_fields(self, exclude={"condition"}))


# The noise around a floor: a row within it is not a proxy effect (experiment/rows.py), and no difference smaller
# than it is called between two runs (report/compare.py).
FLOOR_MARGIN_FPR = 0.05  # frames per read within this of the direct path's worst run is noise
FLOOR_MARGIN_TTFT_MS = 1.0  # added TTFT within the direct path's spread plus this is noise
# How an undecided row's verdict begins (within_floor None beside a floor: experiment/rows.py's ttft_evidence could
# not place its first token on a loaded host): every rendering says so rather than read it as late.
UNDECIDED_VERDICT = "streams; its first token not told apart from the direct floor"


@dataclass(frozen=True, slots=True)
class ExclusionShare:
    condition: Condition | None  # None: every condition together
    excluded: int
    runs: int
    share: float

    @property
    def label(self) -> str:
        return self.condition.label if self.condition is not None else "all"

    def to_json(self) -> Json:
        return _named(self.condition, _json_fields(self, exclude={"condition"}))


def _named(condition: Condition | None, figures: Json) -> Json:
    """A floor's or a share's JSON: its condition's value (null: all of them) and, for people, its label."""
    label = condition.label if condition is not None else "all"
    return {"condition": condition.to_json() if condition is not None else None, "label": label, **figures}


@dataclass(frozen=True, slots=True)
class ProxyInfo:
    version: str
    variants: Mapping[str, Json] = field(default_factory=dict)  # variant -> {"config": effective config}


@dataclass(frozen=True, slots=True)
class SweepPoint:
    frame_bytes: int
    interval_ms: float
    fpr_median: float | None
    added_ttft_ms_median: float | None
    modal_burst: int | None
    within_floor: bool | None


@dataclass(frozen=True, slots=True)
class Inferred:
    """What makes a proxy flush, inferred from a sweep: a size, a timer, both or neither."""

    explanation: str
    # The size threshold N is only bounded by the points: size_range is (lowest, highest) N they allow, both
    # inclusive, and size_bytes is the upper bound, size_range[1] (the fewest bytes seen to release a burst, not N).
    size_bytes: int | None = None
    size_range: tuple[int, int] | None = None
    # The timer, to the precision its points support (experiment.sweep.stated); written before that precision (up
    # to 0.1 ms) by older tokenpath, and from the first frames' added TTFT, which reads low by the stub's TTFT.
    timer_ms: float | None = None
    rule: str | None = None
    caveat: str | None = None


@dataclass(frozen=True, slots=True)
class MatrixResults:
    """`tokenpath matrix` and `tokenpath sweep` (a sweep adds its points and what it inferred)."""

    provenance: Provenance
    experiment: Json  # the experiment as declared before the run (experiment.spec.Experiment.to_json)
    certification: Certification = field(default_factory=Certification)
    proxies: Mapping[str, ProxyInfo] = field(default_factory=dict)
    skipped: tuple[PathSkip, ...] = ()
    rows: tuple[MatrixRow, ...] = ()
    floors: tuple[FloorEntry, ...] = ()
    exclusion_shares: tuple[ExclusionShare, ...] = ()
    interrupted: bool = False
    points: tuple[SweepPoint, ...] | None = None
    inferred: Inferred | None = None

    @property
    def kind(self) -> Kind:
        return self.provenance.kind

    @property
    def unjudged(self) -> tuple[Condition, ...]:
        """The conditions whose direct path kept no run, so no floor: nothing measured through a proxy there can be
        told from the host's own noise (the run's exit, cli/common.end_matrix)."""
        return tuple(f.condition for f in self.floors if f.fpr is None)

    def to_json(self) -> Json:
        doc = _document(self.provenance)
        doc.update(_json_fields(self, exclude={"provenance", "points", "inferred"}))
        if self.points is not None:
            doc["points"] = [_to_json(p) for p in self.points]
            doc["inferred"] = _to_json(self.inferred) if self.inferred is not None else None
        return doc


def condition_label(row: MatrixRow) -> str:
    """A row's condition in words (tokenpath.axes): for people; rows, floors and shares are joined on the value."""
    return row.condition.label


def exclusion_shares(rows: Iterable[MatrixRow]) -> tuple[ExclusionShare, ...]:
    """Runs kept of runs made, per condition and overall: seed 003 publishes "1.7 % to 11.7 % per condition"."""
    by_condition: dict[Condition | None, list[int]] = {}
    for row in rows:
        counts = by_condition.setdefault(row.condition, [0, 0])
        counts[0] += row.excluded
        counts[1] += row.runs
    by_condition[None] = [sum(e for e, _ in by_condition.values()), sum(n for _, n in by_condition.values())]
    return tuple(ExclusionShare(c, e, n, e / n if n else 0.0) for c, (e, n) in by_condition.items())


# --- load ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float | None = None
    p99: float | None = None
    p999: float | None = None


@dataclass(frozen=True, slots=True)
class MedianAndTail:
    """p50 and p99 only: a floor, or one run's figures."""

    p50: float | None = None
    p99: float | None = None


@dataclass(frozen=True, slots=True)
class FlowControlStalls:
    """HTTP/2 flow control as the client saw it over a level: a stall is a stretch in which a stream's receive
    window sat at 0 (or below one frame) before the stream ended; its time is per stream, summed over its stalls."""

    streams: int = 0  # streams measured
    stalled_streams: int = 0  # of those, streams with at least one stall
    stalls: int = 0  # stalls over all streams
    stall_ms_p50: float | None = None  # per stream, over every stream (0 for one that never stalled)
    stall_ms_p99: float | None = None


@dataclass(frozen=True, slots=True)
class WebSocketLoad:
    """A level's streams over WebSocket (load --transport websocket): the upgrades, and what came after them."""

    upgraded: int = 0  # streams answered 101
    not_upgraded: Mapping[str, int] = field(default_factory=dict)  # the status that came instead ("0": none valid)
    upgrade_ms_p50: float | None = None  # the offer written -> the 101's head, over the upgraded streams
    upgrade_ms_p99: float | None = None
    messages: int = 0
    messages_per_read: float | None = None  # coalescing: messages completed per read that completed any
    # Closes before the final event (cuts), by code: the peer's, 1006 for a socket that ended without one, or ours
    # for a limit (1003 binary, 1009 too big).
    closes_before_final: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TargetInfo:
    version: str
    variant: str
    config: Json | str | None = None


@dataclass(frozen=True, slots=True)
class LoadRow:
    """One target at one level (streams held open, or arrivals per second), merged over runs."""

    level: int | float  # streams held open (closed loop), or streams started per second (open loop)
    target: str
    loop: Literal["closed", "open"] = "closed"
    streams: int = 0  # streams behind the figures (joined and kept)
    errors: int = 0
    audit_failed: int = 0
    unjoined: int = 0
    added_ttft_ms: Percentiles = field(default_factory=Percentiles)
    floor_ms: MedianAndTail | None = None  # the direct path's at this level
    cpu_cores: float | None = None
    rss_mb: float | None = None
    frames_lost: int = 0
    frames_out_of_order: int = 0
    reserialized_streams: int = 0
    client_lag_p99_ms: float = 0.0
    client_cpu: float = 0.0
    histogram: str | None = None  # HDR histogram, base64 (hdrhistogram's encode)
    warnings: tuple[ResultWarning, ...] = ()
    unreliable: bool = False
    streams_total: int | None = None  # started in the measured window (None in files of schema 1)
    kept: int | None = None
    excluded: int | None = None
    exclusion_share: float | None = None
    error_samples: tuple[str, ...] = ()
    # Streams by how they ended (schema 8; wire/ending.py kinds); a cut one is among `errors`, never in the figures.
    ends: Mapping[str, int] = field(default_factory=dict)
    runs_added_ttft_ms: tuple[MedianAndTail, ...] = ()
    added_ttft_corrected_ms: Percentiles | None = None  # open loop: from the scheduled start
    dispatch_lag_ms: Percentiles | None = None
    histogram_corrected: str | None = None
    # --cluster runs: {"uncertainty_ms": worst over runs, "runs": [[per client worker: node, offset, drift, ...]]}
    clock: Json | None = None
    api: str = DEFAULT_API  # the streaming format of every stream (schema 5)
    accept_encoding: str = IDENTITY  # the request's Accept-Encoding ("identity": none sent)
    content_encoding: str = IDENTITY  # what the target answered with ("gzip", or "gzip/identity" when mixed)
    # Each frame after the first content frame: its arrival minus the stub's write (load/framedelay.py); None when
    # no stream's bytes could be mapped to the writes (a path that re-serialises), or in files before schema 5.
    added_frame_delay_ms: Percentiles | None = None
    # The first reasoning or content frame's arrival minus the stub's write of it (StreamLog.first_token); None
    # unless the stub sent reasoning first (else it is added TTFT).
    added_first_token_ms: Percentiles | None = None
    # Over HTTP/2 (schema 6): streams per connection asked for and connections opened (more than the level over
    # the streams asked for when the peer's SETTINGS_MAX_CONCURRENT_STREAMS is lower: `connection_split` says so),
    # flow-control stalls (streams stalled, stalls, stall ms per stream p50/p99) and DATA frames per read.
    http_version: HttpVersion = HttpVersion.HTTP11
    streams_per_connection: int | None = None
    connections: int | None = None
    connection_split: str | None = None
    flow_control_stalls: FlowControlStalls | None = None
    data_frames_per_read: float | None = None
    # Over HTTP/3 (later in 9, no bump): each stream's QUIC handshake, p50/p99 (its connection's; apart from TTFT).
    handshake_ms: MedianAndTail | None = None
    transport: str = "sse"  # how each stream was carried (wire/carrier.py)
    websocket: WebSocketLoad | None = None  # over WebSocket: its upgrades and messages

    @property
    def level_label(self) -> str:
        return f"{self.level:g}/s" if self.open_loop else str(self.level)

    @property
    def open_loop(self) -> bool:
        return self.loop == "open"


@dataclass(frozen=True, slots=True)
class LoadResults:
    provenance: Provenance
    config: Json  # the run's configuration as given (load.runner.LoadConfig)
    targets: Mapping[str, TargetInfo] = field(default_factory=dict)
    skipped: tuple[TargetSkip, ...] = ()
    levels: tuple[LoadRow, ...] = ()
    interrupted: bool = False

    @property
    def kind(self) -> Kind:
        return self.provenance.kind

    @property
    def open_loop(self) -> bool:
        return bool(self.config.get("loop") == "open")

    def to_json(self) -> Json:
        doc = _document(self.provenance)
        doc.update(_json_fields(self, exclude={"provenance"}))
        return doc


Results = MatrixResults | LoadResults


# --- reading: migrations, then the model ----------------------------------------------------------------------


def _v1_to_v2(doc: Json) -> Json:
    """Fields added in 2 take the values a version-1 run implied: no declared headers, no drift recorded."""
    for row in doc.get("rows", []):
        row.setdefault("stub_headers", {})
    return doc


def _v2_to_v3(doc: Json) -> Json:
    """Keys a version-2 writer left out when they did not apply are read with their model defaults; matrix
    exclusion shares, when absent, are computed from the rows by the one rule (exclusion_shares)."""
    if doc.get("kind") in ("matrix", "sweep"):
        doc.setdefault("exclusion_shares", None)
    return doc


def _v3_to_v4(doc: Json) -> Json:
    """A load row's `concurrency` / `rate` pair becomes one `level` and the `loop` it was measured in: a row with a
    rate was open loop (its concurrency null), any other closed."""
    for row in doc.get("levels", []) if doc.get("kind") == "load" else []:
        rate, concurrency = row.pop("rate", None), row.pop("concurrency", None)
        row["level"] = rate if rate is not None else concurrency
        row["loop"] = "open" if rate is not None else "closed"
    return doc


def _v4_to_v5(doc: Json) -> Json:
    """Every matrix condition, row and run before 5 was OpenAI chat, asked with no Accept-Encoding, and read as
    identity (a compressed answer was refused by the probe, never measured). Load rows the same."""
    if doc.get("kind") == "load":
        for level in doc.get("levels") or []:
            level.setdefault("api", DEFAULT_API)
            level.setdefault("accept_encoding", IDENTITY)
            level.setdefault("content_encoding", IDENTITY)
        return doc
    if doc.get("kind") not in ("matrix", "sweep"):
        return doc
    experiment = doc.get("experiment") or {}
    for cond in experiment.get("conditions") or []:
        cond.setdefault("api", DEFAULT_API)
        cond.setdefault("accept_encoding", IDENTITY)
    for row in doc.get("rows") or []:
        row.setdefault("api", DEFAULT_API)
        row.setdefault("accept_encoding", IDENTITY)
        row.setdefault("content_encoding", IDENTITY)
        for run in row.get("raw") or []:
            run.setdefault("content_encoding", IDENTITY)
    return doc


def _v5_to_v6(doc: Json) -> Json:
    """Every client before 6 spoke HTTP/1.1: load rows, matrix conditions, rows and runs say so; the HTTP/2-only
    load figures are null (read with the model's defaults)."""
    if doc.get("kind") == "load":
        for level in doc.get("levels") or []:
            level.setdefault("http_version", HTTP11)
        return doc
    if doc.get("kind") not in ("matrix", "sweep"):
        return doc
    for cond in (doc.get("experiment") or {}).get("conditions") or []:
        cond.setdefault("client_http", HTTP11)
    for row in doc.get("rows") or []:
        row.setdefault("http_version", HTTP11)
        for run in row.get("raw") or []:
            run.setdefault("http_version", HTTP11)
    return doc


def _v6_to_v7(doc: Json) -> Json:
    """Floors and exclusion shares named their condition by its label: each is given the condition, once, of the
    file's own declared conditions or rows that reads the same (the label of every condition there has been is
    unchanged); the overall share's is null. A floor whose label names none of them is of no row: dropped."""
    if doc.get("kind") not in ("matrix", "sweep"):
        return doc
    known: dict[str, Json | None] = {}
    for cond in (doc.get("experiment") or {}).get("conditions") or []:
        value = Condition.from_json(cond)
        known.setdefault(value.label, value.to_json())
    for row in doc.get("rows") or []:
        value = Condition.from_json(row, row=True)
        known.setdefault(value.label, value.to_json())
    known["all"] = None  # the overall share's

    def named(entries: list[Json]) -> list[Json]:
        """Each entry with its condition's value (an entry that already names it by value is kept as it is)."""
        out = []
        for entry in entries:
            label = entry.get("condition")
            if not isinstance(label, str):
                out.append(entry)
            elif label in known:
                out.append({**entry, "condition": known[label], "label": label})
        return out

    doc["floors"] = named(doc.get("floors") or [])
    if doc.get("exclusion_shares"):
        doc["exclusion_shares"] = named(doc["exclusion_shares"])
    return doc


def _v7_to_v8(doc: Json) -> Json:
    """No end was classified before 8: every run's `end` is null and every row's and level's `ends` empty (not
    known: a run of an older file is never taken for a complete stream it was not shown to be)."""
    if doc.get("kind") == "load":
        for level in doc.get("levels") or []:
            level.setdefault("ends", {})
        return doc
    if doc.get("kind") not in ("matrix", "sweep"):
        return doc
    for row in doc.get("rows") or []:
        row.setdefault("ends", {})
        for run in row.get("raw") or []:
            run.setdefault("end", None)
    return doc


def _v8_to_v9(doc: Json) -> Json:
    """No attribution or pairing was stored before 9: both null on every row (not known, never "none")."""
    if doc.get("kind") not in ("matrix", "sweep"):
        return doc
    for row in doc.get("rows") or []:
        row.setdefault("attribution", None)
        row.setdefault("pairing", None)
    return doc


MIGRATIONS: dict[int, Callable[[Json], Json]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
}


def check_version(doc: Json) -> None:
    """The document's schema_version is one this tokenpath reads."""
    version = doc.get("schema_version")
    if isinstance(version, bool) or version not in KNOWN_VERSIONS:  # true == 1 in Python, never a version
        raise UsageError(f"schema_version {version!r} is not one this tokenpath knows ({KNOWN_VERSIONS})")


def migrate(doc: Json) -> Json:
    """An older document brought up to SCHEMA_VERSION, one step at a time (the input is not modified)."""
    check_version(doc)
    doc = json.loads(json.dumps(doc))
    while doc["schema_version"] < SCHEMA_VERSION:
        doc = MIGRATIONS[doc["schema_version"]](doc)
        doc["schema_version"] += 1
    return doc


# The keys of the echoed experiment and load configuration that the report reads (page.py, tables.py).
# Each is checked where the file has it (a test's document may hold only what it is about).
EXPERIMENT_KEYS: dict[str, Any] = {"name": str, "exclusion": Json}
PAGE_EXPERIMENT_KEYS: dict[str, Any] = {"runs": int, "frames": int, "ttft_ms": float}
# ... and the least each may be (results/check.py check_at_least).
PAGE_EXPERIMENT_MINIMUMS = {"runs": 1, "frames": 1, "ttft_ms": 0}
LOAD_CONFIG_MINIMUMS = {"ttft_ms": 0, "interval_ms": 0, "tokens": 1, "warmup_s": 0, "duration_s": 0, "runs": 1,
                        "client_workers": 0, "stub_workers": 1}  # fmt: skip
LOAD_CONFIG_KEYS: dict[str, Any] = {
    "loop": Literal["closed", "open"],
    "ttft_ms": float,
    "interval_ms": float,
    "tokens": int,
    "warmup_s": float,
    "duration_s": float,
    "runs": int,
    "client_workers": int,
    "stub_workers": int,
}


def from_json(doc: Json) -> Results:
    written_at = doc.get("schema_version")
    check_version(doc)  # before anything else is looked at
    check_document(doc)
    doc = migrate(doc)
    provenance = Provenance(
        kind=doc["kind"],
        tool=_build(Tool, doc["tool"], "tool"),
        created=doc["created"],
        host=_build(Host, doc["host"], "host"),
        schema_version=written_at if isinstance(written_at, int) else SCHEMA_VERSION,
    )
    if doc["kind"] == "load":
        return LoadResults(
            provenance=provenance,
            config=doc["config"],
            targets={k: _build(TargetInfo, v, at("targets", k)) for k, v in (doc.get("targets") or {}).items()},
            skipped=tuple(_build(TargetSkip, s, at("skipped", i)) for i, s in enumerate(doc.get("skipped", []))),
            levels=tuple(load_row(r, at("levels", i)) for i, r in enumerate(doc.get("levels", []))),
            interrupted=bool(doc.get("interrupted")),
        )
    cert = doc.get("certification") or {}
    check_fields(Certification, cert, "certification")
    rows = tuple(matrix_row(r, at("rows", i)) for i, r in enumerate(doc.get("rows", [])))
    proxies = doc.get("proxies") or {}
    check(proxies, Mapping[str, ProxyInfo], "proxies")
    points = doc.get("points")
    results = MatrixResults(
        provenance=provenance,
        experiment=doc["experiment"],
        certification=Certification(
            passed=bool(cert.get("passed")),
            forced=bool(cert.get("forced")),
            checks=tuple(_build(Check, c) for c in cert.get("checks", [])),
            emitter_drift_ms={k: _build(Drift, v) for k, v in (cert.get("emitter_drift_ms") or {}).items()},
        ),
        proxies={k: _build(ProxyInfo, v) for k, v in proxies.items()},
        skipped=tuple(_build(PathSkip, s, at("skipped", i)) for i, s in enumerate(doc.get("skipped", []))),
        rows=rows,
        floors=tuple(floor_entry(f, at("floors", i)) for i, f in enumerate(doc.get("floors", []))),
        interrupted=bool(doc.get("interrupted")),
        points=tuple(_build(SweepPoint, p, at("points", i)) for i, p in enumerate(points))
        if points is not None
        else None,
        inferred=_inferred(doc["inferred"]) if doc.get("inferred") else None,
    )
    shares = doc.get("exclusion_shares")
    if shares:
        built = tuple(exclusion_share(s, at("exclusion_shares", i)) for i, s in enumerate(shares))
        return replace(results, exclusion_shares=built)
    return replace(results, exclusion_shares=exclusion_shares(results.rows))  # a file without them: the one rule


def check_document(doc: Json) -> None:
    """Before the migrations walk it: the kind, the provenance and every container they and the model iterate are
    of their JSON type, and so are the echoed keys the report reads (a wrong one is refused with its path)."""
    check(doc.get("kind"), Kind, "kind")
    check(doc.get("tool"), Tool, "tool")
    check(doc.get("host"), Host, "host")
    check(doc.get("created"), str, "created")
    _objects(doc, "skipped", "skipped")
    if doc["kind"] == "load":
        check(doc.get("config"), Json, "config")
        config: Json = doc["config"]
        check_keys(config, LOAD_CONFIG_KEYS, "config", required=False)
        check_at_least(config, LOAD_CONFIG_MINIMUMS, "config")
        check_keys(config, {"rates": tuple[float, ...], "levels": tuple[float, ...]}, "config", required=False)
        check(doc.get("targets"), Mapping[str, Any] | None, "targets")
        _objects(doc, "levels", "levels")
        return
    check(doc.get("experiment"), Json, "experiment")
    experiment: Json = doc["experiment"]
    check_keys(experiment, EXPERIMENT_KEYS, "experiment", required=False)
    check_keys(experiment.get("exclusion") or {}, {"rule": str}, "experiment.exclusion", required=False)
    check_keys(experiment, PAGE_EXPERIMENT_KEYS, "experiment", required=False)
    check_at_least(experiment, PAGE_EXPERIMENT_MINIMUMS, "experiment")
    _objects(experiment, "conditions", "experiment.conditions", nullable=True)
    check(doc.get("certification"), Json | None, "certification")
    check(doc.get("inferred"), Json | None, "inferred")
    for key in ("rows", "floors"):
        _objects(doc, key, key)
    for key in ("exclusion_shares", "points"):
        _objects(doc, key, key, nullable=True)
    for i, row in enumerate(doc.get("rows", [])):
        _objects(row, "raw", at(at("rows", i), "raw"))


def _objects(parent: Json, key: str, path: str, nullable: bool = False) -> None:
    """parent[key], when there, is a list of JSON objects (or null, where null reads as none)."""
    check(parent.get(key, []), list[Json] | None if nullable else list[Json], path)


def matrix_row(row: Json, path: str = "row") -> MatrixRow:
    axes = {a.field for a in AXES}
    check_fields(MatrixRow, row, path, skip={"condition", "attribution", "pairing", "raw"})
    data = {k: v for k, v in row.items() if k not in ("raw", "condition", "attribution", "pairing") and k not in axes}
    built = _build(MatrixRow, {**data, "condition": _condition(row, path, row=True)}, path, skip={"condition"})
    attribution, pairing = row.get("attribution"), row.get("pairing")
    for name, value in (("attribution", attribution), ("pairing", pairing)):
        check(value, Json | None, at(path, name))
    if attribution:
        check_fields(Attribution, attribution, at(path, "attribution"))
    return replace(
        built,
        attribution=Attribution.from_json(attribution) if attribution else None,
        pairing=_build(Paired, pairing, at(path, "pairing")) if pairing else None,
        raw=tuple(matrix_run(r, at(at(path, "raw"), i)) for i, r in enumerate(row.get("raw", []))),
    )


def _condition(data: Json, path: str, row: bool = False) -> Condition:
    """A condition from a row's axis keys (or a condition object): each axis's value checked by its own parser."""
    check(data, Json, path)
    for axis in AXES:
        name = axis.field if row else axis.key
        if name in data:
            if axis.load is None:  # taken as it is: of its default's type at least (a null origin crashed report)
                _same_type(at(path, name), axis.default, data[name])
            _parsed(at(path, name), axis.from_json, data[name])
    return Condition.from_json(data, row=row)


def _same_type(path: str, default: object, value: object) -> None:
    """A value an axis keeps as JSON gives it (a string, a whole number, a boolean), of its default's type."""
    kind = type(default)
    if type(value) is not kind:  # bool is no int here, nor an int a bool
        names = {str: "a string", int: "a whole number", bool: "true or false"}
        shown = json.dumps(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise DocumentError(f"{path}: expected {names.get(kind, kind.__name__)}, got {shown}")


def _parsed(path: str, parse: Callable[[Any], T], value: Any) -> T:
    """What a parser of another module makes of a value, its refusal said at the value's path."""
    try:
        return parse(value)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise DocumentError(f"{path}: {exc}") from None


def floor_entry(floor: Json, path: str = "floor") -> FloorEntry:
    check(floor.get("condition"), Json, at(path, "condition"))
    condition = _condition(floor["condition"], at(path, "condition"))
    return _build(FloorEntry, {**floor, "condition": condition}, path, skip={"condition"})


def exclusion_share(share: Json, path: str = "share") -> ExclusionShare:
    condition = share.get("condition")
    check(condition, Json | None, at(path, "condition"))
    value = _condition(condition, at(path, "condition")) if condition else None
    return _build(ExclusionShare, {**share, "condition": value}, path, skip={"condition"})


# Keys of a run that its reader takes null (or an empty value) as none of.
RUN_NULLABLE = ("frame_delay_ms", "arrivals", "writes_ms")


def matrix_run(run: Json, path: str = "run") -> MatrixRun:
    check_fields(MatrixRun, run, path, required=False, skip={"metrics", "end"}, nullable=RUN_NULLABLE)
    metrics, end = run.get("metrics"), run.get("end")
    check(metrics, Json | None, at(path, "metrics"))
    check(end, Json | None, at(path, "end"))
    if metrics:
        check_fields(RunMetrics, metrics, at(path, "metrics"), required=False)
    return MatrixRun(
        stream_id=run.get("stream_id", ""),
        included=bool(run.get("included")),
        excluded_because=run.get("excluded_because"),
        metrics=_parsed(at(path, "metrics"), RunMetrics.from_json, metrics) if metrics else None,
        path_added_ttft_ms=run.get("path_added_ttft_ms"),
        frame_delay_ms=run.get("frame_delay_ms") or {},
        audit=run.get("audit"),
        arrivals=tuple((float(t), int(n)) for t, n in run.get("arrivals") or ()),
        writes_ms=tuple(run.get("writes_ms") or ()),
        error=run.get("error"),
        audited=run.get("audited", True),
        content_encoding=run.get("content_encoding", IDENTITY),
        http_version=HttpVersion(run.get("http_version", HTTP11)),
        end=_parsed(at(path, "end"), StreamEnd.from_json, end) if end else None,
    )


# Keys of a load level that its reader takes null as none of (or, for added TTFT, as no figure).
LEVEL_NULLABLE = ("added_ttft_ms", "error_samples", "runs_added_ttft_ms")


def load_row(row: Json, path: str = "level") -> LoadRow:
    check_fields(LoadRow, row, path, nullable=LEVEL_NULLABLE)

    def pct(key: str) -> Percentiles | None:
        value = row.get(key)
        return _build(Percentiles, value) if value else None

    floor = row.get("floor_ms")

    data = {k: v for k, v in row.items() if k in {f.name for f in fields(LoadRow)}}
    data.update(
        added_ttft_ms=pct("added_ttft_ms") or Percentiles(),
        floor_ms=_build(MedianAndTail, floor) if floor else None,
        added_ttft_corrected_ms=pct("added_ttft_corrected_ms"),
        dispatch_lag_ms=pct("dispatch_lag_ms"),
        added_frame_delay_ms=pct("added_frame_delay_ms"),
        added_first_token_ms=pct("added_first_token_ms"),
        warnings=tuple(_build(ResultWarning, w) for w in row.get("warnings", [])),
        error_samples=tuple(row.get("error_samples") or ()),
        runs_added_ttft_ms=tuple(_build(MedianAndTail, r) for r in row.get("runs_added_ttft_ms") or ()),
        flow_control_stalls=_build(FlowControlStalls, stalls) if (stalls := row.get("flow_control_stalls")) else None,
        http_version=HttpVersion(row.get("http_version", HTTP11)),
        websocket=_build(WebSocketLoad, ws) if (ws := row.get("websocket")) else None,
        handshake_ms=_build(MedianAndTail, hs) if (hs := row.get("handshake_ms")) else None,
    )
    return LoadRow(**data)


def _inferred(data: Json) -> Inferred:
    built = _build(Inferred, data, "inferred")
    span = data.get("size_range")
    return replace(built, size_range=(int(span[0]), int(span[1])) if span else None)


# --- files ---------------------------------------------------------------------------------------------------


# The largest results.json read: 45 times the largest example experiment's (examples/article.toml, 144 rows x 10
# runs x 40 frames: 5.7 MB). json.loads holds a file in about 6.5 times its size, so one this large already takes
# ~1.7 GB; a larger one (a 5 GB file would take ~30 GB) is refused unread.
MAX_RESULTS_BYTES = 256 * 1024 * 1024


def read(path: Path) -> Results:
    """A results.json (or the directory holding one), migrated to the current model."""
    if path.is_dir():
        path = path / "results.json"
    try:
        doc: Json = json.loads(read_text(path, MAX_RESULTS_BYTES, "results file"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{path} is not a tokenpath results document (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path} is not a tokenpath results document")
    try:
        return from_json(doc)
    except DocumentError as exc:
        raise UsageError(f"{path}: not a tokenpath results document: {exc}") from None
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # a shape no check names
        raise UsageError(f"{path}: not a tokenpath results document ({type(exc).__name__}: {exc})") from None


def dumps(results: Results) -> str:
    """The results document as results.json holds it (and `--json` prints it)."""
    return json.dumps(results.to_json(), indent=1, default=str)


def prepare_out_dir(out_dir: Path) -> None:
    """The output directory made and proved writable before anything starts: a run that cannot save its results
    is refused in one line, not found out after the whole run."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".tokenpath-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"`out` {out_dir}: cannot write results there: {exc.strerror or exc}") from None


def write(results: Results, out_dir: Path) -> Path:
    """results.json, atomically: a reader never sees half a file, even on Ctrl-C."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    write_atomically(path, dumps(results))
    return path


# --- helpers -------------------------------------------------------------------------------------------------


def _document(provenance: Provenance) -> Json:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": provenance.kind,
        "tool": _to_json(provenance.tool),
        "created": provenance.created,
        "host": _to_json(provenance.host),
    }


def _json_fields(obj: Any, exclude: set[str]) -> Json:
    return {f.name: _to_json(getattr(obj, f.name)) for f in fields(obj) if f.name not in exclude}


def _to_json(value: Any) -> Any:
    if hasattr(value, "to_json"):  # a type that owns its JSON shape (e.g. probe.metrics.RunMetrics)
        return value.to_json()
    if hasattr(value, "__dataclass_fields__"):
        return _json_fields(value, exclude=set())
    if isinstance(value, Mapping):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    return value


def _build(cls: type[T], data: Mapping[str, Any], path: str = "", skip: Collection[str] = ()) -> T:
    """A dataclass from a JSON object: unknown keys are ignored (a newer minor field), missing ones take their
    default; a missing key with no default, or a value not of its field's type, is refused with its path."""
    check_fields(cls, data, path or cls.__name__, skip=skip)
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})
