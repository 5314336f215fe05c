"""Which proxy answered (a header it writes about itself, or --proxy), and the config line that fixes what was seen
on it, with where that line is documented. Pure: tables and lookups.

Every line here is a catalogue fix variant (proxies/*.py) that the matrix measured streaming where that proxy held
the stream that way (docs/findings.md, the section named beside it), for the causes it was measured on and no
others: a line that does not fix what was seen is not printed, so applying a line and diagnosing again never gets
the same line back (a path that then streams gets none). A proxy with no measured line for what was seen gets the
rule measured and what changes that rule in any proxy; a path that names no proxy gets the same, never another
proxy's name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpath.diagnose.classify import Cause, Verdict
from tokenpath.diagnose.shape import size
from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies.catalogue import catalogue, parse_ref

NGINX_PROXY = "https://nginx.org/en/docs/http/ngx_http_proxy_module.html#proxy_buffering"
HAPROXY_NO_DELAY = "https://docs.haproxy.org/2.6/configuration.html#4.2-option%20http-no-delay"
LIGHTTPD_STREAM = "https://redmine.lighttpd.net/projects/lighttpd/wiki/Server_stream-response-bodyDetails"
TRAEFIK_COMPRESS = "https://doc.traefik.io/traefik/middlewares/http/compress/#excludedcontenttypes"
# Envoy's zstd compressor handles only the Finish state (ZSTD_e_end); a Flush compresses with ZSTD_e_continue.
ENVOY_ZSTD = (
    "https://github.com/envoyproxy/envoy/blob/main/source/common/compression/zstd/compressor/"
    "zstd_compressor_impl_base.cc"
)
EXPRESS_COMPRESSION = "https://github.com/expressjs/compression#server-sent-events"
STARLETTE_GZIP = "https://github.com/Kludex/starlette/pull/2871"  # 0.46.0: "GZipMiddleware: Don't compress on SSE"


@dataclass(frozen=True, slots=True)
class MeasuredFix:
    """A catalogue variant measured to stream where its proxy held the stream as `causes` say."""

    proxies: tuple[str, ...]  # catalogue entries it applies to; the first is the one whose variant it is
    variant: str  # that entry's fix variant
    causes: frozenset[Cause]
    source: str  # the documentation of the line
    measured: str  # where the matrix measured it (docs/findings.md)
    encodings: frozenset[str] = frozenset()  # COMPRESSION_HOLD: only for these Content-Encodings (empty: any)
    line: str = ""  # the line when it is not the variant's own (a release to upgrade to)
    context: str = ""  # what to read with the line


FIXES: tuple[MeasuredFix, ...] = (
    MeasuredFix(
        ("nginx",),
        "proxy_buffering_off",
        frozenset({Cause.WHOLE_RESPONSE, Cause.BYTE_QUANTIZED}),
        NGINX_PROXY,
        "docs/findings.md §1, §4, §9, §10: the whole response and ~4 KB bursts, then fpr 1.00",
    ),
    MeasuredFix(
        ("haproxy", "haproxy3"),
        "http_no_delay",
        frozenset({Cause.TIME_QUANTIZED, Cause.BYTE_QUANTIZED}),
        HAPROXY_NO_DELAY,
        "docs/findings.md §2, §8: ~183 ms bursts (a full segment over veth), then fpr 1.00",
    ),
    MeasuredFix(
        ("lighttpd",),
        "stream_response_body",
        frozenset({Cause.WHOLE_RESPONSE}),
        LIGHTTPD_STREAM,
        "docs/findings.md §4, §12: the whole response, then fpr 1.00",
    ),
    MeasuredFix(
        ("traefik",),
        "compress_no_sse",
        frozenset({Cause.COMPRESSION_HOLD}),
        TRAEFIK_COMPRESS,
        "docs/findings.md §10: 3.3.2's br and zstd held the first ~1 KB; tests/e2e/test_diagnose_by_hand.py",
        encodings=frozenset({"br", "zstd"}),
        context="or Traefik 3.7, whose compress streams",
    ),
    MeasuredFix(
        ("envoy",),
        "compressor",
        frozenset({Cause.COMPRESSION_HOLD}),
        ENVOY_ZSTD,
        "docs/findings.md §10: zstd held the whole response, gzip and brotli streamed",
        encodings=frozenset({"zstd"}),
        context="gzip (or brotli) in place of the zstd compressor_library, which never flushes mid-stream",
    ),
    MeasuredFix(
        ("express",),
        "flush",
        frozenset({Cause.COMPRESSION_HOLD}),
        EXPRESS_COMPRESSION,
        "docs/findings.md §10: compression() held the whole response, with res.flush() it streamed",
        context="res.flush() after each res.write(event)",
    ),
    MeasuredFix(
        ("starlette",),
        "gzip",
        frozenset({Cause.COMPRESSION_HOLD}),
        STARLETTE_GZIP,
        "docs/findings.md §10: GZipMiddleware held 0.45.3's stream, 0.46.0 and later stream",
        encodings=frozenset({"gzip"}),
        line="starlette>=0.46",
        context="GZipMiddleware then leaves text/event-stream uncompressed",
    ),
)

# What changes each rule in any proxy: for a path that names no proxy, or one with no measured line for it.
GENERIC: dict[Cause, str] = {
    Cause.WHOLE_RESPONSE: (
        "turn response buffering off for this route, so the proxy passes the body on as it arrives (a larger "
        "buffer is no fix: it holds any stream shorter than itself)"
    ),
    Cause.BYTE_QUANTIZED: (
        "make the proxy write each chunk as it arrives (a smaller buffer is no fix: it still holds events smaller "
        "than itself)"
    ),
    Cause.TIME_QUANTIZED: (
        "turn off the proxy's write coalescing for this route (TCP_NODELAY without MSG_MORE or TCP_CORK, or a "
        "flush interval of 0)"
    ),
    Cause.FIRST_HOLD: (
        "exempt text/event-stream from what waits for the first bytes (a minimum size, content sniffing)"
    ),
    Cause.COMPRESSION_HOLD: (
        "leave text/event-stream out of the proxy's compression, or have it flush the compressor after each event"
    ),
}


@dataclass(frozen=True, slots=True)
class Fix:
    proxy: str
    line: str  # as the user writes it in that proxy's config
    source: str  # the documentation of that line
    measured: str  # where the matrix measured that it fixes this
    context: str = ""


def _family(name: str) -> str:
    """The catalogue entry a --proxy value or a recognised name stands for (traefik@3.3.2 -> traefik)."""
    return parse_ref(name).name


def proxy_names() -> tuple[str, ...]:
    """What --proxy takes: every catalogue entry (NAME@VERSION of a versioned one too)."""
    return tuple(catalogue())


def check_proxy(name: str | None) -> None:
    if name is None:
        return
    try:
        family = _family(name)
    except UsageError:
        family = ""
    if family not in catalogue():
        raise UsageError(f"`proxy` {name!r}: not in the catalogue; known: {', '.join(proxy_names())}")


def variant_line(proxy: str, variant: str) -> str:
    """The config line of a catalogue variant: what the matrix measured."""
    entry = catalogue().get(proxy)
    if entry is None:
        raise ProxyError(f"no proxy {proxy!r} in the catalogue")
    for v in entry.variants:
        if v.name == variant:
            return v.line
    raise ProxyError(f"{proxy} has no variant {variant!r}")


def fix_for(proxy: str, verdict: Verdict) -> Fix | None:
    """The measured line that fixes `verdict` on `proxy`, or None: a line measured on other causes (or other
    encodings) is not a fix for this one."""
    family = _family(proxy)
    for fix in FIXES:
        if family not in fix.proxies or verdict.cause not in fix.causes:
            continue
        if fix.encodings and (verdict.encoding or "") not in fix.encodings:
            continue
        line = fix.line or variant_line(fix.proxies[0], fix.variant)
        return Fix(family, line, fix.source, fix.measured, fix.context)
    return None


def generic_fix(verdict: Verdict) -> str | None:
    """What changes the measured rule in any proxy, with the rule's own figures."""
    advice = GENERIC.get(verdict.cause)
    if advice is None:
        return None
    if verdict.cause is Cause.TIME_QUANTIZED and verdict.period_ms is not None:
        return f"the path holds writes up to ~{verdict.period_ms:.0f} ms: {advice}"
    if verdict.cause in (Cause.BYTE_QUANTIZED, Cause.FIRST_HOLD) and verdict.size_bytes is not None:
        return f"the path waits for ~{size(verdict.size_bytes)}: {advice}"
    return advice


# What each catalogue entry writes into the head of an answer it forwards, by header name and value. HAProxy,
# Traefik, the Node.js peers, TensorZero and tokenpath's gateway write nothing that names them, and Starlette's
# `server: uvicorn` serves any ASGI app: name them with --proxy.
_SIGNS: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (proxy, re.compile(name, re.I), re.compile(value, re.I))
    for proxy, name, value in (
        ("nginx", r"^server$", r"^(nginx|openresty)\b"),
        ("envoy", r"^server$", r"^envoy\b"),
        ("envoy", r"^x-envoy-upstream-service-time$", r"."),
        ("caddy", r"^server$", r"^caddy\b"),
        ("caddy", r"^via$", r"\bcaddy\b"),
        ("apache2", r"^server$", r"^apache\b"),
        ("lighttpd", r"^server$", r"^lighttpd\b"),
        ("h2o", r"^server$", r"^h2o\b"),
        ("varnish", r"^via$", r"\bvarnish\b"),
        ("varnish", r"^x-varnish$", r"."),
        ("squid", r"^via$", r"\(squid/"),
        ("squid", r"^server$", r"^squid\b"),
        ("traefik", r"^via$", r"\btraefik\b"),
        ("haproxy", r"^via$", r"\bhaproxy\b"),
        ("haproxy", r"^server$", r"^haproxy\b"),
        ("litellm", r"^x-litellm-", r"."),
        ("portkey", r"^x-portkey-", r"."),
        ("express", r"^x-powered-by$", r"^express\b"),  # Express's default; a proxy in front wins
    )
)


@dataclass(frozen=True, slots=True)
class Recognised:
    proxy: str
    by: str  # the header as it came, e.g. "Server: nginx/1.22.1", or "--proxy"


def recognise(headers: Sequence[tuple[str, str]]) -> Recognised | None:
    """The proxy a response head names, or None. The first matching sign wins, in _SIGNS' order."""
    for proxy, name, sign in _SIGNS:
        for key, value in headers:
            if name.search(key) and sign.search(value.strip()):
                return Recognised(proxy, f"{key}: {value.strip()}")
    return None
