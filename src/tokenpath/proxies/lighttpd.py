from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LONG_STREAMS, whole_seconds

MOD_OPENSSL = Path("/usr/lib/lighttpd/mod_openssl.so")
STREAM_RESPONSE_BODY = "server.stream-response-body = 2"
# lighttpd's documented defaults (redmine.lighttpd.net/projects/lighttpd/wiki/Mod_proxy, host options since
# 1.4.60): "connect-timeout", "write-timeout" and "read-timeout" 0, i.e. none: stock has no stream limit. A site's
# own limits (tests) become "read-timeout" (seconds without a read from the backend, checked once a second: a 1 s
# limit cut a silence at ~3 s here); long_streams writes 0.
STOCK_LIMITS_COMMENT = '# stock timeouts: none (mod_proxy "read-timeout" => 0, the default)'
LONG_STREAMS_LINE = '"read-timeout" => 0'
# lighttpd's documented way to carry a WebSocket (redmine.lighttpd.net/projects/lighttpd/wiki/Docs_ModProxy,
# proxy.header since 1.4.46): "upgrade" => "enable" lets mod_proxy pass Upgrade on and tunnel after the backend's 101.
# Stock, it drops the Upgrade header and the backend sees a plain GET.
WEBSOCKET_HEADER = '"upgrade" => "enable"'


class Lighttpd(Proxy):
    name = "lighttpd"
    binaries = ("lighttpd",)
    package = "lighttpd"
    image = "sebp/lighttpd:1.4.69"
    upstream_tls_unsupported = "lighttpd's mod_proxy cannot connect to its backend over TLS"
    variants = (
        STOCK,
        Variant("stream_response_body", "server.stream-response-body = 2 (send as it arrives)", STREAM_RESPONSE_BODY),
        Variant("websocket", 'carries a WebSocket upgrade: proxy.header = ("upgrade" => "enable")', WEBSOCKET_HEADER),
        Variant(LONG_STREAMS, "no backend read timeout, explicitly (also lighttpd's default)", LONG_STREAMS_LINE),
    )

    @property
    def tls_unsupported(self) -> str:  # type: ignore[override]
        # Debian ships TLS for lighttpd as its own package; without it the TLS config does not load.
        return "" if MOD_OPENSSL.exists() else "needs lighttpd-mod-openssl (scripts/install-proxies --all)"

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "-v"]).splitlines()[0].split(" ")[0] if binary else "not installed"

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return ""  # stock 1.4.69: h2 by ALPN over TLS and h2c prior knowledge on cleartext (measured)

    def write_config(self, site: Site) -> Path:
        modules = '"mod_proxy"' + (', "mod_openssl"' if site.tls else "")
        tls = (
            f'ssl.engine = "enable"\nssl.pemfile = "{site.tls.cert}"\nssl.privkey = "{site.tls.key}"\n'
            if site.tls
            else ""
        )
        variant = f"{STREAM_RESPONSE_BODY}\n" if site.variant.name == "stream_response_body" else ""
        backend = f'"host" => "{site.upstream.host}", "port" => {site.upstream.port}{self._read_timeout(site)}'
        config = site.workdir / "lighttpd.conf"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant line differs from the defaults
{STOCK_LIMITS_COMMENT}
server.modules = ({modules})
server.document-root = "{site.workdir}"
server.bind = "{site.listen.host}"
server.port = {site.listen.port}
server.errorlog = "{site.workdir}/error.log"
{tls}{variant}proxy.server = ("" => (({backend})))
{_host(site)}
""")
        return config

    def _read_timeout(self, site: Site) -> str:
        limits = self.timeouts_for(site)
        if limits is None:
            return f", {LONG_STREAMS_LINE}"
        return f', "read-timeout" => {whole_seconds(limits.idle_s)}' if limits.idle_s else ""

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-D", "-f", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return run_quiet(wrap([binary, "-p", "-f", str(config)]))


def _host(site: Site) -> str:
    """proxy.header's options: a real endpoint's own Host (mod_proxy passes the client's; nothing for the stub) and
    the WebSocket variant's upgrade (one proxy.header holds both: a second assignment would replace the first)."""
    options = [f'"map-host-request" => ("-" => "{site.upstream_host}")'] if site.upstream_host else []
    options += [WEBSOCKET_HEADER] if site.variant.name == "websocket" else []
    return f"proxy.header = ({', '.join(options)})\n" if options else ""
