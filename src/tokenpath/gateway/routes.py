"""Which streaming API a request's path is, and the model its path names (Gemini, Bedrock): the routes of
wire.apis.SPECS, matched on the routed origin-form path (gateway.target), never on the raw target.

Everything under /v1/ is forwarded as before (models lists, embeddings, ...); the other formats' routes are served
exactly, nothing else beside them (a gateway that forwards any path forwards /admin too)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from tokenpath.wire.apis import SPECS, Api, ApiSpec

OPEN_PREFIX = "/v1/"  # forwarded whatever follows (the OpenAI-style API surface)
# A model in a path is one segment: no '/', so a path cannot name a model and another resource at once.
_MODEL = r"(?P<model>[^/]+?)"


@dataclass(frozen=True, slots=True)
class RouteMatch:
    api: Api | None  # None: a /v1/ path that is not a streaming route (forwarded, relayed by its content type)
    model: str | None = None  # the model the path names, percent-decoded (boto3 sends `...-v1%3A0`)


def _pattern(route: str) -> re.Pattern[str]:
    path = route.partition("?")[0]  # Gemini's ?alt=sse is the client's to send; the path is what routes
    before, _, after = path.partition("{model}")
    body = re.escape(before) + (_MODEL + re.escape(after) if "{model}" in path else "")
    return re.compile(body + r"\Z")


def routes(specs: Iterable[ApiSpec]) -> tuple[tuple[str, Api], ...]:
    """Every format's route, then the other documented paths of the same APIs (ApiSpec.aliases)."""
    listed = tuple(specs)
    return (*((s.route, s.api) for s in listed), *((alias, s.api) for s in listed for alias in s.aliases))


_ROUTES: tuple[tuple[re.Pattern[str], Api], ...] = tuple(
    (_pattern(route), api) for route, api in routes(SPECS.values())
)


def served(specs: Iterable[ApiSpec]) -> str:
    """The paths the gateway serves, for an error that says so: /v1/*, then each route outside it."""
    return "/v1/*, " + ", ".join(s.route.partition("?")[0] for s in specs if not s.route.startswith(OPEN_PREFIX))


SERVED = served(SPECS.values())


def match_route(target: str) -> RouteMatch | None:
    """The route of an origin-form target (`/path[?query]`), or None when the gateway serves no such path."""
    path = target.partition("?")[0]
    for pattern, api in _ROUTES:
        m = pattern.match(path)
        if m is not None:
            model = m.groupdict().get("model")
            return RouteMatch(api, unquote(model) if model is not None else None)
    if path.startswith(OPEN_PREFIX):
        return RouteMatch(None)
    return None
