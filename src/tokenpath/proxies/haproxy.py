from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, h2_hint, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts, duration

# Compression as it is turned on for an API behind HAProxy (backend lines; the client's Accept-Encoding decides).
COMPRESSION = "compression algo gzip; compression type text/event-stream"
# HTTP/2 to the client: a cleartext bind in mode http takes h2c prior knowledge as it is (2.6 detects the preface:
# measured); over TLS 2.6 offers no ALPN unless the bind line says so. On cleartext the variant changes nothing.
ALPN = "alpn h2,http/1.1"
# Debian's /etc/haproxy/haproxy.cfg (the package's shipped defaults section): timeout connect 5000, client 50000,
# server 50000 (milliseconds). `timeout server` is the silence HAProxy waits for the next byte from the upstream
# (the response head included), `timeout client` the same on the client's side while it streams nothing back:
# with a silent upstream both run, so both are the stream's idle limit. HAProxy has no total limit by default.
SHIPPED_IDLE_S = 50.0
LONG_STREAMS_LINE = f"timeout server {LIFTED_S:.0f}s; timeout client {LIFTED_S:.0f}s"


class HAProxy(Proxy):
    name = "haproxy"
    binaries = ("haproxy",)
    package = "haproxy"
    image = "haproxy:2.6.12-alpine"
    variants = (
        STOCK,
        Variant("http_no_delay", "option http-no-delay (send each chunk at once)", "option http-no-delay"),
        Variant("compression", "gzip for event streams (compresses what the client accepts)", COMPRESSION),
        Variant("h2", "HTTP/2 to the client over TLS: ALPN h2 on the bind line", f"bind ... ssl crt ... {ALPN}"),
        Variant(
            LONG_STREAMS,
            "timeout server and client an hour (Debian's: 50 s of silence ends a stream)",
            LONG_STREAMS_LINE,
        ),
    )
    stock_timeouts = StreamTimeouts(idle_s=SHIPPED_IDLE_S)

    def version(self) -> str:
        binary = self.binary()
        if not binary:
            return "not installed"
        first = run_quiet([binary, "-v"]).splitlines()[0]
        return first.removeprefix("HAProxy version ").split(" ")[0]

    def write_config(self, site: Site) -> Path:
        bind = f"bind {site.listen.hostport}" + (f" ssl crt {site.tls.combined}" if site.tls else "")
        bind += f" {ALPN}" if site.tls and site.variant.name == "h2" else ""
        option = "    option http-no-delay\n" if site.variant.name == "http_no_delay" else ""
        compression = "".join(f"    {line.strip()}\n" for line in COMPRESSION.split(";"))
        backend = option + (compression if site.variant.name == "compression" else "")
        config = site.workdir / "haproxy.cfg"
        limits = self.timeouts_for(site)
        idle = duration(LIFTED_S if limits is None or limits.idle_s is None else limits.idle_s)
        config.write_text(f"""# tokenpath: Debian's shipped defaults for a reverse proxy; only the variant lines differ
global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client {idle}
    timeout server {idle}
frontend tokenpath
    {bind}
{option}    default_backend upstream
backend upstream
{backend}{_endpoint_lines(site)}    server stub {site.upstream.hostport}{_server_tls(site)}
""")
        return config

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        # HAProxy 2.8+ offers h2 by default on TLS binds in mode http (unmeasured here): the variant keeps it explicit.
        return h2_hint(variant, ("h2",)) if http == "2" and tls else ""

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-db", "-f", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        check = run_quiet(wrap([binary, "-c", "-f", str(config)]))
        return f"{config.read_text()}\n# haproxy -c: {check}"


def _endpoint_lines(site: Site) -> str:
    """A real endpoint's own Host (HAProxy passes the client's); nothing for the stub."""
    return f"    http-request set-header Host {site.upstream_host}\n" if site.upstream_host else ""


def _server_tls(site: Site) -> str:
    if site.upstream_tls is None:
        return ""
    name = site.upstream_tls.server_name
    ca = site.upstream_tls.cacert or "@system-ca"
    return f" ssl verify required ca-file {ca} sni str({name}) verifyhost {name}"


class HAProxy3(HAProxy):
    """HAProxy 3.0, built by `scripts/install-proxies --build haproxy3` from Debian 13's source into the tools folder
    (opt-in: a few minutes of compiling). 2.8+ corks TLS records with MSG_MORE where 2.6 does not."""

    name = "haproxy3"
    tool_paths = ("haproxy3/haproxy",)
    tools_only = True
    package = "haproxy 3.0 (scripts/install-proxies --build haproxy3)"
    image = "haproxy:3.0.11-alpine"

    def missing_reason(self) -> str | None:
        if self.binary() is None:
            return "not built (scripts/install-proxies --build haproxy3, as root; a few minutes)"
        return None
