"""The Node.js peers from the first seed article (proxies/peers/node_proxy.mjs, package data): the correct shape and
the naive one."""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet

SCRIPT = Path(str(files("tokenpath.proxies") / "peers" / "node_proxy.mjs"))  # installed with the package


class NodeProxy(Proxy):
    package = "nodejs"
    tls_unsupported = "the Node.js peers serve plain HTTP"

    def __init__(self, naive: bool) -> None:
        self.naive = naive
        self.name = "node-naive" if naive else "node"
        description = (
            "await response.text(), then write it all (the tutorial shape)"
            if naive
            else "fetch + flushHeaders + for await ... res.write (the shape the article calls correct)"
        )
        self.variants = (Variant(STOCK.name, description),)
        self.binaries = ("node",)

    def missing_reason(self) -> str | None:
        if not SCRIPT.exists():
            return f"{SCRIPT} is missing from this installation of tokenpath (package data)"
        return super().missing_reason()

    def version(self) -> str:
        return run_quiet(["node", "--version"]) if shutil.which("node") else "not installed"

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "node.args"
        config.write_text(" ".join(self.argv(site, config)) + "\n")
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        node = self.require_binary()
        argv = [node, str(SCRIPT), "--listen", site.listen.hostport, "--upstream", f"http://{site.upstream.hostport}"]
        return [*argv, "--naive"] if self.naive else argv
