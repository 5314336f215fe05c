from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, h2_hint, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts, whole_seconds

H2_FEATURE = "-p feature=+http2"
# varnishd's parameter defaults (`varnishd -x parameter`, Varnish 7.1): first_byte_timeout 60 s (the head's wait),
# between_bytes_timeout 60 s (a silence mid-body), send_timeout 600 s (the whole response to the client: the
# session is closed at the first write after it). The two backend ones are per-backend attributes in the VCL.
STOCK_TIMEOUTS = StreamTimeouts(first_byte_s=60.0, idle_s=60.0, total_s=600.0)
# Varnish's documented way to carry a WebSocket (users-guide/vcl-example-websockets): pipe the upgrade, copying the
# hop-by-hop Upgrade and Connection headers onto the backend request. Stock, the upgrade is a GET looked up and
# fetched without them.
WEBSOCKET_VCL = """
sub vcl_recv {
  if (req.http.upgrade ~ "(?i)websocket") {
    return (pipe);
  }
}
sub vcl_pipe {
  if (req.http.upgrade) {
    set bereq.http.upgrade = req.http.upgrade;
    set bereq.http.connection = req.http.connection;
  }
}
"""
LONG_STREAMS_LINE = (
    f".first_byte_timeout = {LIFTED_S:.0f}s; .between_bytes_timeout = {LIFTED_S:.0f}s; -p send_timeout={LIFTED_S:.0f}"
)


class Varnish(Proxy):
    name = "varnish"
    binaries = ("varnishd",)
    package = "varnish"
    image = "varnish:7.1.1"
    tls_unsupported = "Varnish does not terminate TLS"
    upstream_tls_unsupported = "open-source Varnish has no TLS to its backends"
    variants = (
        STOCK,
        Variant("do_stream", "set beresp.do_stream = true and pass (explicit streaming)"),
        # HTTP/2 is off by default in Varnish (and there is no TLS): h2c with prior knowledge once the feature is on.
        Variant("http2", "h2c (HTTP/2 with prior knowledge) beside HTTP/1.1: the http2 feature on", H2_FEATURE),
        Variant(
            "websocket",
            "carries a WebSocket upgrade: return (pipe) on Upgrade: websocket, Upgrade/Connection copied in vcl_pipe",
            'sub vcl_recv { if (req.http.upgrade ~ "(?i)websocket") { return (pipe); } } sub vcl_pipe { if '
            "(req.http.upgrade) { set bereq.http.upgrade = req.http.upgrade; set bereq.http.connection = "
            "req.http.connection; } }",
        ),
        Variant(
            LONG_STREAMS,
            "backend timeouts and send_timeout an hour (stock: 60 s silences, 600 s total)",
            LONG_STREAMS_LINE,
        ),
    )
    stock_timeouts = STOCK_TIMEOUTS

    def version(self) -> str:
        binary = self.binary()
        if not binary:
            return "not installed"
        out = run_quiet([binary, "-V"])
        return out.split("varnish-")[-1].split(" ")[0] if "varnish-" in out else out.splitlines()[0]

    def write_config(self, site: Site) -> Path:
        variant = (
            "\nsub vcl_backend_response {\n  set beresp.do_stream = true;\n  set beresp.uncacheable = true;\n}\n"
            if site.variant.name == "do_stream"
            else WEBSOCKET_VCL
            if site.variant.name == "websocket"
            else ""
        )
        config = site.workdir / "default.vcl"
        config.write_text(f"""# tokenpath: stock reverse proxy; POST is passed by the built-in VCL
# varnishd -p send_timeout={self._seconds(site, "total_s")} (a parameter on its command line: the total limit)
vcl 4.1;
backend default {{
  .host = "{site.upstream.host}";
  .port = "{site.upstream.port}";
  .first_byte_timeout = {self._seconds(site, "first_byte_s")}s;
  .between_bytes_timeout = {self._seconds(site, "idle_s")}s;
}}
{variant}{_host(site)}""")
        return config

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [
            binary,
            "-F",
            "-j",
            "none",
            "-a",
            site.listen.hostport,
            "-f",
            str(config),
            "-n",
            str(site.workdir / "n"),
            "-s",
            "malloc,64m",
            "-T",
            "none",
            "-p",
            f"send_timeout={self._seconds(site, 'total_s')}",
            *(H2_FEATURE.split() if site.variant.name == "http2" else []),
        ]

    def _seconds(self, site: Site, limit: str) -> int:
        """One limit in whole seconds (varnishd takes fractions, but whole ones read as its docs write them)."""
        limits = self.timeouts_for(site)
        value: float | None = getattr(limits, limit) if limits else None
        return whole_seconds(value or LIFTED_S)

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return h2_hint(variant, ("http2",)) if http == "2" else ""


def _host(site: Site) -> str:
    """A real endpoint's own Host (Varnish passes the client's); nothing for the stub."""
    if not site.upstream_host:
        return ""
    return f'\nsub vcl_backend_fetch {{\n  set bereq.http.host = "{site.upstream_host}";\n}}\n'
