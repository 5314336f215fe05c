"""The experiment file (TOML). Everything that decides the result is declared here before the run starts:
paths, conditions, runs, and the exclusion rule. Loading validates it all and says what is wrong where."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tokenpath.audit import AuditVerdict, StreamLog, audit_stream
from tokenpath.axes import (
    API,
    AXES,
    BY_KEY,
    KEYS,
    LINK,
    REPLAY_PREFIX,
    Axis,
    Condition,
    Link,
    grid,
    number_parser,
    origin_member,
    replay_file,
)
from tokenpath.clock import NS_PER_MS
from tokenpath.errors import UsageError
from tokenpath.experiment import endpoint as endpoints
from tokenpath.experiment.endpoint import EndpointSpec
from tokenpath.experiment.h3controls import H3_CONTROLS
from tokenpath.hostport import parse_hostport
from tokenpath.probe.wsfallback import CODEX_ATTEMPTS, WsFallback
from tokenpath.proxies import ProxyError, lookup
from tokenpath.proxies.attached import AttachedProxy
from tokenpath.proxies.base import Endpoint, Proxy
from tokenpath.proxies.custom import CustomProxy, RequestOptions
from tokenpath.proxies.relays import CONTROLS
from tokenpath.stub.config import MAX_FRAME_BYTES, MAX_TOKENS, Pacing, StubConfig
from tokenpath.stub.formats import check_frame_bytes, check_start
from tokenpath.stub.replay import load_cached as load_recording
from tokenpath.userfiles import MAX_CONFIG_BYTES, read_text
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.carrier import WEBSOCKET

__all__ = ["Condition", "Experiment", "Link", "PathSpec", "load", "parse", "stub_member", "stub_pacing"]

STUB_MODEL = "tokenpath-stub"  # what the matrix asks the stub for (its token frames' size depends on it)
# The order the grid nests the axes in, the first varying slowest: the order conditions have always been run in.
# An axis not named here varies inside these, in AXES' order.
GRID_ORDER = (
    *("api", "interval_ms", "frame_bytes", "link", "tls", "stub_headers", "accept_encoding", "client_http"),
    *("h2_window", "heartbeat_ms", "reasoning_tokens", "first_event_bytes", "head_at", "origin", "http10_framing"),
)


def grid_axes() -> list[Axis[Any]]:
    """The [conditions] axes in GRID_ORDER."""
    declared = [a for a in AXES if a.declared]
    return [BY_KEY[k] for k in GRID_ORDER] + [a for a in declared if a.key not in GRID_ORDER]


MAX_RUNS = 1000  # streams per path and condition: past this a matrix runs for days (sweep.py MAX_SWEEP_RUNS)
MAX_NAME_CHARS = 100
MAX_TOLERANCE_MS = 60_000.0  # a write a minute late is no host's noise: past it (1e300) nothing was ever excluded
# Names tokenpath gives the paths it measures itself: a `url` or `command` entry named so replaced them (a control's
# certification ran the user's command).
RESERVED_NAMES = frozenset({"direct", *(c.name for c in CONTROLS), *(c.name for c in H3_CONTROLS)})


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
    # `[websocket]`: the client's policy on a WebSocket condition where a path does not carry the upgrade (Codex's
    # by default: 6 upgrades, 200 ms doubling, then SSE; `fallback = 0`: none, the row only says "not carried")
    ws_fallback: WsFallback = field(default_factory=lambda: WsFallback(CODEX_ATTEMPTS))

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
            "websocket": self.ws_fallback.to_json(),
            **({"upstream": self.endpoint.to_json()} if self.endpoint else {}),
        }


def load(path: str | Path) -> Experiment:
    path = Path(path)
    text = read_text(path, MAX_CONFIG_BYTES, "experiment file")  # TOML is UTF-8; a regular file, bounded
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    if not data:  # it measured direct alone for a minute: the wrong file, or one not yet written
        raise UsageError(f'{path}: empty: name the paths to measure ([[proxy]] name = "nginx"; examples/quick.toml)')
    try:
        experiment = parse(_replays_beside(data, path.parent))
    except (UsageError, ProxyError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    experiment.source = text
    return experiment


def _replays_beside(data: dict[str, Any], here: Path) -> dict[str, Any]:
    """`origin = "replay:FILE"` with a relative FILE read beside the experiment file, as its reader expects (an
    absolute one, or any other value, as written)."""
    cond = data.get("conditions")
    if not isinstance(cond, dict) or "origin" not in cond:
        return data
    values = cond["origin"] if isinstance(cond["origin"], list) else [cond["origin"]]

    def beside(value: object) -> object:
        if not isinstance(value, str) or not value.startswith(REPLAY_PREFIX):
            return value
        file = Path(value.removeprefix(REPLAY_PREFIX))
        return value if file.is_absolute() else REPLAY_PREFIX + str(here / file)

    return {**data, "conditions": {**cond, "origin": [beside(v) for v in values]}}


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
    known = {"name", "frames", "runs", "ttft_ms", "conditions", "proxy", "exclusion", "upstream", "stub", "websocket"}
    _no_unknown(data, known, "top level")
    custom: dict[str, Proxy] = {}
    paths = [PathSpec("direct")]
    for i, entry in enumerate(data.get("proxy", [])):
        where = f"[[proxy]] #{i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise UsageError(f'{where}: needs name = "..."')
        request_keys = {"model", "headers", "api_key_env", "base_path"}
        keys = {"name", "variants", "versions", "command", "version_command", "url", "version", "cacert"}
        _no_unknown(entry, keys | request_keys, where)
        name = entry["name"]
        _check_path_name(name, where)
        if ("url" in entry or "command" in entry) and name in RESERVED_NAMES:
            raise UsageError(
                f"{where}: {name!r} is a name tokenpath measures itself (the direct path, a control): name yours "
                "another way"
            )
        # Who reads which: a path already running says its `version`, a command's `version_command` asks it, and a
        # catalogue proxy's is its own binary's (tokenpath asks it); the other key would be dropped.
        unread = {"url": "version_command", "command": "version"}
        kind = next((k for k in unread if k in entry), None)
        for key in ("version", "version_command"):
            if key in entry and (kind is None or unread[kind] == key):
                raise UsageError(
                    f"{where}: `{key}` is not read here: a `url` path takes `version`, a `command` one "
                    "`version_command`, and a catalogue proxy's version is its binary's"
                )
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
    _no_path_twice(paths, custom, data.get("proxy", []))
    cond = data.get("conditions", {})
    if not isinstance(cond, dict):
        raise UsageError("[conditions] must be a table")
    _no_unknown(cond, set(KEYS), "[conditions]")
    frames = _int(data, "frames", 40, 2, MAX_TOKENS, "the stub's limit")  # past it every stream is a 400
    ttft_ms = _ms(data, "ttft_ms", 20.0, lambda v: v >= 0, "a number of ms >= 0")
    declared_size = "frame_bytes" in cond
    conditions = [_honoured(c, declared_size, frames, ttft_ms) for c in grid(cond, grid_axes())]
    conditions = list(dict.fromkeys(conditions))  # an api's unpadded frames stand for every default size once
    _no_replays_apart_by_pacing(conditions)
    endpoint = endpoints.parse(data["upstream"]) if "upstream" in data else None
    if endpoint is not None:
        conditions = _endpoint_conditions(cond, endpoint)
        if "frames" in data:
            raise UsageError("frames: the stub's stream length; against [upstream], max_tokens bounds each stream")
    exclusion = data.get("exclusion", {})
    if not isinstance(exclusion, dict):
        raise UsageError("[exclusion] must be a table (tolerance_ms)")
    _no_unknown(exclusion, {"tolerance_ms"}, "[exclusion]")
    tolerance = None
    if "tolerance_ms" in exclusion:
        says = f"a positive number of ms up to {MAX_TOLERANCE_MS:g}; omit it for max(2 ms, 20 %)"
        tolerance = _ms(exclusion, "tolerance_ms", None, lambda v: 0 < v <= MAX_TOLERANCE_MS, says, "[exclusion] ")
    websocket = data.get("websocket", {})
    if not isinstance(websocket, dict):
        raise UsageError("[websocket] must be a table (fallback, retry_delay_ms, upgrade_timeout_s)")
    if websocket and not any(falls_back(c) for c in conditions):
        raise UsageError(
            '[websocket]: no condition has transport = "websocket" with an API that has an SSE stream to fall back '
            "to (a WebSocket-only one, realtime, has none), so its fallback is never used"
        )
    experiment = Experiment(
        ws_fallback=WsFallback.from_table(websocket, "[websocket]"),
        stub_listen=_stub_listen(data.get("stub", {})),
        name=_name(data),
        paths=paths,
        conditions=conditions,
        frames=frames,
        runs=_int(data, "runs", 10, 1, MAX_RUNS, "streams per path and condition: more would run for days"),
        ttft_ms=ttft_ms,
        exclusion=ExclusionRule(tolerance),
        custom=custom,
        endpoint=endpoint,
    )
    return experiment


def _check_path_name(name: str, where: str) -> None:
    """A path's name is a row label, a compose service and a terminal line: one printable line, and short. A newline
    in it wrote a key of its own into docker-compose.yml; an escape sequence cleared the terminal."""
    if not name or not name.isprintable() or len(name) > MAX_NAME_CHARS:
        raise UsageError(f"{where}: name must be one printable line of 1 to {MAX_NAME_CHARS} characters, not {name!r}")


def _no_path_twice(paths: list[PathSpec], custom: dict[str, Proxy], entries: list[Any]) -> None:
    """Each path once: a name or variant given twice ran its streams into one row (twice the runs), and a `url` or
    `command` entry named like another entry replaced it (Experiment.proxy takes a custom one first)."""
    labels = [p.label for p in paths]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise UsageError(f"[[proxy]]: path {twice[0]!r} is declared twice (each name and variant once)")
    names = [entry["name"] for entry in entries]
    shadowed = sorted(name for name in custom if names.count(name) > 1)
    if shadowed:
        raise UsageError(f"[[proxy]]: {shadowed[0]!r} names two entries (a url or command entry takes its own name)")


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


def _endpoint_conditions(cond: dict[str, Any], endpoint: EndpointSpec) -> list[Condition]:
    """Against a real endpoint the endpoint paces the stream: only the client side's TLS and HTTP version (with its
    HTTP/2 windows) are conditions, and a started origin's formats (`api`: each it speaks, on its own route). Over
    HTTP/2 the client speaks h2 to the endpoint and to each path in front of it (ALPN over TLS, prior knowledge in
    clear text); one that will not fails its runs, never falls back."""
    formats = [API] if endpoint.kind else []
    paced = sorted(a.key for a in AXES if a.stub_paced and a.key in cond and a not in formats)
    if paced:
        raise UsageError(f"[conditions] {', '.join(paced)}: the stub's pacing; a real upstream paces its own stream")
    if LINK.values(cond) != ["loopback"]:
        raise UsageError(
            "[conditions] link: a real upstream is reached from this host's network, which the veth namespaces "
            "are cut off from; only loopback"
        )
    for api in API.values(cond):
        endpoint.route(api)  # a UsageError for a format the origin does not speak
    client_side = [a for a in grid_axes() if not a.stub_paced or a in formats]
    return [replace(c, interval_ms=0.0, frame_bytes=0, endpoint=endpoint.label) for c in grid(cond, client_side)]


def _honoured(cond: Condition, declared_size: bool, frames: int, ttft_ms: float) -> Condition:
    """`cond` as the stub streams it, checked here by the stub's own rules (a frame too small for its format or
    past the stub's limit, a keep-alive in a format that has none, a first event too small for its frame, a stream
    too long or too large), so the file fails, not every stream. OpenAI reasoning needs chunks with a reasoning
    field: such a condition streams `format` openai, unpadded unless a declared frame_bytes holds every chunk."""
    replay = replay_file(cond)
    if replay is not None and load_recording(replay).api is not cond.api:
        recorded = load_recording(replay).api.value
        raise UsageError(f"[conditions] {cond.label}: the recording is of the {recorded} API, not {cond.api.value}")
    cond = replace(cond, frame_bytes=_frame_size(cond.frame_bytes, cond.api, declared_size, frames))
    pacing = stub_pacing(cond, frames, ttft_ms)
    if cond.reasoning_tokens and cond.api is Api.OPENAI and not declared_size:
        cond = replace(cond, frame_bytes=0)
        pacing = stub_pacing(cond, frames, ttft_ms)
    try:
        if pacing.planned:
            check_start(StubConfig.paced(pacing, api=cond.api.value, model=STUB_MODEL))
        pacing.check_bounds("")  # every stream's length and bytes, planned or not: the stub refuses them all
    except UsageError as exc:
        raise UsageError(f"[conditions] {cond.label}: {exc}") from None
    return cond


def stub_pacing(cond: Condition, tokens: int, ttft_ms: float) -> Pacing:
    """The stub's pacing for one stream of `cond`: the axes' own settings (AXES' `pacing`), and the frame format:
    OpenAI streams bare frames (`format` plain) padded to the size, or chunks when it reasons first; another format
    pads its token frames, or sends them as they are (0)."""
    plain = cond.api is Api.OPENAI and not cond.reasoning_tokens
    return replace(Pacing(ttft_ms, tokens=tokens, format="plain" if plain else "openai"), **cond.pacing_settings())


def stub_member(cond: Condition, tokens: int, ttft_ms: float) -> dict[str, object]:
    """The request body's `tokenpath` member for one stream of `cond`: its pacing, and the headers it declares."""
    return {**stub_pacing(cond, tokens, ttft_ms).to_json(), **origin_member(cond)}


def _frame_size(size: int, api: Api, declared: bool, tokens: int) -> int:
    """An OpenAI condition pads bare frames (`format` plain) to `size`; another format pads each token's frame, whose
    JSON is larger: a declared size must hold it (checked here by the stub's own rule, so the file fails, not every
    stream), and without a declared size the format streams its own unpadded frames (0)."""
    if size > MAX_FRAME_BYTES:  # the stub's limit: past it every stream is a 400
        raise UsageError(f"[conditions] frame_bytes {size}: at most {MAX_FRAME_BYTES} (the stub's limit)")
    if api is Api.OPENAI:
        return size
    if not declared:
        return 0
    try:
        check_frame_bytes(StubConfig(frame_bytes=size, tokens=tokens, api=api.value, model=STUB_MODEL))
    except UsageError as exc:
        raise UsageError(f"[conditions] frame_bytes {size} with api {api.value}: {exc}") from None
    return size


def falls_back(cond: Condition) -> bool:
    """Whether a condition's probes follow [websocket]'s fallback policy: over WebSocket, with an SSE stream to fall
    back to (experiment/runner.py applies it so)."""
    return cond.transport == WEBSOCKET and not SPECS[cond.api].websocket_only


def _no_replays_apart_by_pacing(conditions: list[Condition]) -> None:
    """A replayed recording streams with its own timings and sizes: conditions over it that differ only in the stub's
    pacing would stream the same bytes under different labels, so a pacing axis that varies there is refused."""
    replays = [c for c in conditions if replay_file(c) is not None]
    for axis in grid_axes():
        if axis.pacing is not None and len({getattr(c, axis.field) for c in replays}) > 1:
            raise UsageError(
                f"[conditions] {axis.key}: a replay origin streams its recording's own pacing, so its conditions "
                f"would differ only in their labels (vary {axis.key} with the stub or a preset as origin)"
            )


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


def _no_unknown(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(table) - known
    if unknown:
        raise UsageError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")


def _int(data: dict[str, Any], key: str, default: int, minimum: int, maximum: int, why: str) -> int:
    """A whole number from `minimum` to `maximum`; `why` says where the maximum comes from."""
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{key} must be a whole number >= {minimum}")
    if value > maximum:
        raise UsageError(f"{key} must be a whole number from {minimum} to {maximum} ({why})")
    return value


def _ms(data: dict[str, Any], key: str, default: Any, ok: Callable[[float], bool], says: str, where: str = "") -> float:
    """A time in ms, checked as the [conditions] numbers are (axes.py's parser: no bool, NaN or infinity)."""
    try:
        return number_parser(ok)(data.get(key, default))
    except ValueError as exc:
        raise UsageError(f"{where}{key}: {exc} ({says})") from None


def _name(data: dict[str, Any]) -> str:
    name = data.get("name", "experiment")
    if not isinstance(name, str):  # str() would make 5 a name nobody wrote
        raise UsageError(f'name must be a string, e.g. name = "nginx-vs-haproxy", not {name!r}')
    return name
