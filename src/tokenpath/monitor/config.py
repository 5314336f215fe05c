"""What `tokenpath monitor` watches: a TOML file (or one target from flags) read into frozen objects, checked before
the first probe, with each target's probe configs built here so the runner never touches the environment.

    [monitor]                      # all optional
    interval_s = 15                # between two probes of one target (start to start), jittered
    jitter = 0.1                   # +/- this share of the interval, so targets do not probe in lockstep
    max_concurrency = 4            # probes in flight at once, over all targets (one per target at most)
    metrics_listen = "127.0.0.1:9465"
    coalescing_window = 5          # the coalescing gauge is the modal burst of this many latest probes
    metric_names = "tokenpath"     # or "otel": OpenTelemetry GenAI names for TTFT and time per chunk
    otlp_endpoint = "http://127.0.0.1:4318"   # optional: also export over OTLP/HTTP (monitor/otlp.py; headers
    otlp_interval_s = 15           #   from OTEL_EXPORTER_OTLP_HEADERS), every this many seconds and on stop

    [defaults]                     # any target key but name/url/direct_url, applied to every target
    model = "gpt-4o-mini"

    [[target]]
    name = "ingress"               # the `target` label: labels come only from this file
    url = "https://llm.example.com/v1"
    direct_url = "http://10.0.0.5:8000/v1"   # optional: the same model without the path, for added TTFT
    api_key_env = "OPENAI_API_KEY"
    headers = { "X-Team" = "search" }
    http2 = true                   # optional: probe over HTTP/2 (h2 by ALPN, h2c in clear text); fails if refused
    h2_window = "browser"          #   with the client's receive windows: BYTES, "default" (65535) or "browser"
    http3 = true                   # or HTTP/3 (QUIC over UDP, https only; never a fallback; the raw client's)
    h3_window = "browser"          #   with its initial QUIC windows: BYTES, "default" (1 MiB) or "browser"
    client = "chromium"            # optional: headless Chromium makes the request (fetch + ReadableStream)
    transport = "websocket"        # optional: the format's WebSocket mode (api = "responses"); a path that does not
                                   #   carry the upgrade is the outcome `websocket_not_carried`
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tokenpath.axes import API, H2_WINDOW, TRANSPORT
from tokenpath.errors import UsageError
from tokenpath.hostport import parse_hostport
from tokenpath.monitor.otel_names import NAMINGS
from tokenpath.monitor.otlp_endpoint import endpoint_url
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.h3figures import DEFAULT_H3_WINDOW, parse_h3_window
from tokenpath.probe.transport import TLSOptions, parse_target
from tokenpath.tomlconfig import dataclass_from
from tokenpath.tomlconfig import read_toml as _read_toml
from tokenpath.wire.h2client import DEFAULT_WINDOW, parse_h2_window
from tokenpath.wire.httpversion import HttpVersion
from tokenpath.wire.request import DEFAULT_PROMPT, check_header, check_key

# A label value a dashboard and a shell both take as-is: NAME.fullmatch (`$` would let a trailing newline through)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
ROUTES = ("via", "direct")  # the `route` label: through the path under watch, or around it


@dataclass(frozen=True, slots=True)
class Bound:
    """A number a config may say: between `low` (or above it, `above`) and `high`. A NaN, an infinity or a value
    like 1e300 is refused at start, never a probe's failure (a deadline in integer nanoseconds cannot hold it)."""

    low: float
    high: float
    unit: str = ""  # "seconds", "probes": for the message
    above: bool = False  # the low end is excluded (a timeout of 0 s is none)

    def check(self, key: str, value: float | None, where: str = "") -> None:
        if value is None:
            return  # unset: its default
        fits = (self.low < value if self.above else self.low <= value) and value <= self.high  # a NaN fits nowhere
        if fits:
            return
        unit = f" {self.unit}" if self.unit else ""
        if self.above:
            rule = f"a number of{unit} > {self.low:g} and <= {self.high:g}"
        else:
            rule = f"between {self.low:g} and {self.high:g}{unit}"
        raise UsageError(f"{where}`{key}` must be {rule}, not {value}")


# Every number of the config, checked at start against its bounds (the [monitor] table's, then each target's).
SETTING_BOUNDS = {
    "interval_s": Bound(0.1, 86400, "seconds"),
    "jitter": Bound(0, 0.5, "(a share of the interval)"),
    "max_concurrency": Bound(1, 256),
    "coalescing_window": Bound(1, 1000, "probes"),
    "otlp_interval_s": Bound(0.1, 86400, "seconds"),
}
MAX_TIMEOUT_S = 3600  # a probe holds a slot this long at most: an hour is far beyond any stream's first token
TARGET_BOUNDS = {
    "interval_s": Bound(0.1, 86400, "seconds"),
    "max_tokens": Bound(1, 1_000_000),
    "connect_timeout_s": Bound(0, MAX_TIMEOUT_S, "seconds", above=True),
    "first_byte_timeout_s": Bound(0, MAX_TIMEOUT_S, "seconds", above=True),
    "idle_timeout_s": Bound(0, MAX_TIMEOUT_S, "seconds", above=True),
    "total_timeout_s": Bound(0, MAX_TIMEOUT_S, "seconds", above=True),
}


@dataclass(frozen=True)
class TargetSpec:
    name: str
    url: str
    direct_url: str | None = None
    model: str = "tokenpath-stub"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int | None = 32  # enough frames to see bursts; a synthetic probe should not cost a long answer
    headers: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None  # the key is read from this variable at start; never from the file
    body: dict[str, Any] = field(default_factory=dict)  # merged into the JSON request (e.g. vendor options)
    cacert: str | None = None
    insecure: bool = False
    interval_s: float | None = None  # this target's own interval; default [monitor] interval_s
    connect_timeout_s: float = 5.0
    first_byte_timeout_s: float = 30.0  # a model under load can take this long to its first byte
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 60.0  # the longest one probe may hold a slot (and the longest SIGTERM can wait)
    api: str = "openai"  # the streaming format (wire/apis.py): its route, body and first content frame
    accept_encoding: str | None = None  # sent as Accept-Encoding ("browser": a browser's); the answer is decoded
    # HTTP/2 to this target (ALPN h2 over TLS, h2c with prior knowledge in clear text; no fallback to 1.1), with
    # the client's receive windows: BYTES, "STREAM:CONNECTION", "default" (65,535) or "browser" (Chromium's)
    http2: bool = False
    h2_window: str | int | None = None
    # HTTP/3 to this target (QUIC over UDP to the URL's port, https only; never a fallback), with the client's
    # initial QUIC windows: BYTES, "STREAM:CONNECTION", "default" (aioquic's 1 MiB) or "browser" (Chromium's)
    http3: bool = False
    h3_window: str | int | None = None
    # Who makes the request: "raw" (the probe's own socket) or "chromium" (headless Chromium's fetch, its own
    # Accept-Encoding and h2 by ALPN; probe/browser.py); a browser per probe, so a longer interval suits it
    client: str = "raw"
    # How the stream is carried (wire/carrier.py): "sse" (the format's HTTP stream) or "websocket" (its WebSocket
    # mode over an HTTP/1.1 upgrade; the raw client's only)
    transport: str = "sse"


@dataclass(frozen=True)
class MonitorSettings:
    interval_s: float = 15.0  # a dashboard's usual scrape step; one stream per target per step costs little
    jitter: float = 0.1
    max_concurrency: int = 4
    metrics_listen: str = "127.0.0.1:9465"  # loopback unless told otherwise
    coalescing_window: int = 5
    metric_names: str = "tokenpath"  # monitor/otel_names.py NAMINGS
    otlp_endpoint: str | None = None  # monitor/otlp.py: no OTLP export unless set
    otlp_interval_s: float = 15.0  # the SDK's default is 60 s; this matches interval_s, one export per probe round


@dataclass(frozen=True)
class Target:
    """A checked target: its spec, its interval and the probe configs of each route it has."""

    spec: TargetSpec
    interval_s: float
    routes: dict[str, ProbeConfig]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class MonitorConfig:
    settings: MonitorSettings
    targets: tuple[Target, ...]

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        return parse_hostport(self.settings.metrics_listen, "`metrics_listen`")


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the command line says on top of a config file (the gateway's Overrides): one target by `url` instead
    of the file's [[target]]s, and [monitor] settings that win over the file's when set."""

    url: str | None = None
    name: str = "target"
    direct_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    max_tokens: int | None = None
    body: tuple[tuple[str, object], ...] = ()
    cacert: str | None = None
    insecure: bool = False
    interval_s: float | None = None
    metrics_listen: str | None = None
    max_concurrency: int | None = None
    metric_names: str | None = None
    otlp_endpoint: str | None = None
    api: str | None = None
    accept_encoding: str | None = None
    http2: bool = False
    h2_window: str | None = None
    http3: bool = False
    h3_window: str | None = None
    transport: str | None = None

    def target(self) -> dict[str, object]:
        """The one [[target]] `url` stands for, as a config file would spell it (unset keys: the defaults)."""
        target: dict[str, object] = {
            "name": self.name,
            "url": self.url,
            "insecure": self.insecure,
            "headers": dict(self.headers),
            "body": dict(self.body),
        }
        keys = (
            "direct_url",
            "model",
            "api_key_env",
            "max_tokens",
            "cacert",
            "api",
            "accept_encoding",
            "h2_window",
            "h3_window",
            "transport",
        )
        for key in keys:
            value = getattr(self, key)
            if value is not None:
                target[key] = value
        if self.http2:
            target["http2"] = True
        if self.http3:
            target["http3"] = True
        return target

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        data = {**data, "target": [self.target()]} if self.url else dict(data)
        settings: object = data.get("monitor", {})
        if isinstance(settings, dict):  # a malformed table is from_dict's to name
            settings = dict(settings)
            for key in ("interval_s", "metrics_listen", "max_concurrency", "metric_names", "otlp_endpoint"):
                value = getattr(self, key)
                if value is not None:
                    settings[key] = value
        data["monitor"] = settings
        return data


def read_toml(path: str | Path) -> dict[str, Any]:
    return _read_toml(path, "monitor config")


def load(path: str | Path, env: dict[str, str] | None = None) -> MonitorConfig:
    return from_dict(read_toml(path), env, where=f"monitor config {path}")


def from_dict(data: dict[str, Any], env: dict[str, str] | None = None, where: str = "monitor config") -> MonitorConfig:
    data = dict(data)
    settings = dataclass_from(MonitorSettings, data.pop("monitor", {}), f"{where} [monitor]")
    defaults = data.pop("defaults", {})
    if not isinstance(defaults, dict):
        raise UsageError(f"{where} [defaults]: expected a table")
    for key in ("name", "url", "direct_url"):
        if key in defaults:
            raise UsageError(f"{where} [defaults]: `{key}` belongs to each [[target]]")
    raw_targets = data.pop("target", [])
    if data:
        raise UsageError(f"{where}: unknown key(s) {sorted(data)}; known: ['defaults', 'monitor', 'target']")
    if not isinstance(raw_targets, list) or not raw_targets:
        raise UsageError(f"{where}: no [[target]]: declare at least one target to probe")
    specs = []
    for i, raw in enumerate(raw_targets):
        if not isinstance(raw, dict):
            raise UsageError(f"{where} [[target]] {i}: expected a table")
        specs.append(dataclass_from(TargetSpec, {**defaults, **raw}, f"{where} [[target]] {raw.get('name', i)}"))
    return build(settings, specs, env)


def build(settings: MonitorSettings, specs: list[TargetSpec], env: dict[str, str] | None = None) -> MonitorConfig:
    """Check everything a probe will need, so a typo is a startup error and not a stream of failed probes."""
    environ = os.environ if env is None else env
    _check_settings(settings)
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"target names must be unique: {duplicates}")
    targets = tuple(_target(spec, settings, environ) for spec in specs)
    config = MonitorConfig(settings, targets)
    config.metrics_host_port  # noqa: B018 - checks metrics_listen
    return config


def _check_settings(s: MonitorSettings) -> None:
    for key, bound in SETTING_BOUNDS.items():
        bound.check(key, getattr(s, key))
    if s.metric_names not in NAMINGS:
        raise UsageError(f"`metric_names` must be one of {', '.join(NAMINGS)}, not {s.metric_names!r}")
    if s.otlp_endpoint is not None:
        endpoint_url(s.otlp_endpoint)


def _target(spec: TargetSpec, settings: MonitorSettings, env: Any) -> Target:
    where = f"target {spec.name!r}"
    if not NAME.fullmatch(spec.name):
        raise UsageError(f"target name {spec.name!r}: use letters, digits and _.:- (at most 64)")
    for key, bound in TARGET_BOUNDS.items():
        bound.check(key, getattr(spec, key), f"{where}: ")
    interval = settings.interval_s if spec.interval_s is None else spec.interval_s
    for name, value in spec.headers.items():
        if not isinstance(value, str):
            raise UsageError(f"{where}: header {name} must be a string")
        check_header(name, value)
    if spec.cacert and not Path(spec.cacert).is_file():
        raise UsageError(f"{where}: `cacert` {spec.cacert}: no such file")
    if spec.cacert:  # loaded now: a file that is no PEM failed every probe (outcome `usage`), never the start
        try:
            TLSOptions(cacert=spec.cacert).context()
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    api_key = None
    if spec.api_key_env:
        api_key = env.get(spec.api_key_env)
        if not api_key:
            raise UsageError(f"{where}: `api_key_env` {spec.api_key_env}: that environment variable is not set")
        check_key(f"{where}: `api_key_env` {spec.api_key_env}", api_key)  # else every probe failed, never the start
    try:
        base = _probe_config(spec, api_key)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    _check_client(spec, base)
    routes = {"via": base}
    if spec.direct_url:
        routes["direct"] = replace(base, url=spec.direct_url)
    for route, cfg in routes.items():
        try:
            cfg.target  # noqa: B018 - validates the URL
        except UsageError as exc:
            raise UsageError(f"{where} ({route}): {exc}") from None
    if spec.direct_url and parse_target(spec.direct_url) == parse_target(spec.url):
        raise UsageError(f"{where}: `direct_url` is the same endpoint as `url`: nothing would be added")
    return Target(spec, interval, routes)


def _check_client(spec: TargetSpec, cfg: ProbeConfig) -> None:
    where = f"target {spec.name!r}"
    if spec.client not in ("raw", "chromium"):
        raise UsageError(f"{where}: `client` {spec.client!r}: choose raw or chromium")
    if spec.client == "chromium" and cfg.transport != TRANSPORT.default:
        raise UsageError(f"{where}: `transport` {cfg.transport} is the raw client's (`client` raw)")
    if spec.client == "chromium" and spec.http3:
        raise UsageError(f"{where}: `http3` is the raw client's (`client` raw): Chromium over HTTP/3 is not measured")
    if spec.client == "chromium":
        from tokenpath.probe.browser_page import fetch_spec

        try:
            fetch_spec(cfg, "check")  # what a page cannot send (Accept-Encoding, http2, forbidden headers)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None


def _probe_config(spec: TargetSpec, api_key: str | None) -> ProbeConfig:
    """The target's request: its axes read as tokenpath.axes reads them (named as the file's keys)."""
    if spec.h2_window is not None and not spec.http2:
        raise UsageError("`h2_window` is HTTP/2's: set `http2 = true` with it")
    window = DEFAULT_WINDOW
    if spec.h2_window is not None:
        window = parse_h2_window(H2_WINDOW.read(spec.h2_window, "`h2_window`"))
    if spec.h3_window is not None and not spec.http3:
        raise UsageError("`h3_window` is HTTP/3's: set `http3 = true` with it")
    if spec.http2 and spec.http3:
        raise UsageError("`http2` and `http3`: pick one HTTP version")
    if spec.http3 and parse_target(spec.url).scheme != "https":
        raise UsageError("`http3` needs an https:// `url`: QUIC is always TLS")
    h3_window = DEFAULT_H3_WINDOW if spec.h3_window is None else parse_h3_window(str(spec.h3_window))
    return ProbeConfig(
        url=spec.url,
        model=spec.model,
        prompt=spec.prompt,
        max_tokens=spec.max_tokens,
        headers=tuple(spec.headers.items()),
        api_key=api_key,
        tls=TLSOptions(insecure=spec.insecure, cacert=spec.cacert),
        connect_timeout_s=spec.connect_timeout_s,
        first_byte_timeout_s=spec.first_byte_timeout_s,
        idle_timeout_s=spec.idle_timeout_s,
        total_timeout_s=spec.total_timeout_s,
        extra_body=tuple(spec.body.items()),
        api=API.read(spec.api, "`api`"),
        accept_encoding=spec.accept_encoding,
        http_version=HttpVersion.HTTP3 if spec.http3 else HttpVersion.of(spec.http2),
        h2_window=window,
        h3_window=h3_window,
        transport=TRANSPORT.read(spec.transport, "`transport`"),
    )
