"""A proxy given as a command line in the experiment file, with {listen}, {listen_host}, {listen_port} and
{upstream} placeholders, e.g. `socat TCP-LISTEN:{listen_port},bind={listen_host},fork,reuseaddr TCP:{upstream}`."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from tokenpath.errors import ProxyError
from tokenpath.proxies.base import STOCK, Proxy, Site

PLACEHOLDERS = ("{listen}", "{listen_host}", "{listen_port}", "{upstream}")


class CustomProxy(Proxy):
    def __init__(self, name: str, command: str, version_command: str | None = None) -> None:
        if "{listen" not in command or "{upstream}" not in command:
            raise ProxyError(f"proxy {name!r}: command must contain {{listen}} (or {{listen_port}}) and {{upstream}}")
        try:
            self.words = shlex.split(command)
        except ValueError as exc:
            raise ProxyError(f"proxy {name!r}: cannot split the command: {exc}") from None
        self.name = name
        self.command = command
        self.version_command = version_command
        self.variants = (STOCK,)
        self.binaries = (self.words[0],)
        self.package = self.words[0]

    def binary(self) -> str | None:
        return shutil.which(self.words[0])

    def version(self) -> str:
        from tokenpath.proxies.base import run_quiet

        return run_quiet(shlex.split(self.version_command)) if self.version_command else "unknown"

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "command"
        config.write_text(" ".join(shlex.quote(w) for w in self.argv(site, Path())) + "\n")
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        values = {
            "{listen}": site.listen.hostport,
            "{listen_host}": site.listen.host,
            "{listen_port}": str(site.listen.port),
            "{upstream}": site.upstream.hostport,
        }
        out = []
        for word in self.words:
            for key, value in values.items():
                word = word.replace(key, value)
            out.append(word)
        return out
