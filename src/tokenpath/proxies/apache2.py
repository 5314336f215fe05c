from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, h2_hint, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts, whole_seconds

MODULES = "/usr/lib/apache2/modules"
DEFLATE = "AddOutputFilterByType DEFLATE text/event-stream"  # mod_deflate as it is turned on (with mod_filter)
BROTLI = "AddOutputFilterByType BROTLI_COMPRESS text/event-stream"  # mod_brotli (Debian's apache2 has it), the same
# mod_http2 as it is turned on: h2 by ALPN over TLS, h2c (prior knowledge: H2Direct is on for cleartext) beside
# HTTP/1.1. `http2_flushpackets` adds flushpackets=on (mod_proxy_http then flushes after every chunk it relays).
PROTOCOLS = "Protocols h2 h2c http/1.1"
H2_VARIANTS = ("http2", "http2_flushpackets")
# Debian's /etc/apache2/apache2.conf ships `Timeout 300` (httpd's compiled default is 60: httpd.apache.org/docs/2.4/
# mod/core.html#timeout); mod_proxy's ProxyTimeout defaults to it: the silence a backend may keep before the next
# read, the response head's wait included. No total limit.
SHIPPED_TIMEOUT_S = 300.0
LONG_STREAMS_LINE = f"ProxyTimeout {LIFTED_S:.0f}"
UPGRADE_WEBSOCKET = "upgrade=websocket"
# Variant -> the modules it loads and its filter line.
COMPRESSION = {"deflate": (("filter", "deflate"), DEFLATE), "brotli": (("filter", "brotli"), BROTLI)}


class Apache2(Proxy):
    name = "apache2"
    binaries = ("apache2",)
    package = "apache2"
    image = "httpd:2.4.71-alpine"
    variants = (
        STOCK,
        Variant("flushpackets", "ProxyPass ... flushpackets=on (flush after every chunk)", "flushpackets=on"),
        Variant("deflate", "mod_deflate for event streams (compresses what the client accepts)", DEFLATE),
        Variant("brotli", "mod_brotli for event streams (br for a client that accepts it, else identity)", BROTLI),
        Variant("http2", "mod_http2: HTTP/2 to the client (h2 over TLS, h2c on cleartext)", PROTOCOLS),
        Variant("http2_flushpackets", "mod_http2, with ProxyPass ... flushpackets=on", f"{PROTOCOLS}; flushpackets=on"),
        # httpd.apache.org/docs/2.4/mod/mod_proxy.html#protoupgrade: mod_proxy_http tunnels an Upgrade (2.4.47+) only
        # for the protocols ProxyPass's upgrade= names; stock it answers the offer as a plain GET
        Variant("websocket", "carries a WebSocket upgrade: ProxyPass ... upgrade=websocket", UPGRADE_WEBSOCKET),
        Variant(
            LONG_STREAMS,
            "ProxyTimeout an hour (Debian's Timeout 300: 5 min of silence ends a stream)",
            LONG_STREAMS_LINE,
        ),
    )
    stock_timeouts = StreamTimeouts(idle_s=SHIPPED_TIMEOUT_S)

    def version(self) -> str:
        binary = self.binary()
        if not binary:
            return "not installed"
        first = run_quiet([binary, "-v"]).splitlines()[0]
        return first.split("Apache/")[-1].split(" ")[0]

    def write_config(self, site: Site) -> Path:
        ssl = site.tls is not None or site.upstream_tls is not None
        compression_mods, compression_line = COMPRESSION.get(site.variant.name, ((), ""))
        h2 = site.variant.name in H2_VARIANTS
        mods = ["mpm_event", "authz_core", "proxy", "proxy_http", *(["ssl"] if ssl else []), *compression_mods]
        mods += ["http2"] if h2 else []
        filters = f"{compression_line}\n" if compression_line else ""
        filters += f"{PROTOCOLS}\n" if h2 else ""
        loads = "\n".join(f"LoadModule {m}_module {MODULES}/mod_{m}.so" for m in mods)
        tls = (
            f"SSLEngine on\nSSLCertificateFile {site.tls.cert}\nSSLCertificateKeyFile {site.tls.key}\n"
            if site.tls
            else ""
        )
        flush = " flushpackets=on" if site.variant.name in ("flushpackets", "http2_flushpackets") else ""
        flush += f" {UPGRADE_WEBSOCKET}" if site.variant.name == "websocket" else ""
        config = site.workdir / "httpd.conf"
        config.write_text(f"""# tokenpath: stock reverse proxy (mod_proxy_http); only the variant flag differs
ServerRoot "{site.workdir}"
ServerName localhost
DefaultRuntimeDir "{site.workdir}"
PidFile "{site.workdir}/httpd.pid"
ErrorLog "{site.workdir}/error.log"
Mutex file:{site.workdir}
User www-data
Group www-data
{loads}
Listen {site.listen.hostport}
{self._timeout_lines(site)}
{filters}{tls}{_upstream_tls(site)}ProxyPass "/" "{site.upstream_url}/"{flush}
ProxyPassReverse "/" "{site.upstream_url}/"
""")
        return config

    def _timeout_lines(self, site: Site) -> str:
        limits = self.timeouts_for(site)
        if limits is None:
            return f"Timeout {SHIPPED_TIMEOUT_S:.0f}\n{LONG_STREAMS_LINE}"
        return f"Timeout {whole_seconds(limits.idle_s or LIFTED_S)}"

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return h2_hint(variant, H2_VARIANTS) if http == "2" else ""

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-DFOREGROUND", "-f", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        check = run_quiet(wrap([binary, "-t", "-f", str(config)]))
        return f"{config.read_text()}\n# apache2 -t: {check}"


def _upstream_tls(site: Site) -> str:
    """An https endpoint, its certificate checked against the name in the ProxyPass URL (mod_proxy sends that name
    as Host too, ProxyPreserveHost being off by default)."""
    if site.upstream_tls is None:
        return ""
    return (
        "SSLProxyEngine on\nSSLProxyVerify require\nSSLProxyCheckPeerName on\n"
        f"SSLProxyCACertificateFile {site.upstream_tls.ca_bundle}\n"
    )
