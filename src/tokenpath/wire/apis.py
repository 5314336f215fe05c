"""The registry of the streaming API formats tokenpath speaks: one ApiSpec each (wire/apispec.py), declared in its
own module under wire/formats/, gathered here. The stub (which writes them), the probe/load/monitor clients (which
read them), the gateway (which relays them) and every help text ask here; nothing else lists the formats.

Adding a format: its Api member (wire/apispec.py), its module in wire/formats/ with its SPEC, its line below, and
the stub's writer (stub/formats/). Routes are the providers' own documented paths; `{model}` is filled with the
request's model.
"""

from __future__ import annotations

from tokenpath.wire.apispec import Api, ApiSpec, Framing, WireFrame
from tokenpath.wire.eventstream import EventMessage
from tokenpath.wire.formats import anthropic, bedrock, gemini, ollama, openai, realtime, responses
from tokenpath.wire.formats.shared import shape_of

__all__ = [
    "DEFAULT_API",
    "SPECS",
    "Api",
    "ApiSpec",
    "Framing",
    "api_names",
    "parse_api",
    "recognise",
    "spec_named",
    "spec_or_default",
]

# The order counts: help texts list the formats in it, recognise() tries them in it, and the first format declared
# with a Content-Type is the one a stream of that type is read as when its path names no format (the gateway).
SPECS: dict[Api, ApiSpec] = {
    spec.api: spec
    for spec in (
        openai.SPEC,
        responses.SPEC,
        realtime.SPEC,
        anthropic.SPEC,
        gemini.SPEC,
        bedrock.SPEC,
        ollama.SPEC,
    )
}
# What a request that names no format (an error on an unknown path, a /v1/ path past the known routes) is in.
DEFAULT_API = Api.OPENAI


def spec_or_default(api: Api | None) -> ApiSpec:
    return SPECS[DEFAULT_API if api is None else api]


def spec_named(name: str) -> ApiSpec | None:
    """The spec whose Api value is `name` (as a config file or a metric label spells it), or None."""
    return next((spec for spec in SPECS.values() if spec.api.value == name), None)


def api_names() -> str:
    """The formats' --api values, for a help text or an error: `openai, responses, ...`."""
    return ", ".join(api.value for api in SPECS)


def parse_api(text: str) -> Api:
    """An --api value, or a ValueError that lists the accepted ones."""
    spec = spec_named(text.strip().lower())
    if spec is None:
        raise ValueError(f"unknown API format {text!r}; expected one of: {api_names()}")
    return spec.api


def recognise(frame: WireFrame) -> Api | None:
    """The API format a frame read as another one's is in, when its shape says so: tried in registry order against
    the formats of the same kind of framing (a binary message is never a JSON-text format's, nor the reverse)."""
    shape = shape_of(frame)
    binary = isinstance(frame, EventMessage)
    for spec in SPECS.values():
        if spec.framing.binary is binary and spec.recognises(shape):
            return spec.api
    return None
