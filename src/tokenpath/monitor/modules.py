"""The exporter's modules (blackbox_exporter's word): named request shapes a `/probe?target=URL&module=NAME` uses.
The target comes from Prometheus; everything else about the request comes from here, checked at start.

    [modules.openai]                      # every key optional: these are the defaults
    api = "openai"                        # the API format: any `tokenpath probe --api` value
    accept_encoding = "gzip"              # sent as Accept-Encoding ("browser": a browser's); the answer is decoded
    http_version = "1.1"                  # or "2": ALPN h2 over TLS, h2c in clear text; a refusal fails the probe
    h2_window = "browser"                 # with "2": the client's receive windows (BYTES, "default", "browser")
                                          # or "3": QUIC (https targets only; any other is the /probe's 400)
    h3_window = "browser"                 # with "3": the initial QUIC windows (BYTES, "default", "browser")
    model = "tokenpath-stub"
    max_tokens = 32
    prompt = "..."
    headers = { "X-Synthetic" = "tokenpath" }
    api_key_env = "OPENAI_API_KEY"        # read at start; never from the file, never logged
    body = {}                             # merged into the JSON request
    cacert = "ca.pem"                     # or insecure = true
    direct_url = "http://{host}:8000/v1"  # the same model around the path, for added TTFT; {scheme} {host}
                                          # {port} {target} are the target's; it must pass --allow too
    connect_timeout_s = 5
    first_byte_timeout_s = 30
    idle_timeout_s = 30
    total_timeout_s = 30                  # the probe's cap; Prometheus' scrape timeout usually ends it sooner

Without a modules file there is one module, `openai`, with these defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tokenpath.errors import UsageError
from tokenpath.hostport import url_host
from tokenpath.monitor import config as moncfg
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.transport import parse_target
from tokenpath.tomlconfig import dataclass_from, read_toml
from tokenpath.wire.httpversion import DECLARED_VERSIONS, HttpVersion
from tokenpath.wire.request import DEFAULT_PROMPT

DEFAULT_MODULE = "openai"
MAX_MODULES = 256  # a label value each (the exporter's own probes_total): a bounded set
_PLACEHOLDER = re.compile(r"\{(scheme|host|port|target)\}")
_CHECK_URL = "http://module-check.invalid:8000/v1"  # a stand-in target for checking a module at start
_CHECK_URL_TLS = "https://module-check.invalid:8443/v1"  # the same for an HTTP/3 module (QUIC is always TLS)
# The versions a module may speak: every client's (DECLARED_VERSIONS), and HTTP/3, which the monitor's probe speaks
MODULE_VERSIONS = (*DECLARED_VERSIONS, HttpVersion.HTTP3)


@dataclass(frozen=True)
class ModuleSpec:
    api: str = "openai"  # wire/apis.py: the format, its route, body and first content frame
    accept_encoding: str | None = None
    http_version: str = HttpVersion.HTTP11.value  # "2" / "3": the probe speaks HTTP/2 / HTTP/3 (TargetSpec.http2/3)
    h2_window: str | int | None = None
    h3_window: str | int | None = None
    model: str = "tokenpath-stub"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int | None = 32
    headers: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    cacert: str | None = None
    insecure: bool = False
    direct_url: str | None = None  # a template: {scheme} {host} {port} {target}
    connect_timeout_s: float = 5.0
    first_byte_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 30.0


@dataclass(frozen=True)
class Module:
    name: str
    spec: ModuleSpec
    request: ProbeConfig  # the request shape, checked; its url is replaced by each probe's target

    def routes(self, target_url: str) -> dict[str, ProbeConfig]:
        """The probe configs of one /probe: `via` the target, and `direct` when the module has a direct_url.
        A URL that is not one is a UsageError (the caller's 400)."""
        target = parse_target(target_url)
        routes = {"via": replace(self.request, url=target_url)}
        if self.spec.direct_url is not None:
            direct = fill_direct_url(self.spec.direct_url, target_url)
            if parse_target(direct) == target:
                raise UsageError(f"module {self.name!r}: `direct_url` {direct} is the target itself")
            routes["direct"] = replace(self.request, url=direct)
        if self.request.http_version is HttpVersion.HTTP3:
            for route, cfg in routes.items():
                if parse_target(cfg.url).scheme != "https":
                    raise UsageError(f"module {self.name!r} speaks HTTP/3: the {route} URL must be https://")
        return routes


def fill_direct_url(template: str, target_url: str) -> str:
    """The template with the target's parts in it (no other expansion: a template is not format() code)."""
    target = parse_target(target_url)
    parts = {"scheme": target.scheme, "host": url_host(target.host), "port": str(target.port), "target": target_url}
    filled = _PLACEHOLDER.sub(lambda m: parts[m.group(1)], template)
    parse_target(filled)  # a URL, or a UsageError
    return filled


def build(name: str, spec: ModuleSpec, env: dict[str, str] | None = None) -> Module:
    """Check a module as the monitor checks a target (headers, key variable, CA file, timeouts, URLs)."""
    where = f"module {name!r}"
    if not moncfg.NAME.fullmatch(name):
        raise UsageError(f"module name {name!r}: use letters, digits and _.:- (at most 64)")
    if spec.direct_url is not None:
        leftover = _PLACEHOLDER.sub("", spec.direct_url)
        if "{" in leftover or "}" in leftover:
            raise UsageError(
                f"{where}: `direct_url` {spec.direct_url!r}: only {{scheme}} {{host}} {{port}} {{target}} are filled in"
            )
        try:
            fill_direct_url(spec.direct_url, _CHECK_URL)
        except UsageError as exc:
            raise UsageError(f"{where}: `direct_url`: {exc}") from None
    if spec.http_version not in MODULE_VERSIONS:
        known = ", ".join(MODULE_VERSIONS)
        raise UsageError(f"{where}: `http_version` must be one of {known}, not {spec.http_version!r}")
    shared = {f.name: getattr(spec, f.name) for f in fields(ModuleSpec) if f.name not in ("direct_url", "http_version")}
    version = HttpVersion(spec.http_version)
    http2, http3 = version is HttpVersion.HTTP2, version is HttpVersion.HTTP3
    check_url = _CHECK_URL_TLS if http3 else _CHECK_URL
    target = moncfg.TargetSpec(name=name, url=check_url, http2=http2, http3=http3, **shared)
    try:
        checked = moncfg.build(moncfg.MonitorSettings(), [target], env)
    except UsageError as exc:
        raise UsageError(f"{where}: {str(exc).removeprefix(f'target {name!r}: ')}") from None
    return Module(name, spec, checked.targets[0].routes["via"])


def default_modules(env: dict[str, str] | None = None) -> dict[str, Module]:
    return {DEFAULT_MODULE: build(DEFAULT_MODULE, ModuleSpec(), env)}


def load(path: str | Path, env: dict[str, str] | None = None) -> dict[str, Module]:
    return from_dict(read_toml(path, "modules file"), env, where=f"modules file {path}")


def from_dict(
    data: dict[str, Any], env: dict[str, str] | None = None, where: str = "modules file"
) -> dict[str, Module]:
    data = dict(data)
    tables = data.pop("modules", None)
    if data:
        raise UsageError(f"{where}: unknown key(s) {sorted(data)}; known: ['modules']")
    if not isinstance(tables, dict) or not tables:
        raise UsageError(f"{where}: no [modules.NAME] table: declare at least one module")
    if len(tables) > MAX_MODULES:
        raise UsageError(f"{where}: {len(tables)} modules; at most {MAX_MODULES}")
    modules = {}
    for name, table in tables.items():
        spec = dataclass_from(ModuleSpec, table, f"{where} [modules.{name}]")
        try:
            modules[name] = build(name, spec, env)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return modules
