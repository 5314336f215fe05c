"""Which proxy answered (its `Server` / `Via` headers, or --proxy), and the config line that fixes a cause on it,
with where that line is documented. Pure: a table and two lookups.

The lines are the catalogue's fix variants where it has one (src/tokenpath/proxies/*.py, measured in
docs/findings.md: nginx `proxy_buffering off`, HAProxy `option http-no-delay`, Caddy `flush_interval -1`, Apache
`flushpackets=on`); tests/diagnose/test_fixes.py keeps the two equal. The compression lines undo the catalogue's
compression variants (the way people turn it on); those measured to hold in docs/findings.md §10 (Envoy's zstd
compressor, Express `compression()` without `res.flush()`, Starlette's GZipMiddleware before 0.46) name the fix the
same table measured streaming (gzip/brotli, `res.flush()`, Starlette 0.46).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpath.diagnose.classify import Cause

# The catalogue names diagnose recognises (proxies/catalogue.py): the six the issue asks a fix line for (one for
# every hold), and the application servers whose compression middleware holds a stream (a line for that hold only).
REVERSE_PROXIES = ("nginx", "haproxy", "caddy", "traefik", "envoy", "apache2")
APPLICATIONS = ("express", "starlette")
PROXIES = REVERSE_PROXIES + APPLICATIONS


@dataclass(frozen=True, slots=True)
class Fix:
    proxy: str
    line: str  # as the user writes it in that proxy's config
    source: str  # the documentation of that line


NGINX_PROXY = "https://nginx.org/en/docs/http/ngx_http_proxy_module.html#proxy_buffering"
NGINX_GZIP = "https://nginx.org/en/docs/http/ngx_http_gzip_module.html#gzip_types"
HAPROXY_NO_DELAY = "https://docs.haproxy.org/2.6/configuration.html#4.2-option%20http-no-delay"
HAPROXY_COMPRESSION = "https://docs.haproxy.org/2.6/configuration.html#4.2-compression"
CADDY_FLUSH = "https://caddyserver.com/docs/caddyfile/directives/reverse_proxy#streaming"
CADDY_ENCODE = "https://caddyserver.com/docs/caddyfile/directives/encode"
TRAEFIK_FORWARDING = "https://doc.traefik.io/traefik/routing/services/#response-forwarding"
TRAEFIK_COMPRESS = "https://doc.traefik.io/traefik/middlewares/http/compress/"
ENVOY_BUFFER = "https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/buffer_filter"
ENVOY_COMPRESSOR = "https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/compressor_filter"
# Its zstd compressor handles only the Finish state (ZSTD_e_end); a Flush compresses with ZSTD_e_continue.
ENVOY_ZSTD = (
    "https://github.com/envoyproxy/envoy/blob/main/source/common/compression/zstd/compressor/"
    "zstd_compressor_impl_base.cc"
)
APACHE_PROXYPASS = "https://httpd.apache.org/docs/2.4/mod/mod_proxy.html#proxypass"
APACHE_DEFLATE = "https://httpd.apache.org/docs/2.4/mod/mod_deflate.html"
EXPRESS_COMPRESSION = "https://github.com/expressjs/compression#server-sent-events"
STARLETTE_GZIP = "https://github.com/Kludex/starlette/pull/2871"  # 0.46.0: "GZipMiddleware: Don't compress on SSE"

# Every cause a proxy's buffering produces (a hold of bytes, on a timer, or of the first event / head).
_HOLDS = (Cause.WHOLE_RESPONSE, Cause.BYTE_QUANTIZED, Cause.TIME_QUANTIZED, Cause.FIRST_EVENT_HOLD, Cause.HEAD_HELD)


def _each(proxy: str, causes: Sequence[Cause], line: str, source: str) -> dict[tuple[str, Cause], Fix]:
    return {(proxy, cause): Fix(proxy, line, source) for cause in causes}


FIXES: dict[tuple[str, Cause], Fix] = {
    **_each("nginx", _HOLDS, "proxy_buffering off;  (or proxy_http_version 1.1; for a chunked upstream)", NGINX_PROXY),
    **_each(
        "nginx",
        (Cause.COMPRESSION_HOLD,),
        "proxy_buffering off;  (gzip then flushes each event; or leave text/event-stream out of gzip_types)",
        NGINX_GZIP,
    ),
    **_each("haproxy", _HOLDS, "option http-no-delay", HAPROXY_NO_DELAY),
    **_each(
        "haproxy",
        (Cause.COMPRESSION_HOLD,),
        "compression type <your types, without text/event-stream>",
        HAPROXY_COMPRESSION,
    ),
    **_each("caddy", _HOLDS, "flush_interval -1", CADDY_FLUSH),
    **_each(
        "caddy",
        (Cause.COMPRESSION_HOLD,),
        "encode { match { header Content-Type application/json* } }  (any match that leaves text/event-stream out)",
        CADDY_ENCODE,
    ),
    **_each(
        "traefik",
        _HOLDS,
        "responseForwarding: {flushInterval: -1}  (on the service's loadBalancer)",
        TRAEFIK_FORWARDING,
    ),
    **_each(
        "traefik",
        (Cause.COMPRESSION_HOLD,),
        'compress: {excludedContentTypes: ["text/event-stream"]}  (or Traefik 3.7: 3.3.2 held br and zstd until '
        "1 KB, 3.7.15 streams)",
        TRAEFIK_COMPRESS,
    ),
    **_each("envoy", _HOLDS, "remove envoy.filters.http.buffer from the streaming route's http_filters", ENVOY_BUFFER),
    **_each(
        "envoy",
        (Cause.COMPRESSION_HOLD,),
        "compressor_library: gzip or brotli for text/event-stream, not zstd (Envoy's zstd compressor never flushes "
        "mid-stream); or leave text/event-stream out of common_config: content_type",
        ENVOY_ZSTD,
    ),
    **_each("apache2", _HOLDS, "flushpackets=on", APACHE_PROXYPASS),
    **_each(
        "apache2",
        (Cause.COMPRESSION_HOLD,),
        "SetEnv no-gzip 1  (in the streaming location; or leave "
        "text/event-stream out of AddOutputFilterByType DEFLATE)",
        APACHE_DEFLATE,
    ),
    **_each(
        "express",
        (Cause.COMPRESSION_HOLD,),
        "res.flush() after each res.write(event)  (or compression({filter}) returning false for text/event-stream)",
        EXPRESS_COMPRESSION,
    ),
    **_each(
        "starlette",
        (Cause.COMPRESSION_HOLD,),
        "starlette>=0.46  (GZipMiddleware then skips text/event-stream; before it, keep the streaming route out "
        "of GZipMiddleware)",
        STARLETTE_GZIP,
    ),
}

# What each proxy writes into the head of an answer it forwards. HAProxy and Traefik add nothing by default: name
# them with --proxy. Starlette neither (`server: uvicorn` serves any ASGI app): --proxy starlette.
_SIGNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("nginx", "server", re.compile(r"^(nginx|openresty)\b", re.I)),
    ("envoy", "server", re.compile(r"^envoy\b", re.I)),
    ("envoy", "x-envoy-upstream-service-time", re.compile(r".")),
    ("caddy", "server", re.compile(r"^caddy\b", re.I)),
    ("caddy", "via", re.compile(r"\bcaddy\b", re.I)),
    ("apache2", "server", re.compile(r"^apache\b", re.I)),
    ("traefik", "via", re.compile(r"\btraefik\b", re.I)),
    ("haproxy", "via", re.compile(r"\bhaproxy\b", re.I)),
    ("haproxy", "server", re.compile(r"^haproxy\b", re.I)),
    ("express", "x-powered-by", re.compile(r"^express\b", re.I)),  # Express's default; a proxy in front wins
)


@dataclass(frozen=True, slots=True)
class Recognised:
    proxy: str
    by: str  # the header as it came, e.g. "Server: nginx/1.22.1", or "--proxy"


def recognise(headers: Sequence[tuple[str, str]]) -> Recognised | None:
    """The proxy a response head names, or None. The first matching sign wins, in _SIGNS' order."""
    for proxy, name, sign in _SIGNS:
        for key, value in headers:
            if key.lower() == name and sign.search(value.strip()):
                return Recognised(proxy, f"{key}: {value.strip()}")
    return None


def fix_for(proxy: str, cause: Cause) -> Fix | None:
    return FIXES.get((proxy, cause))


def likely_proxy(cause: Cause, period_ms: float | None) -> str | None:
    """A proxy whose stock config shows this cause (docs/findings.md), for a path that did not name itself."""
    if cause is Cause.TIME_QUANTIZED and period_ms is not None and 150 <= period_ms <= 250:
        return "stock HAProxy holds ~180-200 ms this way (docs/findings.md §2): if it is HAProxy, pass --proxy haproxy"
    if cause is Cause.WHOLE_RESPONSE:
        return "stock nginx (HTTP/1.0 upstream) and lighttpd hold a whole response this way (docs/findings.md §1, §4)"
    if cause is Cause.COMPRESSION_HOLD:
        return (
            "Express compression() without res.flush(), Starlette's GZipMiddleware before 0.46 and Envoy's zstd "
            "compressor hold a stream this way (docs/findings.md §10): --proxy express, starlette or envoy"
        )
    return None
