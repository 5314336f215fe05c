"""An HTTP/2 response's field block: checked as RFC 9113 asks of a client (`malformed`), then read as the HTTP/1.1
core's ResponseHead (`response_head`). Shared by every HTTP/2 client of ours through wire/h2client.py."""

from __future__ import annotations

from collections.abc import Sequence

import h2.exceptions
import h2.utilities

from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing

BODILESS_STATUS = (204, 304)  # answers without content, whatever their fields say (RFC 9110 15.3.5, 15.4.5)
RESPONSE_FLAGS = h2.utilities.HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=True, is_push_promise=False
)
TRAILER_FLAGS = RESPONSE_FLAGS._replace(is_trailer=True)


def malformed(
    headers: Sequence[tuple[bytes, bytes]], *, informational: bool = False, trailers: bool = False
) -> str | None:
    """Why a response's (or its trailers') field block is malformed (RFC 9113 8.1.1, 8.2, 8.3.2), or None: h2's
    field checks (lower-case names, no connection-specific fields, pseudo-fields), then a `:status` of three digits
    in 100-599 (RFC 9110 15), 1xx for an interim response."""
    try:
        fields = list(h2.utilities.validate_headers(headers, TRAILER_FLAGS if trailers else RESPONSE_FLAGS))
    except h2.exceptions.ProtocolError as exc:
        return str(exc)
    if trailers:
        return None
    status = next((v for n, v in fields if n == b":status"), b"")
    low, high = (100, 199) if informational else (100, 599)
    if len(status) != 3 or not status.isdigit() or not low <= int(status) <= high:
        return f":status {status.decode('latin-1')!r} is not a status code (three digits, {low}-{high})"
    return None


def response_head(headers: Sequence[tuple[bytes, bytes]], method: str) -> ResponseHead:
    """A response's HTTP/2 field block (checked by `malformed` first) as a ResponseHead. No content after HEAD or a
    204/304 (RFC 9110 6.4.1); otherwise DATA frames are a stream, whatever Content-Length."""
    status = 0
    fields = []
    for name, value in headers:
        if name == b":status":
            status = int(value)
        elif not name.startswith(b":"):
            fields.append((name.decode("latin-1"), value.decode("latin-1")))
    has_length = any(n == "content-length" for n, _ in fields)
    if method == "HEAD" or status in BODILESS_STATUS:
        framing = Framing.NONE
    else:
        framing = Framing.LENGTH if has_length else Framing.CHUNKED
    return ResponseHead(status, "2", tuple(fields), framing, keep_alive=True)
