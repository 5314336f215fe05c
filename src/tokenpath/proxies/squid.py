from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts, whole_seconds

# squid.conf.documented (Debian's /etc/squid/squid.conf): read_timeout "The default is 15 minutes": the silence
# Squid waits for the next read from the server, the reply's head included. No total limit on a reply.
READ_TIMEOUT_S = 900.0
LONG_STREAMS_LINE = f"read_timeout {LIFTED_S:.0f} seconds"
# Squid's documented way to carry a WebSocket (squid-cache.org/Doc/config/http_upgrade_request_protocols, Squid 5+):
# stock, "Upgrade header dropped, effectively blocking an upgrade attempt"; allowed, Squid relays the 101 and then
# the bytes as a dumb TCP tunnel. Protocol names are case sensitive: this rule matches `Upgrade: websocket` only.
WEBSOCKET_LINE = "http_upgrade_request_protocols websocket allow all"


class Squid(Proxy):
    name = "squid"
    binaries = ("squid",)
    package = "squid"
    image = "ubuntu/squid:5.7-22.04_beta"
    tls_unsupported = "Debian's squid is built without TLS termination (needs squid-openssl)"
    upstream_tls_unsupported = "Debian's squid is built without TLS (an https cache_peer needs squid-openssl)"
    variants = (
        STOCK,
        Variant("websocket", "carries a WebSocket upgrade: http_upgrade_request_protocols allows it", WEBSOCKET_LINE),
        Variant(LONG_STREAMS, "read_timeout an hour (stock: 15 min of silence ends a reply)", LONG_STREAMS_LINE),
    )
    stock_timeouts = StreamTimeouts(idle_s=READ_TIMEOUT_S)

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "-v"]).splitlines()[0].split("Version ")[-1] if binary else "not installed"

    def write_config(self, site: Site) -> Path:
        site.workdir.chmod(0o777)  # squid drops to its own user after reading the config
        config = site.workdir / "squid.conf"
        config.write_text(f"""# tokenpath: squid as a reverse proxy (accelerator), nothing touching buffering
http_port {site.listen.hostport} accel defaultsite=tokenpath no-vhost
cache_peer {site.upstream.host} parent {site.upstream.port} 0 no-query originserver name=upstream{_forced_host(site)}
cache_peer_access upstream allow all
http_access allow all
cache deny all
access_log none
cache_log {site.workdir}/cache.log
pid_filename {site.workdir}/squid.pid
coredump_dir {site.workdir}
shutdown_lifetime 1 seconds
read_timeout {self._read_timeout(site)} seconds
pinger_enable off
{WEBSOCKET_LINE if site.variant.name == "websocket" else ""}
""")
        return config

    def _read_timeout(self, site: Site) -> int:
        limits = self.timeouts_for(site)
        return whole_seconds(limits.idle_s if limits and limits.idle_s else LIFTED_S)

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-N", "-f", str(config)]


def _forced_host(site: Site) -> str:
    """A real endpoint's own Host (forceddomain= sets it on requests to the peer); nothing for the stub."""
    return f" forceddomain={site.upstream_host}" if site.upstream_host else ""
