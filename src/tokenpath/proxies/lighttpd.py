from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, no_wrap, run_quiet


class Lighttpd(Proxy):
    name = "lighttpd"
    binaries = ("lighttpd",)
    package = "lighttpd"
    image = "sebp/lighttpd:1.4.69"
    variants = (STOCK, Variant("stream_response_body", "server.stream-response-body = 2 (send as it arrives)"))

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "-v"]).splitlines()[0].split(" ")[0] if binary else "not installed"

    def write_config(self, site: Site) -> Path:
        modules = '"mod_proxy"' + (', "mod_openssl"' if site.tls else "")
        tls = (
            f'ssl.engine = "enable"\nssl.pemfile = "{site.tls.cert}"\nssl.privkey = "{site.tls.key}"\n'
            if site.tls
            else ""
        )
        variant = "server.stream-response-body = 2\n" if site.variant.name == "stream_response_body" else ""
        config = site.workdir / "lighttpd.conf"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant line differs from the defaults
server.modules = ({modules})
server.document-root = "{site.workdir}"
server.bind = "{site.listen.host}"
server.port = {site.listen.port}
server.errorlog = "{site.workdir}/error.log"
{tls}{variant}proxy.server = ("" => (("host" => "{site.upstream.host}", "port" => {site.upstream.port})))
""")
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        binary = self.require_binary()
        return [binary, "-D", "-f", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return run_quiet(wrap([binary, "-p", "-f", str(config)]))
