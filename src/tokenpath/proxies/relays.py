"""tokenpath's own relays as catalogue entries: the controls, with behaviour known exactly."""

from __future__ import annotations

import sys
from pathlib import Path

from tokenpath import __version__
from tokenpath.controls.policies import CORK_BYTES, CORK_MS, H2_MODES
from tokenpath.proxies.base import STOCK, Proxy, Site, Variant


class ControlProxy(Proxy):
    """A control relay (`tokenpath relay --mode ...`) as the runner starts any proxy."""

    package = "tokenpath"
    variants = (STOCK,)

    def __init__(self, mode: str, description: str) -> None:
        self.name = mode
        self.mode = mode
        self.variants = (Variant("stock", description),)

    def binary(self) -> str | None:
        return sys.executable

    def version(self) -> str:
        return f"tokenpath {__version__}"

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "relay.args"
        config.write_text(" ".join(self._args(site)) + "\n")
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        return [sys.executable, "-m", "tokenpath", *self._args(site)]

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        if http == "2" and self.mode not in H2_MODES:
            return f"the {self.mode} control rewrites an HTTP/1.1 response; over HTTP/2 it refuses the connection"
        return ""  # pass, buffer (per stream) and cork relay h2 (controls/h2hold.py)

    def _args(self, site: Site) -> list[str]:
        args = ["relay", "--listen", site.listen.hostport, "--upstream", site.upstream.hostport, "--mode", self.mode]
        if self.mode == "cork":
            args += ["--cork-ms", str(CORK_MS), "--cork-bytes", str(CORK_BYTES)]
        if site.tls is not None:
            args += ["--tls-cert", str(site.tls.cert), "--tls-key", str(site.tls.key)]
        return args


BASE_CONTROLS = (
    ControlProxy("pass", "forwards every read at once: must measure at the direct floor"),
    ControlProxy("buffer", "holds the whole response, then writes it: the `await response.text()` shape"),
    ControlProxy("cork", f"holds bytes until {CORK_BYTES} are queued or {CORK_MS:g} ms passed: MSG_MORE"),
)
# Certified before a condition that sends Accept-Encoding (controls/compress.py): gzip without and with a flush.
COMPRESSION_CONTROLS = (
    ControlProxy("gzip-hold", "gzips for a client that asks, no flush per event: the compressing proxy's mistake"),
    ControlProxy("gzip-flush", "gzips for a client that asks, Z_SYNC_FLUSH after every read: must stream"),
)
CONTROLS = (*BASE_CONTROLS, *COMPRESSION_CONTROLS)
