"""The measurement axes: every condition a stream is measured under, each declared once (pyperf's `_metadata.py`
shape: one entry per name with its parser, its check and its default).

An `Axis` says how a declared value is read and checked (the experiment file's [conditions] key, a flag, a monitor
file's key: the message names it), which value leaves it off, what it adds to the condition's label and to a table,
the flag that offers it (cli/options.py makes one option of it for every command that takes it), and what it sets:
a field of the stub's `Pacing` (stub/config.py) or of the probe's `ProbeConfig`. `Condition` is one point of the
grid: a frozen, hashable value that rows, floors and exclusion shares are joined on; its label is for people.

Adding an axis is an `Axis` in AXES, a `Condition` field of the same name (tests/test_axes.py holds the two to each
other), and the code where it acts (a Pacing field the stub honours, a ProbeConfig field the probe uses).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from tokenpath.errors import UsageError
from tokenpath.stub.config import HEAD_AT, MAX_FIRST_EVENT_BYTES, MAX_TOKENS, HeadAt, response_headers
from tokenpath.stub.presets import HTTP10_FRAMINGS, PRESETS, Http10Framing
from tokenpath.stub.replay import load_cached as load_recording
from tokenpath.wire.acceptencoding import BROWSER_ACCEPT_ENCODING, IDENTITY, expand_accept_encoding
from tokenpath.wire.apis import SPECS, Api, parse_api
from tokenpath.wire.carrier import SSE, TRANSPORTS, WEBSOCKET
from tokenpath.wire.httpversion import HttpVersion, parse_matrix_version

if TYPE_CHECKING:
    from tokenpath.wire.h2client import H2Window

T = TypeVar("T")
Link = Literal["loopback", "veth"]
LINKS: tuple[Link, ...] = ("loopback", "veth")
DEFAULT_H2_WINDOW = "default"  # wire/h2client.py DEFAULT_WINDOW as stated: the RFC's 65,535, what many clients keep
MAX_ACCEPT_ENCODING_CHARS = 200  # an Accept-Encoding value in the experiment file; browsers send ~25


@dataclass(frozen=True, slots=True)
class Needs:
    """An axis that means something only where another is on: declared elsewhere it is refused, and held at its
    default (unsaid in the label, unwritten) wherever `holds` does not."""

    field: str  # the Condition field it depends on
    holds: Callable[[Any], bool]  # ... on that field's value
    says: str  # why a file that declares it where it never holds is refused


@dataclass(frozen=True, slots=True)
class ValueNeeds:
    """One value of an axis that can be measured only where another axis holds (HTTP/3: over TLS, on loopback): a
    grid point with it elsewhere is left out, not moved to the default (it would measure another version under the
    label), and declaring it where that one never holds is refused with `says`."""

    value: object  # the axis's value that needs it
    field: str  # the Condition field it depends on (an axis earlier in AXES)
    holds: Callable[[Any], bool]  # ... on that field's value
    says: str


@dataclass(frozen=True, slots=True)
class Excludes:
    """Values of an axis that cannot go with another's (SSE on a WebSocket-only API): those points are left out of
    the grid, and a file in which a declared value of that other axis is left with no point at all is refused."""

    field: str  # the Condition field it is checked against
    excluded: Callable[[Any, Any], bool]  # (this axis's value, that field's value): the pair cannot be measured
    says: str  # why, and what to declare instead


@dataclass(frozen=True, slots=True)
class Column:
    """A table column one axis or more fill (report/tables.py): shown where some row's value is not the default,
    or, with `varies`, only where the rows differ. `answered_by` names the row's figure that answers the axis
    (asked -> answered)."""

    header: str
    varies: bool = False
    answered_by: str | None = None


@dataclass(frozen=True, slots=True)
class Axis(Generic[T]):
    key: str  # the [conditions] key, and the condition's JSON key (experiment echo, floors, shares)
    field: str  # the Condition field, and the results row's key
    parse: Callable[[Any], T]  # a declared value, typed and checked; ValueError (or UsageError) says why not
    default: T  # undeclared: what every condition takes, and the value that says nothing
    label: Callable[[Condition], str]  # its words in the condition's label ("" at its default)
    help: str  # what it is, for a flag's help and the docs
    flag: str | None = None  # the CLI option that offers it (cli/options.py)
    column: Column | None = None  # the table column it fills
    cell: Callable[[Condition], str] | None = None  # its part of that column's cell ("" when nothing to say)
    pacing: str | None = None  # the stub's Pacing field it sets (stub/config.py), through `to_pacing`
    to_pacing: Callable[[Any], object] = lambda v: v
    probe: str | None = None  # the probe's ProbeConfig field it sets, through `to_probe`
    to_probe: Callable[[Any], object] = lambda v: v
    needs: Needs | None = None
    value_needs: tuple[ValueNeeds, ...] = ()  # a value measured only where another axis holds
    excludes: Excludes | None = None
    stub_paced: bool = False  # the stub's pacing: against a real [upstream], which paces its own stream, refused
    declared: bool = True  # a [conditions] key (the endpoint comes from [upstream])
    always: bool = False  # in the condition's JSON and label even at its default
    dump: Callable[[T], object] | None = None  # the value as JSON (default: as it is)
    load: Callable[[Any], T] | None = None  # a JSON value back to the typed one (default: as it is)
    toml: Callable[[T], str] | None = None  # a value as a TOML literal (default: JSON's, which TOML reads)

    def read(self, value: object, where: str) -> T:
        """`value` as this axis takes it, or a UsageError that names `where` (a key or a flag)."""
        try:
            return self.parse(value)
        except (ValueError, UsageError) as exc:
            raise UsageError(f"{where}: {exc}") from None

    def values(self, table: Mapping[str, Any], where: str = "[conditions]") -> list[T]:
        """The declared values of this axis in a [conditions] table (one value or a list), each checked, repeats
        dropped; its default when undeclared."""
        if self.key not in table:
            return [self.default]
        raw = table[self.key]
        raw = raw if isinstance(raw, list) else [raw]
        if not raw:
            raise UsageError(f"{where} {self.key} must not be empty")
        return list(dict.fromkeys(self.read(v, f"{where} {self.key}") for v in raw))

    def applies(self, cond: Condition) -> bool:
        return self.needs is None or self.needs.holds(getattr(cond, self.needs.field))

    def measurable(self, point: Mapping[str, Any]) -> bool:
        """Whether a grid point's value of this axis has what its `value_needs` ask (the other fields: defaults)."""
        value = point.get(self.field, self.default)
        return all(n.holds(point.get(n.field, BY_FIELD[n.field].default)) for n in self.value_needs if n.value == value)

    def from_json(self, value: Any) -> T:
        return self.load(value) if self.load is not None else value

    def to_json(self, value: T) -> object:
        return self.dump(value) if self.dump is not None else value

    def to_toml(self, value: T) -> str:
        return self.toml(value) if self.toml is not None else json.dumps(self.to_json(value))


# --- parsers: a declared value, typed and checked ----------------------------------------------------------------


def _not_allowed(value: object) -> ValueError:
    return ValueError(f"{value!r} is not allowed")


def number_parser(ok: Callable[[float], bool]) -> Callable[[object], float]:
    """A parser of a finite number that `ok` accepts (never a bool): the axes' numbers, and the experiment file's."""

    def parse(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not ok(value):
            raise _not_allowed(value)
        return float(value)

    return parse


def _whole(low: int, high: int) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _not_allowed(value)
        return value

    return parse


def _choice(choices: tuple[str, ...]) -> Callable[[object], Any]:
    def parse(value: object) -> Any:
        if value not in choices:
            raise _not_allowed(value)
        return value

    return parse


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _not_allowed(value)
    return value


def _headers(value: object) -> tuple[tuple[str, str], ...]:
    """One set of response headers the stub adds, checked with the stub's own rule."""
    if not isinstance(value, dict):
        raise _not_allowed(value)
    return tuple(response_headers(value).items())


def _api(value: object) -> Api:
    if not isinstance(value, str):
        raise _not_allowed(value)
    return parse_api(value)


def _accept_encoding(value: object) -> str:
    """The header as sent ("browser": the browsers' own value, "identity": no header at all)."""
    if not isinstance(value, str):
        raise _not_allowed(value)
    if not value.strip() or len(value) > MAX_ACCEPT_ENCODING_CHARS or not value.isprintable():
        raise ValueError(
            f"{value!r} is not a header value (printable, 1 to {MAX_ACCEPT_ENCODING_CHARS} characters; "
            '"identity" sends none, "browser" what browsers send)'
        )
    text = value.strip()
    return IDENTITY if text.lower() == IDENTITY else expand_accept_encoding(text)


def _transport(value: object) -> str:
    if value not in TRANSPORTS:
        raise ValueError(f"{value!r}: choose {' or '.join(TRANSPORTS)}")
    return str(value)


def _h2_window(value: object) -> str:
    """The windows as stated ("default", "browser", BYTES, STREAM:CONNECTION), checked and in their one spelling."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _not_allowed(value)
    return str(_windows(str(value)))


def _windows(stated: str) -> H2Window:
    """wire/h2client.py's windows, imported when one is read: the h2 library is no cost to a command without it."""
    from tokenpath.wire.h2client import parse_h2_window

    return parse_h2_window(stated)


STUB = "stub"  # the origin every condition has had: the stub, paced as the other axes say
PRESET_PREFIX = "stub:"  # the stub answering as a real origin does besides pacing (stub/presets.py)
REPLAY_PREFIX = "replay:"  # the stub replaying a recorded shape (stub/replay.py)


def _origin(value: object) -> str:
    """Who answers: the stub, `stub:PRESET` or `replay:FILE` (read and checked now; kept as an absolute path). A real
    origin is an `[upstream]` of its own (`kind`): it paces its own stream, no audit."""
    if not isinstance(value, str):
        raise _not_allowed(value)
    if value == STUB:
        return value
    if value.startswith(PRESET_PREFIX) and value.removeprefix(PRESET_PREFIX) in PRESETS:
        return value
    if value.startswith(REPLAY_PREFIX) and value.removeprefix(REPLAY_PREFIX):
        path = Path(value.removeprefix(REPLAY_PREFIX)).resolve()
        load_recording(str(path))  # a UsageError that names the file and what is wrong with it
        return REPLAY_PREFIX + str(path)
    presets = ", ".join(PRESET_PREFIX + p for p in PRESETS)
    raise ValueError(
        f"{value!r}: expected {STUB}, a stub preset ({presets}) or {REPLAY_PREFIX}FILE (a recording of "
        "`tokenpath record`)"
    )


def origin_words(origin: str) -> str:
    """The origin in a label or a cell: "stub as llama-server", "replay llama-server.chat", "llama-server"."""
    if origin.startswith(PRESET_PREFIX):
        return "stub as " + origin.removeprefix(PRESET_PREFIX)
    if origin.startswith(REPLAY_PREFIX):
        return "replay " + load_recording(origin.removeprefix(REPLAY_PREFIX)).name
    return origin


def replay_file(cond: Condition) -> str | None:
    """The recording a condition's streams replay (the matrix's stub holds it), or None."""
    return cond.origin.removeprefix(REPLAY_PREFIX) if cond.origin.startswith(REPLAY_PREFIX) else None


def origin_member(cond: Condition) -> dict[str, object]:
    """What the stub's `tokenpath` member says of the origin for `cond` (stub/app.py reads it): a preset's HTTP/1.0
    framing and headers (the condition's stub_headers on top), the condition's own framing, or a replay's name."""
    replay = replay_file(cond)
    if replay is not None:  # the recording's own head, the condition's declared headers on top
        return {
            "replay": load_recording(replay).name,
            **({"headers": dict(cond.stub_headers)} if cond.stub_headers else {}),
        }
    behaviour = PRESETS[cond.origin.removeprefix(PRESET_PREFIX)] if cond.origin.startswith(PRESET_PREFIX) else None
    framing = behaviour.http10_framing if behaviour is not None else cond.http10_framing
    declared = {k.lower() for k, _ in cond.stub_headers}
    headers = [(k, v) for k, v in (behaviour.headers if behaviour else ()) if k.lower() not in declared]
    headers += cond.stub_headers
    return {
        **({"http10_framing": framing} if framing != "close" else {}),
        **({"headers": dict(headers)} if headers else {}),
    }


def _http10_framing(value: object) -> Http10Framing:
    if value not in HTTP10_FRAMINGS:
        raise _not_allowed(value)
    return "chunked" if value == "chunked" else "close"


def _inline_table(headers: tuple[tuple[str, str], ...]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in headers) + "}"


HTTP_COLUMN = Column("HTTP (client)")
PRE_TOKEN_COLUMN = Column("pre-token (stub sent before the first token)")
PAUSE_COLUMN = Column("pause (stub silent mid-stream)")
ORIGIN_COLUMN = Column("origin (what it does a path acts on)")


# --- the registry, in the order the condition's label reads ------------------------------------------------------

ENDPOINT: Axis[str] = Axis(
    key="endpoint",
    field="endpoint",
    parse=str,
    default="",
    label=lambda c: c.endpoint,
    help="A real endpoint's label (experiment/endpoint.py): it paces the stream, not the stub.",
    declared=False,
)
FRAME_BYTES: Axis[int] = Axis(
    key="frame_bytes",
    field="frame_bytes",
    parse=_whole(8, sys.maxsize),
    default=60,
    label=lambda c: "" if c.endpoint else (f"{c.frame_bytes} B" if c.frame_bytes else "unpadded"),
    help="Pad every OpenAI frame (other APIs: each token's frame) to exactly this many bytes.",
    flag="--frame-bytes",
    pacing="frame_bytes",
    to_pacing=lambda v: v or None,  # 0: the format's own frames
    stub_paced=True,
    always=True,
)
INTERVAL_MS: Axis[float] = Axis(
    key="interval_ms",
    field="interval_ms",
    parse=number_parser(lambda v: v > 0),
    default=50.0,
    label=lambda c: "" if c.endpoint else f" @ {c.interval_ms:g} ms",
    help="The stub's time between tokens (ms).",
    flag="--interval-ms",
    pacing="interval_ms",
    stub_paced=True,
    always=True,
    load=float,
)
LINK: Axis[Link] = Axis(
    key="link",
    field="link",
    parse=_choice(LINKS),
    default="loopback",
    label=lambda c: f", {c.link}",
    help="loopback, or veth: two network namespaces joined at MTU 1500 (links/netns.py).",
    always=True,
)
TLS: Axis[bool] = Axis(
    key="tls",
    field="tls",
    parse=_bool,
    default=False,
    label=lambda c: ", tls" if c.tls else "",
    help="Every path terminates TLS, with a certificate made for the run.",
    always=True,
)
API: Axis[Api] = Axis(
    key="api",
    field="api",
    parse=_api,
    default=Api.OPENAI,
    label=lambda c: f", {c.api}" if c.api != Api.OPENAI else "",
    help=f"Streaming API format: {', '.join(Api)}. A base URL gets the format's route; its first content frame "
    "is TTFT.",
    flag="--api",
    column=Column("api", varies=True),
    cell=lambda c: c.api,
    probe="api",
    stub_paced=True,
    always=True,
    load=Api,
)
HTTP_VERSION: Axis[HttpVersion] = Axis(
    key="client_http",  # the experiment file's name for it; `http_version` everywhere else
    field="http_version",
    parse=parse_matrix_version,  # "3" too: the matrix's rows over HTTP/3 run through the probe's h3 client
    default=HttpVersion.HTTP11,
    label=lambda c: f", {c.http_version.label}" if c.http_version != HttpVersion.HTTP11 else "",
    help="Speak HTTP/2: ALPN h2 over TLS, h2c with prior knowledge in clear text; never a fallback to HTTP/1.1 (a "
    "server that does not agree fails the stream, exit 18). Reports DATA frames and flow-control stalls.",
    flag="--http2",
    column=HTTP_COLUMN,
    cell=lambda c: c.http_version.value,
    probe="http_version",
    value_needs=(
        ValueNeeds(
            HttpVersion.HTTP3,
            "tls",
            holds=bool,
            says='client_http = ["3"] needs tls = [true]: HTTP/3 is QUIC, TLS only; no clear-text path speaks it',
        ),
        ValueNeeds(
            HttpVersion.HTTP3,
            "link",
            holds=lambda v: v == "loopback",
            says='client_http = ["3"] needs link = ["loopback"]: the h3 client opens its own UDP socket on the host, '
            "which no veth namespace carries yet",
        ),
    ),
    always=True,
    load=HttpVersion,
)
H2_WINDOW: Axis[str] = Axis(
    key="h2_window",
    field="h2_window",
    parse=_h2_window,
    default=DEFAULT_H2_WINDOW,
    label=lambda c: f" (window {c.h2_window})" if c.h2_window != DEFAULT_H2_WINDOW else "",
    help="With --http2: the client's receive windows: BYTES (stream; the connection the same, >= 65535), "
    "STREAM:CONNECTION, `default` (65535) or `browser` (Chromium's 6 MiB / 15 MiB).",
    flag="--h2-window",
    column=HTTP_COLUMN,
    cell=lambda c: f"(window {c.h2_window})" if c.h2_window != DEFAULT_H2_WINDOW else "",
    probe="h2_window",
    to_probe=_windows,
    needs=Needs(
        field="http_version",
        holds=lambda v: v == HttpVersion.HTTP2,
        says='the client\'s HTTP/2 windows need client_http = ["2"] (or both)',
    ),
)
TRANSPORT: Axis[str] = Axis(
    key="transport",
    field="transport",
    parse=_transport,
    default=SSE,
    label=lambda c: f", {c.transport}" if c.transport != SSE else "",
    help="How the stream is carried: `sse` (the format's HTTP response) or `websocket` (its WebSocket mode: OpenAI "
    "Responses' GET /v1/responses with Upgrade: websocket, one event per message). Reports the upgrade's status "
    "and time, messages per read and the close; a path that does not carry the upgrade is reported, not an error.",
    flag="--transport",
    column=Column("transport"),
    cell=lambda c: c.transport,
    probe="transport",
    needs=Needs(
        field="api",
        holds=lambda v: SPECS[v].websocket,
        says='transport = "websocket" needs an API with a WebSocket mode: api = ["responses"] (or both)',
    ),
    value_needs=(  # the probe's WebSocket is an HTTP/1.1 upgrade; over QUIC it would be RFC 9220, not spoken
        ValueNeeds(
            WEBSOCKET,
            "http_version",
            holds=lambda v: v != HttpVersion.HTTP3,
            says='transport = "websocket" is an HTTP/1.1 upgrade: it needs client_http "1.1" or "2" beside "3"',
        ),
    ),
    excludes=Excludes(
        field="api",
        excluded=lambda transport, api: transport != WEBSOCKET and SPECS[api].websocket_only,
        says=f"a WebSocket-only API ({', '.join(a.value for a, s in SPECS.items() if s.websocket_only)}) has no SSE "
        'stream: declare transport = ["websocket"] with it',
    ),
)


def transport_for(api: Api) -> str:
    """The transport a client takes when none is named: a WebSocket-only API's is WebSocket, every other's SSE."""
    return WEBSOCKET if SPECS[api].websocket_only else TRANSPORT.default


ACCEPT_ENCODING: Axis[str] = Axis(
    key="accept_encoding",
    field="accept_encoding",
    parse=_accept_encoding,
    default=IDENTITY,
    label=lambda c: f", Accept-Encoding: {c.accept_encoding}" if c.accept_encoding != IDENTITY else "",
    help='Accept-Encoding to send (any value; `browser` = "gzip, deflate, br, zstd"; default: none). The answer '
    "is decoded; frames and arrivals are counted in the decoded stream.",
    flag="--accept-encoding",
    column=Column("encoding (asked -> answered)", answered_by="content_encoding"),
    cell=lambda c: "browser" if c.accept_encoding == BROWSER_ACCEPT_ENCODING else c.accept_encoding,
    probe="accept_encoding",
    to_probe=lambda v: None if v == IDENTITY else v,
    stub_paced=True,
    always=True,
)
ORIGIN: Axis[str] = Axis(
    key="origin",
    field="origin",
    parse=_origin,
    default=STUB,
    label=lambda c: "" if c.origin == STUB else f", {origin_words(c.origin)}",
    help="Who answers: stub, stub:PRESET (the stub framing and heading its answer as that real origin does: "
    "llama-server, llama-cpp-python) or replay:FILE (a recorded shape, `tokenpath record`, audited).",
    column=ORIGIN_COLUMN,
    cell=lambda c: "" if c.origin == STUB else origin_words(c.origin),
    stub_paced=True,
)
HTTP10_FRAMING: Axis[Http10Framing] = Axis(
    key="http10_framing",
    field="http10_framing",
    parse=_http10_framing,
    default="close",
    label=lambda c: ", HTTP/1.0 chunked" if c.http10_framing == "chunked" else "",
    help="The stub's answer to an HTTP/1.0 request (what stock nginx sends upstream): close-delimited, or chunked "
    "as llama.cpp's server answers.",
    column=ORIGIN_COLUMN,
    cell=lambda c: "HTTP/1.0 chunked" if c.http10_framing == "chunked" else "",
    needs=Needs(field="origin", holds=lambda v: v == STUB, says="http10_framing is the plain stub's (origin stub)"),
    stub_paced=True,
)
STUB_HEADERS: Axis[tuple[tuple[str, str], ...]] = Axis(
    key="stub_headers",
    field="stub_headers",
    parse=_headers,
    default=(),
    label=lambda c: ", stub sends " + "; ".join(f"{k}: {v}" for k, v in c.stub_headers) if c.stub_headers else "",
    help="Response headers the stub adds (the `tokenpath` member's `headers`): does header X fix proxy Y.",
    column=ORIGIN_COLUMN,
    cell=lambda c: "; ".join(f"{k}: {v}" for k, v in c.stub_headers),
    stub_paced=True,
    always=True,
    dump=dict,
    load=lambda d: tuple(dict(d or {}).items()),
    toml=_inline_table,
)
HEARTBEAT_MS: Axis[float] = Axis(
    key="heartbeat_ms",
    field="heartbeat_ms",
    parse=number_parser(lambda v: v >= 0),
    default=0.0,
    label=lambda c: f", heartbeat {c.heartbeat_ms:g} ms" if c.heartbeat_ms else "",
    help=(
        "The stub's keep-alive every N ms, from the start to the last frame, in its format's shape: an SSE `: ping` "
        "comment (OpenAI chat, Responses, Gemini), Anthropic's `event: ping`; Bedrock's event stream and Ollama's "
        "NDJSON have none (refused) \\[default: off]."
    ),
    flag="--heartbeat-ms",
    column=PRE_TOKEN_COLUMN,
    cell=lambda c: f"hb {c.heartbeat_ms:g}ms" if c.heartbeat_ms else "",
    pacing="heartbeat_ms",
    stub_paced=True,
    load=float,
)
REASONING_TOKENS: Axis[int] = Axis(
    key="reasoning_tokens",
    field="reasoning_tokens",
    parse=_whole(0, MAX_TOKENS),
    default=0,
    label=lambda c: f", {c.reasoning_tokens} reasoning tokens" if c.reasoning_tokens else "",
    help="The stub's reasoning deltas before the content, in each API's own shape, paced like tokens (adds a "
    "first-token figure) \\[default: 0].",
    flag="--reasoning-tokens",
    column=PRE_TOKEN_COLUMN,
    cell=lambda c: f"r{c.reasoning_tokens}" if c.reasoning_tokens else "",
    pacing="reasoning_tokens",
    stub_paced=True,
)
FIRST_EVENT_BYTES: Axis[int] = Axis(
    key="first_event_bytes",
    field="first_event_bytes",
    parse=_whole(0, MAX_FIRST_EVENT_BYTES),
    default=0,
    label=lambda c: f", first event {c.first_event_bytes} B" if c.first_event_bytes else "",
    help="The stub pads the first content frame to exactly N bytes (a large first event) \\[default: off].",
    flag="--first-event-bytes",
    column=PRE_TOKEN_COLUMN,
    cell=lambda c: f"fe {c.first_event_bytes}B" if c.first_event_bytes else "",
    pacing="first_event_bytes",
    to_pacing=lambda v: v or None,
    stub_paced=True,
)
HEAD_AT_AXIS: Axis[HeadAt] = Axis(
    key="head_at",
    field="head_at",
    parse=_choice(HEAD_AT),
    default="start",
    label=lambda c: ", head at first token" if c.head_at != "start" else "",
    help="When the stub's response head leaves: start (at once) or first-token (held until it) \\[default: start].",
    flag="--head-at",
    column=PRE_TOKEN_COLUMN,
    cell=lambda c: "head@token" if c.head_at != "start" else "",
    pacing="head_at",
    stub_paced=True,
)
PAUSE_MS: Axis[float] = Axis(
    key="pause_ms",
    field="pause_ms",
    parse=number_parser(lambda v: v >= 0),
    default=0.0,
    label=lambda c: f", pause {c.pause_ms:g} ms" if c.pause_ms else "",
    help="The stub falls silent for N ms mid-stream, after --pause-after's token: every later frame is that much "
    "later, keep-alives go on \\[default: 0, none].",
    flag="--pause-ms",
    column=PAUSE_COLUMN,
    cell=lambda c: f"{c.pause_ms:g}ms" if c.pause_ms else "",
    pacing="pause_ms",
    stub_paced=True,
    load=float,
)
PAUSE_AFTER: Axis[int] = Axis(
    key="pause_after",
    field="pause_after",
    parse=_whole(1, MAX_TOKENS),
    default=1,
    label=lambda c: f" after token {c.pause_after}",
    help="With --pause-ms: the content token the silence follows (1: the first; past the last: before the stream's "
    "end) \\[default: 1].",
    flag="--pause-after",
    column=PAUSE_COLUMN,
    cell=lambda c: f"after {c.pause_after}",
    pacing="pause_after",
    needs=Needs(field="pause_ms", holds=bool, says="where a pause falls needs pause_ms > 0"),
    stub_paced=True,
)

AXES: tuple[Axis[Any], ...] = (
    *(ENDPOINT, FRAME_BYTES, INTERVAL_MS, LINK, TLS, API, HTTP_VERSION, H2_WINDOW, TRANSPORT, ACCEPT_ENCODING),
    *(ORIGIN, HTTP10_FRAMING, STUB_HEADERS, HEARTBEAT_MS, REASONING_TOKENS, FIRST_EVENT_BYTES, HEAD_AT_AXIS),
    *(PAUSE_MS, PAUSE_AFTER),
)
BY_KEY: dict[str, Axis[Any]] = {a.key: a for a in AXES}
BY_FIELD: dict[str, Axis[Any]] = {a.field: a for a in AXES}
KEYS = tuple(a.key for a in AXES if a.declared)  # what a [conditions] table may hold


# --- one condition ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    """One point of the grid: every axis's value (AXES' defaults). Frozen and hashable: what rows, floors and
    exclusion shares are joined on. An axis that `needs` another is at its default wherever that one does not hold,
    so two conditions that measure the same are equal."""

    interval_ms: float
    frame_bytes: int  # 0: the format's own, unpadded frames
    link: Link
    tls: bool
    _: KW_ONLY
    stub_headers: tuple[tuple[str, str], ...] = STUB_HEADERS.default
    endpoint: str = ENDPOINT.default
    api: Api = API.default
    accept_encoding: str = ACCEPT_ENCODING.default  # "identity": no Accept-Encoding header
    heartbeat_ms: float = HEARTBEAT_MS.default
    reasoning_tokens: int = REASONING_TOKENS.default
    first_event_bytes: int = FIRST_EVENT_BYTES.default
    head_at: HeadAt = HEAD_AT_AXIS.default
    http_version: HttpVersion = HTTP_VERSION.default
    h2_window: str = H2_WINDOW.default
    transport: str = TRANSPORT.default
    pause_ms: float = PAUSE_MS.default
    pause_after: int = PAUSE_AFTER.default
    origin: str = ORIGIN.default
    http10_framing: Http10Framing = HTTP10_FRAMING.default

    def __post_init__(self) -> None:
        for axis in AXES:  # an axis that does not apply here (a window over HTTP/1.1) is at its default: one value
            if not axis.applies(self) and getattr(self, axis.field) != axis.default:
                object.__setattr__(self, axis.field, axis.default)

    @property
    def label(self) -> str:
        """In words, each axis as AXES says it: the same string for every condition there has been."""
        return "".join(a.label(self) for a in AXES if a.applies(self))

    @property
    def compressed(self) -> bool:
        """Whether the client asks for a Content-Encoding: the compression controls are certified first."""
        return self.accept_encoding != IDENTITY

    def to_json(self, *, row: bool = False) -> dict[str, object]:
        """The condition as the experiment's `conditions` list has written it (an axis at its default only where
        it always was); with `row`, a results row's keys: every axis, by field name."""
        if row:
            return {a.field: a.to_json(getattr(self, a.field)) for a in AXES}
        return {
            a.key: a.to_json(getattr(self, a.field))
            for a in AXES
            if (a.always or getattr(self, a.field) != a.default or a.needs is not None) and a.applies(self)
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, row: bool = False) -> Condition:
        """Back from either shape; an axis a file does not name is at its default."""
        values = {}
        for axis in AXES:
            name = axis.field if row else axis.key
            if name in doc:
                values[axis.field] = axis.from_json(doc[name])
        return replace(DEFAULT_CONDITION, **values)

    def pacing_settings(self) -> dict[str, Any]:
        """The stub's Pacing fields this condition sets (experiment/spec.py adds the frame format and the stream)."""
        return {a.pacing: a.to_pacing(getattr(self, a.field)) for a in AXES if a.pacing is not None}

    def probe_settings(self) -> dict[str, Any]:
        """The probe's ProbeConfig fields this condition sets."""
        return {a.probe: a.to_probe(getattr(self, a.field)) for a in AXES if a.probe is not None}


DEFAULT_CONDITION = Condition(INTERVAL_MS.default, FRAME_BYTES.default, LINK.default, TLS.default)


def grid(table: Mapping[str, Any], axes: Iterable[Axis[Any]], where: str = "[conditions]") -> list[Condition]:
    """Every combination of the declared values of `axes` in `table` (in that order, the first varying slowest;
    every other axis at its default); an axis that `needs` another is varied only where that one holds, else at its
    default, and declaring it where that one never holds is refused."""
    axes = list(axes)
    for axis in axes:
        if axis.needs is not None and axis.key in table:
            dependency = BY_FIELD[axis.needs.field]
            if not any(axis.needs.holds(v) for v in dependency.values(table, where)):
                raise UsageError(f"{where} {axis.key}: {axis.needs.says}")
        declared = axis.values(table, where) if axis.value_needs and axis.key in table else []
        for value_needs in axis.value_needs:
            dependency = BY_FIELD[value_needs.field]
            if value_needs.value in declared and not any(value_needs.holds(v) for v in dependency.values(table)):
                raise UsageError(f"{where} {axis.key}: {value_needs.says}")
    points: list[dict[str, Any]] = [{}]
    for axis in axes:
        values = axis.values(table, where)
        out = []
        for point in points:
            needs = axis.needs
            if needs is not None and not needs.holds(point.get(needs.field, BY_FIELD[needs.field].default)):
                out.append({**point, axis.field: axis.default})
                continue
            out += [p for v in values if axis.measurable(p := {**point, axis.field: v})]
        points = out
    for axis in axes:
        points = _without_excluded(points, axis, where)
    return [replace(DEFAULT_CONDITION, **p) for p in points]


def _without_excluded(points: list[dict[str, Any]], axis: Axis[Any], where: str) -> list[dict[str, Any]]:
    """The points `axis.excludes` allows; refused when a value of the other axis is left with none."""
    rule = axis.excludes
    if rule is None:
        return points
    other = BY_FIELD[rule.field].default

    def excluded(point: dict[str, Any]) -> bool:
        return rule.excluded(point.get(axis.field, axis.default), point.get(rule.field, other))

    kept = [p for p in points if not excluded(p)]
    if {p.get(rule.field, other) for p in points} - {p.get(rule.field, other) for p in kept}:
        raise UsageError(f"{where} {axis.key}: {rule.says}")
    return kept
