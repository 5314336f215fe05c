"""A Node/Express streaming relay, the application shape users deploy most in Node (proxies/peers/express_proxy.mjs,
package data), with the `compression` middleware from npm. express and compression go into the tools folder's npm
prefix with scripts/install-proxies --all; it runs on the machine's Node, as the `node` entry does.

`compression()` pipes the body through a zlib gzip stream; a `res.write` of one small event only feeds it, and
zlib emits when its buffer fills or the response ends: the `naive` variant. compression's README names the fix for
server-sent events, `res.flush()` after each write (a Z_SYNC_FLUSH): the `flush` variant.
Its 1 KB threshold does not save a stream: the relay sends the head first (flushHeaders), before any length is
known, and compression only skips responses it knows to be small.
"""

from __future__ import annotations

import shlex
from importlib.resources import files
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.tools import INSTALL_HINT, tools_dir

SCRIPT = Path(str(files("tokenpath.proxies") / "peers" / "express_proxy.mjs"))  # installed with the package
MODULES = "npm/node_modules"  # under the tools folder
PACKAGES = ("express", "compression")
NAIVE_LINE = "app.use(compression()); ... res.write(event)"
FLUSH_LINE = "app.use(compression()); ... res.write(event); res.flush()"


class ExpressProxy(Proxy):
    name = "express"
    binaries = ("node",)
    package = "express + compression (npm) on nodejs"
    tls_unsupported = "the Express peer serves plain HTTP"
    variants = (
        Variant(STOCK.name, "fetch + flushHeaders + for await ... res.write, no compression middleware"),
        Variant(
            "naive",
            "compression() and res.write per event: zlib holds the events until its buffer fills or the stream "
            "ends (fix: res.flush() after each write)",
            NAIVE_LINE,
        ),
        Variant("flush", "compression() with res.flush() after each event (compression's documented fix)", FLUSH_LINE),
    )

    def modules(self) -> Path:
        return tools_dir() / MODULES

    def missing_reason(self) -> str | None:
        if not SCRIPT.exists():
            return f"{SCRIPT} is missing from this installation of tokenpath (package data)"
        absent = [p for p in PACKAGES if not (self.modules() / p / "package.json").is_file()]
        if absent:
            return f"{', '.join(absent)} not installed ({INSTALL_HINT})"
        return super().missing_reason()

    def version(self) -> str:
        binary = self.binary()
        if binary is None or self.missing_reason():
            return "not installed"
        code = "for (const p of process.argv.slice(1)) console.log(p, require(p + '/package.json').version)"
        found = run_quiet([binary, "-e", code, *PACKAGES], env={"NODE_PATH": str(self.modules())})
        return f"{', '.join(found.splitlines())}, node {run_quiet([binary, '--version'])}"

    def env(self, site: Site) -> dict[str, str]:
        return site.ca_env("NODE_EXTRA_CA_CERTS")  # a private CA for an https upstream (fetch trusts the system's)

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "express.args"
        line = site.variant.line or "(no compression middleware)"
        command = shlex.join(self.command_line(self.binary() or "node", site, config))
        config.write_text(f"# tokenpath: Express relay; {line}\n{command}\n")
        return config

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        argv = [binary, str(SCRIPT), "--modules", str(self.modules())]
        argv += ["--listen", site.listen.hostport, "--upstream", site.upstream_url]
        if site.variant.name in ("naive", "flush"):
            argv.append("--compression")
        if site.variant.name == "flush":
            argv.append("--flush")
        return argv
