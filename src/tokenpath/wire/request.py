"""Builds HTTP/1.1 requests by hand, so the probe knows exactly which bytes it wrote and when: the smallest valid
streaming request of each API format (its spec's stream_body, headers and key header; wire/formats/ cites each), on
that format's route. The stream id rides in the X-Tokenpath-Stream header always, and in the body where the format
has a user field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote

from tokenpath.errors import UsageError
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.apispec import StreamAsk
from tokenpath.wire.framing import request_head

STREAM_HEADER = "X-Tokenpath-Stream"
DEFAULT_PROMPT = "Count slowly from one to one hundred and say nothing else."


def stream_body(api: Api, *, model: str, prompt: str, max_tokens: int | None, stream_id: str) -> dict[str, Any]:
    """The smallest valid streaming request body of `api`, with the stream id where the format has a user field."""
    return SPECS[api].stream_body(StreamAsk(model, prompt, max_tokens, stream_id))


def api_headers(api: Api, stream_id: str, api_key: str | None) -> list[tuple[str, str]]:
    """The stream id header, the format's own required headers, and the API key where the format expects it."""
    spec = SPECS[api]
    headers = [(STREAM_HEADER, stream_id), *spec.headers]
    if api_key:
        headers.append(spec.credential(api_key))
    return headers


def refuse_second_credential(headers: Iterable[tuple[str, str]], apis: Iterable[Api]) -> None:
    """A header named as the key's header of one of `apis` (Authorization, x-api-key, x-goog-api-key) beside an API
    key: both were sent, two credentials. Refused, the caller's words naming where."""
    key_headers = {SPECS[api].credential("")[0].lower() for api in apis}
    for name, _ in headers:
        if name.lower() in key_headers:
            raise UsageError(f"{name} is given twice: as a header and by the API key; keep one")


def endpoint_target(base: str, api: Api, model: str) -> str:
    """The request target for `api` from a base URL's path and query (`""`, `/v1`, `/v1beta`, a gateway's prefix)
    or a full endpoint path, which is kept: one that already ends as the format's route does (`/v1/messages`,
    `:streamGenerateContent`, `/converse-stream`, `/api/chat`). A base that ends with the route's first segment
    (`/v1`) does not get it twice. The model is percent-encoded into the path (Bedrock ids hold `:`), and the
    route's query (Gemini's `alt=sse`) joins the URL's own (an API `key=`)."""
    path, _, query = base.partition("?")
    path = path.rstrip("/")
    route = SPECS[api].route
    route_path, _, route_query = route.partition("?")
    ending = route_path.rsplit("/", 1)[-1].replace("{model}", "")  # "messages", ":streamGenerateContent", ...
    if not path.endswith(ending):
        first = "/" + route_path.split("/")[1]
        filled = route_path.replace("{model}", quote(model, safe=""))
        path += filled.removeprefix(first) if path.endswith(first) else filled
    route_query = route_query.replace("{model}", quote(model, safe=""))  # Realtime's ?model=
    have = {name for name, _ in parse_qsl(query, keep_blank_values=True)}
    extra = [pair for pair in route_query.split("&") if pair and pair.split("=", 1)[0] not in have]
    query = "&".join(q for q in (*extra, query) if q)
    return f"{path}?{query}" if query else path


def build_request(
    method: str,
    host: str,
    target: str,
    *,
    body: bytes = b"",
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = False,
) -> bytes:
    fields = [("Host", host)]
    names = set()
    for name, value in headers:
        check_header(name, value)
        names.add(name.lower())
        fields.append((name, value))
    if "connection" not in names:
        fields.append(("Connection", "keep-alive" if keep_alive else "close"))
    if body or method in ("POST", "PUT", "PATCH"):
        fields.append(("Content-Length", str(len(body))))
    return request_head(method, target, fields) + body


def build_json_request(
    host: str,
    target: str,
    payload: Mapping[str, Any],
    *,
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = False,
    accept: str = "text/event-stream",
) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    all_headers = [("Content-Type", "application/json"), ("Accept", accept), *headers]
    return build_request("POST", host, target, body=body, headers=all_headers, keep_alive=keep_alive)


# What an API key and a URL may hold to go into a request head as they are (`Bearer KEY`, the request line): visible
# ASCII. A space, a control character (CR LF would start a header of its own) or a non-ASCII one (a head is Latin-1)
# is a key pasted wrong (a CR from a CRLF .env file, an en dash), or a path to percent-encode.
VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+\Z")


def check_key(where: str, key: str) -> None:
    """An API key a header can carry as it is (the gateway's pool keys, the monitor's): a UsageError naming `where`
    and the first bad character's position, never the key."""
    if VISIBLE_ASCII.match(key):
        return
    at = next(i for i, c in enumerate(key) if not VISIBLE_ASCII.match(c))
    raise UsageError(
        f"{where}: the key has a space, a control character or a non-ASCII character (at position {at + 1} of "
        f"{len(key)}), which a request header cannot carry as it is: set the key as issued (its value is not shown)"
    )


def check_header(name: str, value: str) -> None:
    if not name or any(c in name for c in " \t\r\n:"):
        raise UsageError(f"invalid header name {name!r}")
    if "\r" in value or "\n" in value:
        raise UsageError(f"header {name} has a line break in its value")


def parse_header_arg(arg: str) -> tuple[str, str]:
    """`NAME:VALUE` (as curl's -H takes it) → (name, value)."""
    name, sep, value = arg.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"header {arg!r} is not NAME:VALUE")
    name, value = name.strip(), value.strip()
    check_header(name, value)
    return name, value
