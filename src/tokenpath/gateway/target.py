"""What the gateway forwards as the request target: the origin-form path it routed on, never the raw bytes.

A check on the raw target and a verbatim forward disagree whenever the upstream decodes or resolves what the check
did not: `/v1/../internal/reset`, `/v1/%2e%2e/admin`, an encoded slash, or an absolute-form target that a member's
base path turns into `/apihttp://...`. So the target is parsed once, refused with 400 when it holds anything a
server might resolve differently, and the routed form is what goes upstream."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from tokenpath.errors import BadRequest

# Decoded, these change which resource a path names on some server (RFC 3986 dot segments, `\` on Windows-minded
# servers, NUL on C ones); encoded slashes are refused because servers disagree on whether they split segments.
_FORBIDDEN_DECODED = ("\\", "\x00")


class BadTarget(BadRequest):
    pass


def origin_form(target: str) -> str:
    """The target as `/path[?query]`, or BadTarget with the reason."""
    if target.startswith("/"):
        path, sep, query = target.partition("?")
    elif target[:8].lower().startswith(("http://", "https://")):
        parts = urlsplit(target)  # absolute-form (RFC 9112 3.2.2): route on its path, forward origin-form
        path, sep, query = parts.path or "/", "?" if parts.query else "", parts.query
        if parts.fragment or "#" in target:
            raise BadTarget("the request target has a fragment")
        if "@" in parts.netloc:  # RFC 9110 4.2.4: userinfo is deprecated in http(s) URIs (nginx: 400)
            raise BadTarget("the request target has user information (user:password@)")
    else:
        raise BadTarget("the request target must be a path (origin-form) or an absolute URL")
    if "#" in path or "#" in query:
        raise BadTarget("the request target has a fragment")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in target):
        raise BadTarget("the request target has a control character or a space")
    lowered = path.lower()
    if "%2f" in lowered or "%5c" in lowered:
        raise BadTarget("the request path has an encoded slash")
    for segment in path.split("/"):
        decoded = unquote(segment)
        if decoded in (".", ".."):
            raise BadTarget("the request path has a dot segment ('.' or '..', maybe percent-encoded)")
        if any(c in decoded for c in _FORBIDDEN_DECODED):
            raise BadTarget("the request path has a backslash or a NUL")
    return f"{path}{sep}{query}" if query else path
