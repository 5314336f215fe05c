from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, no_wrap, run_quiet

MOD_OPENSSL = Path("/usr/lib/lighttpd/mod_openssl.so")
STREAM_RESPONSE_BODY = "server.stream-response-body = 2"


class Lighttpd(Proxy):
    name = "lighttpd"
    binaries = ("lighttpd",)
    package = "lighttpd"
    image = "sebp/lighttpd:1.4.69"
    upstream_tls_unsupported = "lighttpd's mod_proxy cannot connect to its backend over TLS"
    variants = (
        STOCK,
        Variant("stream_response_body", "server.stream-response-body = 2 (send as it arrives)", STREAM_RESPONSE_BODY),
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
        config = site.workdir / "lighttpd.conf"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant line differs from the defaults
server.modules = ({modules})
server.document-root = "{site.workdir}"
server.bind = "{site.listen.host}"
server.port = {site.listen.port}
server.errorlog = "{site.workdir}/error.log"
{tls}{variant}proxy.server = ("" => (("host" => "{site.upstream.host}", "port" => {site.upstream.port})))
{_host(site)}
""")
        return config

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-D", "-f", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return run_quiet(wrap([binary, "-p", "-f", str(config)]))


def _host(site: Site) -> str:
    """A real endpoint's own Host (mod_proxy passes the client's); nothing for the stub."""
    return f'proxy.header = ("map-host-request" => ("-" => "{site.upstream_host}"))\n' if site.upstream_host else ""
