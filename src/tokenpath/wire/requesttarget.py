"""What a request target may hold, checked in one place for those who send one (the probe, the monitor's exporter)
and those who route one (the gateway). Each function returns why a target is refused, or None; the caller raises
its own error with that reason (a BadRequest for the gateway, a UsageError for a URL the user gave).

    url_character_problem(url)          a character no URL may carry as written: space, control, non-ASCII
    path_character_problem(path_query)  a character outside RFC 3986's path and query, or a `%` that is not %XX
    resolvable_path_problem(path)       a path a server could resolve to another resource than the one it names
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

# RFC 3986 3.3 and 3.4: a path is pchars and `/`, a query pchars, `/` and `?`; pchar = unreserved / pct-encoded /
# sub-delims / `:` / `@`. Everything else must be percent-encoded to be sent.
_PATH_AND_QUERY = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
_UNPRINTABLE = re.compile(r"[^\x21-\x7e]")  # space, controls (tab, CR, LF, NUL, DEL) and everything past ASCII

# Decoded, these change which resource a path names on some server (RFC 3986 dot segments, `\` on Windows-minded
# servers, NUL on C ones); encoded slashes are refused because servers disagree on whether they split segments.
_FORBIDDEN_DECODED = ("\\", "\x00")


def url_character_problem(url: str) -> str | None:
    """The first character of `url` that no request may carry as written. Checked on the URL as given, before any
    parser sees it: urlsplit drops tabs and line breaks silently (so another URL than the one written is probed)."""
    m = _UNPRINTABLE.search(url)
    return None if m is None else _describe(m.group(), host_too=True)


def path_character_problem(path_query: str) -> str | None:
    """The first character of a path (and query) that RFC 3986 does not allow there, or a malformed %-escape."""
    m = _PATH_AND_QUERY.match(path_query)  # a `*` pattern: it always matches, if only the empty string
    end = m.end() if m else 0
    if end == len(path_query):
        return None
    if path_query[end] == "%":
        escape = path_query[end : end + 3]
        return f"it has {escape!r}, which is not a %-escape (% and two hex digits): write a literal % as %25"
    return _describe(path_query[end])


def _describe(char: str, host_too: bool = False) -> str:
    encoded = quote(char, safe="")
    if char == " " or ord(char) < 0x20 or ord(char) == 0x7F:
        return (
            f"it has {char!r}, a space or a control character, which a request line cannot carry: remove it, "
            f"or percent-encode it ({encoded})"
        )
    if ord(char) > 0x7E:
        host = " in a path or query; write a host name in its IDNA form (xn--...)" if host_too else ""
        return f"it has {char!r}, which is not ASCII: percent-encode its UTF-8 bytes ({encoded}){host}"
    return f"it has {char!r}, which RFC 3986 does not allow in a path or query: percent-encode it ({encoded})"


def resolvable_path_problem(path: str) -> str | None:
    """Why a server that decodes or normalises paths could serve another resource than `path` names (a dot
    segment, raw or percent-encoded in any case, or with a path parameter; an encoded slash or backslash; a
    backslash or NUL), or None."""
    lowered = path.lower()
    if "%2f" in lowered or "%5c" in lowered:
        return "the request path has an encoded slash"
    for segment in path.split("/"):
        decoded = unquote(segment)
        if decoded in (".", ".."):
            return "the request path has a dot segment ('.' or '..', maybe percent-encoded)"
        if unquote(segment.partition(";")[0]) in (".", ".."):  # Tomcat and kin resolve `..;` as `..`
            return "the request path has a dot segment with a parameter ('..;')"
        if any(c in decoded for c in _FORBIDDEN_DECODED):
            return "the request path has a backslash or a NUL"
    return None
