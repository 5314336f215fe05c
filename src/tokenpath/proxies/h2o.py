from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts, milliseconds

# h2o's documented default (h2o.examp1e.net/configure/proxy_directives.html#proxy.timeout.io): proxy.timeout.io
# 30000 ms, the silence on the upstream connection it waits out, the response head's wait included. No total limit.
IO_TIMEOUT_S = 30.0
LONG_STREAMS_LINE = f"proxy.timeout.io: {milliseconds(LIFTED_S)}"
# h2o's documented way to carry a WebSocket in 2.2 (h2o.examp1e.net/configure/proxy_directives.html#proxy.websocket,
# "experimental", default OFF; later h2o documents proxy.tunnel, which 2.2.5 rejects): stock, the upgrade reaches the
# upstream as a plain GET without its Upgrade header. The tunnel's idle limit is then proxy.websocket.timeout, 300 s by
# default (the same page; documented, not measured here), not proxy.timeout.io.
WEBSOCKET_LINE = "proxy.websocket: ON"
PRIVSEP_PREFIX = "openssl-privsep."  # neverbleed's directory in /tmp (neverbleed_dirs)


class H2O(Proxy):
    name = "h2o"
    binaries = ("h2o",)
    package = "h2o"
    image = "lkwg82/h2o-http2-server:v2.2.5"
    variants = (
        STOCK,
        Variant("websocket", "carries a WebSocket upgrade: proxy.websocket ON (h2o 2.2's directive)", WEBSOCKET_LINE),
        Variant(LONG_STREAMS, "proxy.timeout.io an hour (stock: 30 s of silence ends a stream)", LONG_STREAMS_LINE),
    )
    stock_timeouts = StreamTimeouts(idle_s=IO_TIMEOUT_S)

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
        proxy.timeout.io: {self._io_timeout_ms(site)}{_websocket(site)}
""")
        return config

    def _io_timeout_ms(self, site: Site) -> int:
        limits = self.timeouts_for(site)
        return milliseconds(limits.idle_s if limits and limits.idle_s else LIFTED_S)

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return ""  # stock: h2 by ALPN over TLS and h2c prior knowledge on cleartext (measured, 2.2.5)

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-c", str(config)]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return f"{config.read_text()}\n# h2o -t: {run_quiet(wrap([binary, '-t', '-c', str(config)]))}"

    def files_outside(self, pid: int) -> list[Path]:
        return neverbleed_dirs(pid)


def neverbleed_dirs(pid: int) -> list[Path]:
    """The directories of the sockets h2o's key-holding daemon (neverbleed: TLS private keys in a process of their
    own) listens on, found among the sockets h2o `pid` and its children hold. h2o 2.2.5 makes one per start with a
    TLS listener, in a path compiled in (/tmp/openssl-privsep.XXXXXX: no setting or TMPDIR moves it), and never
    removes it: 42 were left in /tmp by one session of this suite. Only the daemon's own listening socket's directory
    is named, never another h2o's."""
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []
    dirs: set[Path] = set()
    for proc in procs:
        with contextlib.suppress(OSError):
            inodes = {os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")}
            # The process's own network namespace's table (h2o may run in a veth condition's namespace).
            for line in Path(f"/proc/{proc.pid}/net/unix").read_text().splitlines()[1:]:
                fields = line.split()  # Num RefCount Protocol Flags Type St Inode [Path]
                if len(fields) == 8 and f"socket:[{fields[6]}]" in inodes:
                    path = Path(fields[7])
                    if path.parent.name.startswith(PRIVSEP_PREFIX) and path.parent.parent == Path("/tmp"):
                        dirs.add(path.parent)
    return sorted(dirs)


def _upstream_tls(site: Site) -> str:
    """An https endpoint: h2o checks its certificate (against this bundle); it sends the upstream's own Host."""
    if site.upstream_tls is None:
        return ""
    return f"\n        proxy.ssl.verify-peer: ON\n        proxy.ssl.cafile: {site.upstream_tls.ca_bundle}"


def _websocket(site: Site) -> str:
    return f"\n        {WEBSOCKET_LINE}" if site.variant.name == "websocket" else ""
