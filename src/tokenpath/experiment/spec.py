"""The experiment file (TOML). Everything that decides the result is declared here before the run starts:
paths, conditions, runs, and the exclusion rule. Loading validates it all and says what is wrong where."""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tokenpath.audit import AuditVerdict, StreamLog, audit_stream
from tokenpath.clock import NS_PER_MS
from tokenpath.errors import UsageError
from tokenpath.experiment import endpoint as endpoints
from tokenpath.experiment.endpoint import EndpointSpec
from tokenpath.hostport import parse_hostport
from tokenpath.probe.client import expand_accept_encoding
from tokenpath.proxies import ProxyError, lookup
from tokenpath.proxies.attached import AttachedProxy
from tokenpath.proxies.base import Endpoint, Proxy
from tokenpath.proxies.custom import CustomProxy, RequestOptions
from tokenpath.results.model import DEFAULT_H2_WINDOW, HTTP11, condition_label
from tokenpath.stub.config import HEAD_AT, MAX_FIRST_EVENT_BYTES, MAX_TOKENS, HeadAt, StubConfig, response_headers
from tokenpath.stub.formats import check_frame_bytes, check_start
from tokenpath.wire.apis import Api, parse_api
from tokenpath.wire.h2client import parse_h2_window

Link = Literal["loopback", "veth"]
LINKS: tuple[Link, ...] = ("loopback", "veth")
HTTP2 = "2"
CLIENT_HTTP = (HTTP11, HTTP2)  # the values of [conditions] client_http
IDENTITY = "identity"  # the accept_encoding condition that sends no Accept-Encoding header, as curl does
MAX_ACCEPT_ENCODING_CHARS = 200  # an Accept-Encoding value in the experiment file; browsers send ~25
STUB_MODEL = "tokenpath-stub"  # what the matrix asks the stub for (its token frames' size depends on it)
# The [conditions] axes of what comes before the first token, and the value that turns each off.
BEFORE_FIRST_TOKEN_OFF: dict[str, Any] = {"heartbeat_ms": 0.0, "reasoning_tokens": 0, "first_event_bytes": 0,
                                          "head_at": "start"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Condition:
    interval_ms: float
    frame_bytes: int
    link: Link
    tls: bool
    stub_headers: tuple[tuple[str, str], ...] = ()  # response headers the stub adds: "does header X fix proxy Y"
    endpoint: str = ""  # a real endpoint's label (experiment/endpoint.py): it paces the stream, not the stub
    api: str = Api.OPENAI.value  # the streaming format (wire/apis.py): its route on the stub and through each path
    # The request's Accept-Encoding ("identity": no header). frame_bytes 0 = the format's own, unpadded frames.
    accept_encoding: str = IDENTITY
    # What the stub sends before and around the first token (issue 24 §4; stub/config.py Pacing), each off by default.
    heartbeat_ms: float = 0.0  # `: ping` comments every N ms (0: none)
    reasoning_tokens: int = 0  # reasoning deltas before the content (OpenAI: chunks, never `format` plain)
    first_event_bytes: int = 0  # the first content frame padded to N bytes (0: not)
    head_at: HeadAt = "start"  # "first-token": the head withheld until the first token
    client_http: str = HTTP11  # the client's HTTP version: "1.1", or "2" (h2 over TLS by ALPN, h2c by prior knowledge)
    h2_window: str = DEFAULT_H2_WINDOW  # over HTTP/2: the client's receive windows (wire/h2client.parse_h2_window)

    @property
    def label(self) -> str:
        return condition_label(self)

    @property
    def http_version(self) -> str:
        """The name rows and runs give it (and condition_label reads)."""
        return self.client_http

    @property
    def http2(self) -> bool:
        return self.client_http == HTTP2

    @property
    def compressed(self) -> bool:
        """Whether the client asks for a Content-Encoding: the compression controls are certified first."""
        return self.accept_encoding != IDENTITY

    def to_json(self) -> dict[str, Any]:
        out = {
            "interval_ms": self.interval_ms, "frame_bytes": self.frame_bytes, "link": self.link, "tls": self.tls,
            "stub_headers": dict(self.stub_headers), "api": self.api, "accept_encoding": self.accept_encoding,
        }  # fmt: skip
        # Only when set: a condition without them reads as every file before them did.
        out.update((k, getattr(self, k)) for k, off in BEFORE_FIRST_TOKEN_OFF.items() if getattr(self, k) != off)
        out["client_http"] = self.client_http
        if self.http2:
            out["h2_window"] = self.h2_window
        return {**out, "endpoint": self.endpoint} if self.endpoint else out


@dataclass(frozen=True, slots=True)
class PathSpec:
    """One row family: a proxy and one of its variants (or the direct path)."""

    proxy: str  # catalogue name, a custom name, or "direct"
    variant: str = "stock"

    @property
    def label(self) -> str:
        return self.proxy if self.variant == "stock" else f"{self.proxy} ({self.variant})"


@dataclass(frozen=True, slots=True)
class ExclusionRule:
    """A run is excluded when the stub's audit of its stream fails: any write later than the tolerance."""

    tolerance_ms: float | None = None  # None: max(2 ms, 20 % of the interval)

    def describe(self) -> str:
        rule = "max(2 ms, 20 % of the interval)" if self.tolerance_ms is None else f"{self.tolerance_ms:g} ms"
        return (
            f"a run is excluded when any stub write of its stream was later than {rule} after its schedule; "
            "excluded runs are counted, never re-run"
        )

    def to_json(self) -> dict[str, Any]:
        return {"tolerance_ms": self.tolerance_ms, "rule": self.describe()}

    def judge(self, log: StreamLog) -> AuditVerdict:
        """This rule's verdict on one stream, from the write log the stub returned: the stub's own verdict uses its
        default tolerance, so a declared one is applied here, to the same timestamps."""
        tolerance = None if self.tolerance_ms is None else round(self.tolerance_ms * NS_PER_MS)
        return audit_stream(log, tolerance)


@dataclass(slots=True)
class Experiment:
    name: str
    paths: list[PathSpec]
    conditions: list[Condition]
    frames: int = 40
    runs: int = 10
    ttft_ms: float = 20.0
    exclusion: ExclusionRule = field(default_factory=ExclusionRule)
    custom: dict[str, Proxy] = field(default_factory=dict)
    source: str = ""
    endpoint: EndpointSpec | None = None  # every proxy fronts this real endpoint instead of the stub
    stub_listen: Endpoint | None = None  # where the stub listens on loopback conditions, for attached paths

    def proxy(self, name: str) -> Proxy:
        return self.custom[name] if name in self.custom else lookup(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "frames": self.frames,
            "runs": self.runs,
            "ttft_ms": self.ttft_ms,
            "paths": [{"proxy": p.proxy, "variant": p.variant} for p in self.paths],
            "conditions": [c.to_json() for c in self.conditions],
            "exclusion": self.exclusion.to_json(),
            "custom_proxies": {n: p.command for n, p in self.custom.items() if isinstance(p, CustomProxy)},
            "attached_paths": {n: p.url for n, p in self.custom.items() if isinstance(p, AttachedProxy)},
            "stub_listen": self.stub_listen.hostport if self.stub_listen else None,
            "source": self.source,
            **({"upstream": self.endpoint.to_json()} if self.endpoint else {}),
        }


def load(path: str | Path) -> Experiment:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read experiment file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    try:
        experiment = parse(data)
    except (UsageError, ProxyError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    experiment.source = text
    return experiment


def _cacert(value: object, where: str) -> str | None:
    """An attached https path's CA bundle (PEM), as [upstream] takes one: $VARS expanded, checked it exists."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise UsageError(f'{where}: cacert must be a file name, e.g. cacert = "ingress-ca.pem"')
    path = Path(endpoints.expand(value, f"{where} cacert")).resolve()
    if not path.is_file():
        raise UsageError(f"{where}: cacert {path}: no such file")
    return str(path)


def parse(data: dict[str, Any]) -> Experiment:
    known = {"name", "frames", "runs", "ttft_ms", "conditions", "proxy", "exclusion", "upstream", "stub"}
    _no_unknown(data, known, "top level")
    custom: dict[str, Proxy] = {}
    paths = [PathSpec("direct")]
    for i, entry in enumerate(data.get("proxy", [])):
        where = f"[[proxy]] #{i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise UsageError(f'{where}: needs name = "..."')
        request_keys = {"model", "headers", "api_key_env", "base_path"}
        keys = {"name", "variants", "versions", "command", "version_command", "url", "version", "cacert",
                *request_keys}  # fmt: skip
        _no_unknown(entry, keys, where)
        name = entry["name"]
        if "cacert" in entry and "url" not in entry:
            raise UsageError(f"{where}: cacert goes with an https `url` (a path already running)")
        if "url" in entry:  # a path already running (a Compose service, another host): measured, never started
            if "command" in entry or "variants" in entry:
                raise UsageError(f"{where}: a path with `url` is already running: no command or variants")
            options = RequestOptions.parse(name, {k: v for k, v in entry.items() if k in request_keys})
            cacert = _cacert(entry.get("cacert"), where)
            custom[name] = AttachedProxy(name, str(entry["url"]), str(entry.get("version", "")), options, cacert)
            proxy = custom[name]
        elif "command" in entry:
            options = RequestOptions.parse(name, {k: v for k, v in entry.items() if k in request_keys})
            custom[name] = CustomProxy(name, str(entry["command"]), entry.get("version_command"), options)
            proxy = custom[name]
        elif request_keys & set(entry):
            raise UsageError(f"{where}: model, headers, api_key_env and base_path go with a `command` target")
        else:
            proxy = lookup(name)
        names = _versions(entry, name, where)
        variants = entry.get("variants", ["stock"])
        if not isinstance(variants, list) or not variants:
            raise UsageError(f"{where}: variants must be a non-empty list")
        for variant in variants:
            proxy.variant(variant)  # raises with the known names
            paths.extend(PathSpec(n, variant) for n in names)  # a proxy's versions side by side, per variant
    cond = data.get("conditions", {})
    if not isinstance(cond, dict):
        raise UsageError("[conditions] must be a table")
    known_conditions = {
        "interval_ms", "frame_bytes", "link", "tls", "stub_headers", "api", "accept_encoding", "client_http",
        "h2_window", *BEFORE_FIRST_TOKEN_OFF,
    }  # fmt: skip
    _no_unknown(cond, known_conditions, "[conditions]")
    intervals = _list(cond, "interval_ms", [50.0], (int, float), lambda v: v > 0 and math.isfinite(v))
    sizes = _list(cond, "frame_bytes", [60], (int,), lambda v: v >= 8)
    links = _list(cond, "link", ["loopback"], (str,), lambda v: v in LINKS)
    tls = _list(cond, "tls", [False], (bool,), lambda v: True)
    header_sets = [_header_set(h) for h in _list(cond, "stub_headers", [{}], (dict,), lambda v: True)]
    apis = _apis(cond)
    encodings = _accept_encodings(cond)
    versions = _http_versions(cond)
    if "h2_window" in cond and all(v != HTTP2 for v, _ in versions):
        raise UsageError('[conditions] h2_window: the client\'s HTTP/2 windows need client_http = ["2"] (or both)')
    frames = _int(data, "frames", 40, 2)
    conditions = [
        Condition(float(i), _frame_size(s, api, "frame_bytes" in cond, frames), link, t, h, "", api.value, enc,
                  client_http=v, h2_window=w)
        for api, i, s, link, t, h, enc, (v, w) in itertools.product(apis, intervals, sizes, links, tls, header_sets,
                                                                     encodings, versions)
    ]  # fmt: skip
    ttft_ms = data.get("ttft_ms", 20.0)
    conditions = [
        _before_first_token(c, beat, reasoning, first, head, "frame_bytes" in cond, frames, float(ttft_ms))
        for c in conditions
        for beat, reasoning, first, head in itertools.product(*_before_first_token_axes(cond))
    ]
    conditions = list(dict.fromkeys(conditions))  # an api's unpadded frames stand for every default size once
    endpoint = endpoints.parse(data["upstream"]) if "upstream" in data else None
    if endpoint is not None:
        conditions = _endpoint_conditions(cond, tls, links, endpoint)
        if "frames" in data:
            raise UsageError("frames: the stub's stream length; against [upstream], max_tokens bounds each stream")
    exclusion = data.get("exclusion", {})
    _no_unknown(exclusion, {"tolerance_ms"}, "[exclusion]")
    tolerance = exclusion.get("tolerance_ms")
    if tolerance is not None and (not isinstance(tolerance, int | float) or tolerance <= 0):
        raise UsageError("[exclusion] tolerance_ms must be a positive number (omit it for max(2 ms, 20 %))")
    experiment = Experiment(
        stub_listen=_stub_listen(data.get("stub", {})),
        name=str(data.get("name", "experiment")),
        paths=paths,
        conditions=conditions,
        frames=frames,
        runs=_int(data, "runs", 10, 1),
        ttft_ms=float(data.get("ttft_ms", 20.0)),
        exclusion=ExclusionRule(tolerance),
        custom=custom,
        endpoint=endpoint,
    )
    return experiment


def _versions(entry: dict[str, Any], name: str, where: str) -> list[str]:
    """`versions = ["3.3.2", "3.7.15"]`: one path per release, labelled NAME@VERSION (each checked by lookup: a
    release number, of an entry shipped by a versioned package); without it, the entry itself."""
    if "versions" not in entry:
        return [name]
    versions = entry["versions"]
    if "url" in entry or "command" in entry or "@" in name:
        raise UsageError(f"{where}: versions go with a catalogue name (e.g. traefik), not a url, command or NAME@V")
    if not isinstance(versions, list) or not versions or not all(isinstance(v, str) for v in versions):
        raise UsageError(f'{where}: versions must be a non-empty list of release numbers, e.g. ["3.3.2", "3.7.15"]')
    names = list(dict.fromkeys(f"{name}@{v}" for v in versions))
    for label in names:
        lookup(label)  # raises for a name without versions or a version that is not a release number
    return names


def _endpoint_conditions(
    cond: dict[str, Any], tls: list[bool], links: list[str], endpoint: EndpointSpec
) -> list[Condition]:
    """Against a real endpoint the endpoint paces the stream: only the client side's TLS and HTTP version (with its
    HTTP/2 windows) are conditions. Over HTTP/2 the client speaks h2 to the endpoint and to each path in front of it
    (ALPN over TLS, prior knowledge in clear text); one that will not fails its runs, never falls back."""
    paced = sorted({"interval_ms", "frame_bytes", "stub_headers", "api", "accept_encoding", *BEFORE_FIRST_TOKEN_OFF}
                   & set(cond))  # fmt: skip
    if paced:
        raise UsageError(f"[conditions] {', '.join(paced)}: the stub's pacing; a real upstream paces its own stream")
    if links != ["loopback"]:
        raise UsageError(
            "[conditions] link: a real upstream is reached from this host's network, which the veth namespaces "
            "are cut off from; only loopback"
        )
    versions = _http_versions(cond)
    return [Condition(0.0, 0, "loopback", t, (), endpoint.label, client_http=v, h2_window=w)
            for t in tls for v, w in versions]  # fmt: skip


def _before_first_token_axes(cond: dict[str, Any]) -> list[list[Any]]:
    """`heartbeat_ms = [0, 15000]`, `reasoning_tokens = [0, 8]`, `first_event_bytes = [0, 16384]`,
    `head_at = ["start", "first-token"]`: each off unless declared."""
    return [
        [float(v) for v in _list(cond, "heartbeat_ms", [0.0], (int, float), lambda v: v >= 0 and math.isfinite(v))],
        _list(cond, "reasoning_tokens", [0], (int,), lambda v: 0 <= v <= MAX_TOKENS),
        _list(cond, "first_event_bytes", [0], (int,), lambda v: 0 <= v <= MAX_FIRST_EVENT_BYTES),
        _list(cond, "head_at", ["start"], (str,), lambda v: v in HEAD_AT),
    ]


def _before_first_token(
    cond: Condition, beat: float, reasoning: int, first: int, head: HeadAt, declared: bool, frames: int, ttft_ms: float
) -> Condition:
    """`cond` with what the stub sends before the first token, checked here by the stub's own rule (a keep-alive in
    a format that has none, a first event too small for its frame), so the file fails, not every stream. OpenAI
    reasoning needs chunks with a reasoning field: such a condition streams `format` openai, unpadded unless a
    declared frame_bytes holds every chunk."""
    out = replace(cond, heartbeat_ms=beat, reasoning_tokens=reasoning, first_event_bytes=first, head_at=head)
    if out == cond:
        return cond
    if reasoning and cond.api == Api.OPENAI.value and not declared:
        out = replace(out, frame_bytes=0)
    try:
        check_start(stub_config(out, frames, ttft_ms))
    except UsageError as exc:
        raise UsageError(f"[conditions] {out.label}: {exc}") from None
    return out


def stub_config(cond: Condition, frames: int, ttft_ms: float) -> StubConfig:
    """The stub flags one stream of `cond` amounts to (what the runner sends as the body's `tokenpath` member)."""
    plain = cond.api == Api.OPENAI.value and not cond.reasoning_tokens
    return StubConfig(
        ttft_ms=ttft_ms, interval_ms=cond.interval_ms, tokens=frames, frame_bytes=cond.frame_bytes or None,
        format="plain" if plain else "openai", api=cond.api, model=STUB_MODEL,
        heartbeat_ms=cond.heartbeat_ms or None, reasoning_tokens=cond.reasoning_tokens,
        first_event_bytes=cond.first_event_bytes or None, head_at=cond.head_at,
    )  # fmt: skip


def _apis(cond: dict[str, Any]) -> list[Api]:
    """`api = ["openai", "anthropic", ...]`: each a format the stub and the probe speak (wire/apis.py)."""
    out = []
    for value in _list(cond, "api", [Api.OPENAI.value], (str,), lambda v: True):
        try:
            out.append(parse_api(value))
        except ValueError as exc:
            raise UsageError(f"[conditions] api: {exc}") from None
    return list(dict.fromkeys(out))


def _accept_encodings(cond: dict[str, Any]) -> list[str]:
    """`accept_encoding = ["identity", "gzip", "browser"]`: the header as sent ("browser": the browsers' own value,
    "identity": no header at all)."""
    out = []
    for value in _list(cond, "accept_encoding", [IDENTITY], (str,), lambda v: True):
        if not value.strip() or len(value) > MAX_ACCEPT_ENCODING_CHARS or not value.isprintable():
            raise UsageError(
                f"[conditions] accept_encoding: {value!r} is not a header value (printable, 1 to "
                f'{MAX_ACCEPT_ENCODING_CHARS} characters; "identity" sends none, "browser" what browsers send)'
            )
        text = value.strip()
        out.append(IDENTITY if text.lower() == IDENTITY else expand_accept_encoding(text))
    return list(dict.fromkeys(out))


def _client_http(cond: dict[str, Any]) -> list[str]:
    """`client_http = ["1.1", "2"]`: the HTTP version the client speaks to every path (strings, as HTTP names them;
    2 is h2 by ALPN over TLS and h2c with prior knowledge over cleartext, never a silent fallback)."""
    values = _list(cond, "client_http", [HTTP11], (str, int, float), lambda v: True)
    out = []
    for value in values:
        text = f"{value:g}" if isinstance(value, int | float) else str(value).strip()
        text = text.removeprefix("HTTP/").removeprefix("http/")
        if text not in CLIENT_HTTP:
            raise UsageError(f'[conditions] client_http: {value!r} is not one of "1.1", "2"')
        out.append(text)
    return list(dict.fromkeys(out))


def _http_versions(cond: dict[str, Any]) -> list[tuple[str, str]]:
    """Each client HTTP version with its windows: the HTTP/2 ones per `h2_window`, HTTP/1.1 once."""
    return [(v, w) for v in _client_http(cond) for w in (_h2_windows(cond) if v == HTTP2 else [DEFAULT_H2_WINDOW])]


def _h2_windows(cond: dict[str, Any]) -> list[str]:
    """`h2_window = ["default", "browser"]`: the client's HTTP/2 receive windows, each a condition (flow control is
    measured, never a library's default): "default" (65,535), "browser" (Chromium's), BYTES or STREAM:CONNECTION."""
    out = []
    for value in _list(cond, "h2_window", [DEFAULT_H2_WINDOW], (str, int), lambda v: True):
        try:
            out.append(str(parse_h2_window(str(value))))
        except UsageError as exc:
            raise UsageError(f"[conditions] h2_window: {exc}") from None
    return list(dict.fromkeys(out))


def _frame_size(size: int, api: Api, declared: bool, tokens: int) -> int:
    """An OpenAI condition pads bare frames (`format` plain) to `size`; another format pads each token's frame, whose
    JSON is larger: a declared size must hold it (checked here by the stub's own rule, so the file fails, not every
    stream), and without a declared size the format streams its own unpadded frames (0)."""
    if api is Api.OPENAI:
        return size
    if not declared:
        return 0
    try:
        check_frame_bytes(StubConfig(frame_bytes=size, tokens=tokens, api=api.value, model=STUB_MODEL))
    except UsageError as exc:
        raise UsageError(f"[conditions] frame_bytes {size} with api {api.value}: {exc}") from None
    return size


def _stub_listen(table: Any) -> Endpoint | None:
    """`[stub] listen = "HOST:PORT"`: a fixed address, so paths already running can be pointed at the stub."""
    if not isinstance(table, dict):
        raise UsageError("[stub] must be a table")
    _no_unknown(table, {"listen"}, "[stub]")
    if "listen" not in table:
        return None
    try:
        host, port = parse_hostport(str(table["listen"]), "[stub] listen", default_host=None, min_port=1)
    except UsageError:
        raise UsageError(f"[stub] listen must be HOST:PORT, not {table['listen']!r}") from None
    return Endpoint(host, port)


def _header_set(table: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """One value of the stub_headers axis: checked here with the stub's own rule, so a bad header fails the file."""
    try:
        return tuple(response_headers(table).items())
    except UsageError as exc:
        raise UsageError(f"[conditions] stub_headers: {exc}") from None


def _no_unknown(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(table) - known
    if unknown:
        raise UsageError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")


def _int(data: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{key} must be a whole number >= {minimum}")
    return value


def _list(table: dict[str, Any], key: str, default: list[Any], kinds: tuple[type, ...], ok: Any) -> list[Any]:
    values = table.get(key, default)
    if not isinstance(values, list):
        values = [values]
    if not values:
        raise UsageError(f"[conditions] {key} must not be empty")
    for v in values:
        if not isinstance(v, kinds) or (bool not in kinds and isinstance(v, bool)) or not ok(v):
            raise UsageError(f"[conditions] {key}: {v!r} is not allowed")
    return values
