"""Where the OTLP export goes: `otlp_endpoint` as a URL (checked when the config is read, used by otlp.py), and how
it may be printed."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from tokenpath.errors import UsageError

METRICS_PATH = "/v1/metrics"  # OTLP/HTTP's path for metrics, added to an endpoint given without a path


def endpoint_url(url: str) -> str:
    """The URL the export POSTs to: `url` as given when it has a path, else `url` + /v1/metrics (a collector's
    base address, as OTEL_EXPORTER_OTLP_ENDPOINT is spelled)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise UsageError(f"`otlp_endpoint` {shown(url)!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"`otlp_endpoint` {shown(url)!r}: expected http(s)://HOST[:PORT][/v1/metrics]")
    if parts.path in ("", "/"):
        parts = parts._replace(path=METRICS_PATH)
    return urlunsplit(parts)


def shown(url: str) -> str:
    """`url` as it may be printed: no user or password, no query (where a token could sit)."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "(an invalid URL)"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
