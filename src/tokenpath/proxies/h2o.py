from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, no_wrap, run_quiet


class H2O(Proxy):
    name = "h2o"
    binaries = ("h2o",)
    package = "h2o"
    image = "lkwg82/h2o-http2-server:v2.2.5"
    variants = (STOCK,)

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "--version"]).splitlines()[0].split(" ")[-1] if binary else "not installed"

    def write_config(self, site: Site) -> Path:
        tls = f"\n  ssl:\n    certificate-file: {site.tls.cert}\n    key-file: {site.tls.key}" if site.tls else ""
        config = site.workdir / "h2o.conf"
        config.write_text(f"""# tokenpath: stock reverse proxy
listen:
  host: {site.listen.host}
  port: {site.listen.port}{tls}
hosts:
  "{site.listen.hostport}":
    paths:
      /:
        proxy.reverse.url: {site.upstream_url}/{_upstream_tls(site)}
""")
        return config

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return ""  # stock: h2 by ALPN over TLS and h2c prior knowledge on cleartext (measured, 2.2.5)

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-c", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return f"{config.read_text()}\n# h2o -t: {run_quiet(wrap([binary, '-t', '-c', str(config)]))}"


def _upstream_tls(site: Site) -> str:
    """An https endpoint: h2o checks its certificate (against this bundle); it sends the upstream's own Host."""
    if site.upstream_tls is None:
        return ""
    return f"\n        proxy.ssl.verify-peer: ON\n        proxy.ssl.cafile: {site.upstream_tls.ca_bundle}"
