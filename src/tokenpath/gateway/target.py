"""What the gateway forwards as the request target: the origin-form path it routed on, never the raw bytes.

A check on the raw target and a verbatim forward disagree whenever the upstream decodes or resolves what the check
did not: `/v1/../internal/reset`, `/v1/%2e%2e/admin`, an encoded slash, or an absolute-form target that a member's
base path turns into `/apihttp://...`. So the target is parsed once, refused with 400 when it holds anything a
server might resolve differently, and the routed form is what goes upstream."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from tokenpath.errors import BadRequest
from tokenpath.wire.requesttarget import resolvable_path_problem

_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")  # one C-level search per request, not a Python call per character


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
    if _CONTROL_OR_SPACE.search(target):
        raise BadTarget("the request target has a control character or a space")
    problem = resolvable_path_problem(path)  # shared with the monitor's exporter (monitor/allowlist.py)
    if problem is not None:
        raise BadTarget(problem)
    return f"{path}{sep}{query}" if query else path
