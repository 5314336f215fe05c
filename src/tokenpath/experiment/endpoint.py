"""A real endpoint behind every path of an experiment: `upstream = "$TOKENPATH_URL"` (or an [upstream] table).

The stub's audit is what lets a matrix row say what the path added to each write; a real endpoint keeps no such log.
So against an endpoint a row says what the path did relative to the direct path in the same round (frames per read,
and TTFT minus the direct stream's TTFT of that round), no run is excluded for pacing, and every rendering says so.
Certification and the controls stay on the stub: they prove the instrument, which an endpoint cannot.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenpath.errors import UsageError
from tokenpath.experiment.pairs import RULE
from tokenpath.origins.catalogue import MODEL_ALIAS
from tokenpath.origins.catalogue import lookup as lookup_origin
from tokenpath.origins.process import PROMPT
from tokenpath.probe.transport import Target, parse_target
from tokenpath.proxies.base import Endpoint, UpstreamTLS
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.request import DEFAULT_PROMPT, check_header, refuse_second_credential

NO_AUDIT = (
    "no stub audit against a real endpoint: no run is excluded for pacing, and added TTFT is each stream's TTFT "
    "minus the direct stream's TTFT in the same round"
)
PAIRED = (
    "a real origin started for the run, no stub audit: rounds run direct, path, direct, ... serially, and a path's "
    f"added TTFT is its TTFT minus the mean of the two direct streams around it; {RULE}"
)
DEFAULT_MAX_TOKENS = 64  # every stream costs tokens: bounded unless the file says otherwise
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
KEYS = {"url", "api_key_env", "model", "prompt", "max_tokens", "headers", "cacert", "kind"}
# A real origin started for the run (`kind`, origins/catalogue.py): the matrix starts it, knows its URL and model, and
# samples deterministically so every stream of a round carries the same tokens (experiment/pairs.py pairs them).
KIND_KEYS = {"kind", "prompt", "max_tokens"}
SAMPLING: tuple[tuple[str, object], ...] = (("seed", 1), ("temperature", 0))
UNSTARTED = "http://127.0.0.1:1"  # a started origin's URL replaces it (EndpointSpec.started)


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    declared: str  # as written in the file, e.g. "$TOKENPATH_URL" (results keep this and the origin, never a key)
    target: Target  # the chat completions URL, resolved
    model: str
    api_key_env: str | None = None
    prompt: str = DEFAULT_PROMPT
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    headers: tuple[tuple[str, str], ...] = ()
    cacert: str | None = None  # trust this CA for an https endpoint (a private one); else the system store
    kind: str | None = None  # a real origin the matrix starts (origins/catalogue.py), paired runs; None: a URL
    origin_info: tuple[tuple[str, object], ...] = ()  # its version, model, build flags and settings, once started

    @property
    def note(self) -> str:
        """What its rows can and cannot say."""
        return PAIRED if self.kind else NO_AUDIT

    @property
    def sampling(self) -> tuple[tuple[str, object], ...]:
        """Fixed seed and temperature 0 for a started origin (the token count repeats); a URL's own defaults else."""
        return SAMPLING if self.kind else ()

    def route(self, api: Api) -> str:
        """The path a stream of `api` takes: a started origin's route for that format (UsageError for one it does
        not speak); a URL's own path, whatever the format (a URL endpoint streams the default format only)."""
        if not self.kind:
            return self.target.path
        origin = lookup_origin(self.kind)
        if api not in origin.apis:
            speaks = ", ".join(a.value for a in origin.apis)
            raise UsageError(f"[conditions] api {api.value}: {self.kind} does not speak it (it speaks {speaks})")
        return SPECS[api].path(self.model)

    def for_api(self, url: str, api: Api) -> str:
        """`url` (this endpoint's, direct or through a path) on the route of `api`; a URL endpoint's as it is."""
        return url.removesuffix(self.target.path) + self.route(api) if self.kind else url

    def started(self, url: str, info: dict[str, object]) -> EndpointSpec:
        """This spec with the started origin's address and what it is."""
        return replace(self, target=parse_target(url + self.target.path), origin_info=tuple(info.items()))

    @property
    def label(self) -> str:
        return f"origin {self.kind}" if self.kind else f"endpoint {self.target.origin}"

    @property
    def https(self) -> bool:
        return self.target.scheme == "https"

    @property
    def url(self) -> str:
        return self.target.origin + self.target.path

    @property
    def api_base_path(self) -> str:
        """The API base an AI gateway is configured with, e.g. /v1 (the chat path and any query removed)."""
        return self.target.path.split("?")[0].removesuffix("/chat/completions")

    def api_key(self) -> str | None:
        """Read when each stream is made, so the key lives in the environment only."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def upstream(self) -> Endpoint:
        return Endpoint(self.target.host, self.target.port)

    def upstream_tls(self) -> UpstreamTLS | None:
        return UpstreamTLS(self.target.host, Path(self.cacert) if self.cacert else None) if self.https else None

    def via(self, origin: str) -> str:
        """The same request through a proxy listening at origin: the proxy forwards the path as it is."""
        return origin + self.target.path

    def to_json(self) -> dict[str, Any]:
        return {
            "declared": self.declared,
            "origin": self.target.origin,
            "path": self.target.path,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "max_tokens": self.max_tokens,
            "headers": [k for k, _ in self.headers],
            "cacert": self.cacert,
            **({"kind": self.kind, "origin_server": dict(self.origin_info)} if self.kind else {}),
            "audited": False,
            "note": self.note,
        }


def parse(value: Any) -> EndpointSpec:
    """`upstream = "URL"` or `[upstream]` with url, model, api_key_env, prompt, max_tokens, headers, cacert."""
    table: dict[str, Any] = {"url": value} if isinstance(value, str) else value
    if not isinstance(table, dict):
        raise UsageError('upstream must be a URL string or an [upstream] table with url = "..."')
    unknown = set(table) - KEYS
    if unknown:
        raise UsageError(f"[upstream]: unknown keys {sorted(unknown)}; known: {sorted(KEYS)}")
    if "kind" in table:
        return _kind(table)
    declared = table.get("url")
    if not isinstance(declared, str) or not declared:
        raise UsageError('[upstream] needs url = "https://..." (or "$TOKENPATH_URL")')
    url = expand(declared, "[upstream] url")
    target = parse_target(url)  # a base URL gets /chat/completions, as for `tokenpath probe`
    for key in ("model", "api_key_env", "prompt", "cacert"):
        if key in table and not isinstance(table[key], str):
            raise UsageError(f"[upstream] {key} must be a string")
    env = table.get("api_key_env")
    if env and not os.environ.get(env):
        raise UsageError(f"[upstream] api_key_env {env}: that environment variable is not set")
    max_tokens = table.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise UsageError("[upstream] max_tokens must be a whole number >= 1")
    headers = table.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise UsageError("[upstream] headers must be a table of strings")
    for name, header_value in headers.items():
        check_header(str(name), header_value)
    if env:  # the key goes in its format's header: one of these beside it would send two credentials
        refuse_second_credential(((str(k), v) for k, v in headers.items()), Api)
    cacert = table.get("cacert")
    if cacert is not None:
        cacert = str(Path(expand(cacert, "[upstream] cacert")).resolve())
        if not Path(cacert).is_file():
            raise UsageError(f"[upstream] cacert {cacert}: no such file")
        if target.scheme != "https":
            raise UsageError("[upstream] cacert is for an https url")
    model = expand(table["model"], "[upstream] model") if table.get("model") else None
    if not model:
        raise UsageError('[upstream] needs model = "..." (the endpoint\'s model name)')
    return EndpointSpec(
        declared=declared,
        target=target,
        model=str(model),
        api_key_env=env or None,
        prompt=str(table.get("prompt", DEFAULT_PROMPT)),
        max_tokens=max_tokens,
        headers=tuple((str(k), v) for k, v in headers.items()),
        cacert=cacert,
    )


def _kind(table: dict[str, Any]) -> EndpointSpec:
    """`[upstream] kind = "llama-server"`: a real origin started for the run. A missing build is one line that says
    how to make it, before anything starts."""
    others = sorted(set(table) - KIND_KEYS)
    if others:
        raise UsageError(f"[upstream] kind: the matrix starts it and knows its url and model; not {others}")
    kind = table["kind"]
    if not isinstance(kind, str):
        raise UsageError("[upstream] kind must be a string")
    origin = lookup_origin(kind)  # a UsageError that lists them
    missing = origin.missing_reason()
    if missing:
        raise UsageError(f"[upstream] kind {kind}: {missing}")
    max_tokens = table.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise UsageError("[upstream] max_tokens must be a whole number >= 1")
    prompt = table.get("prompt", PROMPT)  # a count: the same answer's length every time at temperature 0
    if not isinstance(prompt, str):
        raise UsageError("[upstream] prompt must be a string")
    target = parse_target(UNSTARTED)
    return EndpointSpec(f"kind = {kind}", target, MODEL_ALIAS, prompt=prompt, max_tokens=max_tokens, kind=kind)


def expand(text: str, where: str) -> str:
    """$NAME and ${NAME} from the environment; an unset one is an error naming it (never an empty URL)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        found = os.environ.get(name)
        if not found:
            raise UsageError(f"{where}: ${name} is not set (export it, e.g. {name}=https://api.example.com/v1)")
        return found

    return _VARIABLE.sub(value, text)
