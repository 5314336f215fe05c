"""An error answered before a response head (a whole JSON response), in each API format's own shape, as its
provider documents it and its SDK raises on: what the stub answers a bad request with and what the gateway and the
servers answer a request they refuse or cannot serve with. Each shape is its format's (ApiSpec.error_reply, cited in
wire/formats/); after the head a stream ends with the format's error *frame* instead (ApiSpec.error_frame).
"""

from __future__ import annotations

from tokenpath.wire.apis import Api, spec_or_default
from tokenpath.wire.apispec import ErrorReply


def error_reply(api: Api | None, status: int, message: str, code: str | None = None) -> ErrorReply:
    """`message` (and, where the format has one, `code`) as `api` answers an error of `status`; None: the default
    format's (OpenAI's)."""
    return spec_or_default(api).error_reply(status, message, code)
