"""Headless Chromium: load a report from disk, dump its DOM or take a screenshot. Used by the browser test and by
`tokenpath report --screenshot` (the picture in the README). No network: the page needs none."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tokenpath.chromium import find_chromium
from tokenpath.errors import PeerError

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--hide-scrollbars",
)
TIMEOUT_S = 120


def _run(args: list[str]) -> str:
    exe = find_chromium()
    if exe is None:
        raise PeerError("no Chromium found (Debian: apt-get install chromium; `make test` installs it as root)")
    try:
        done = subprocess.run([exe, *FLAGS, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PeerError(f"chromium did not finish within {TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise PeerError(f"chromium exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def dump_dom(page: Path) -> str:
    return _run(["--dump-dom", page.resolve().as_uri()])


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 2400) -> Path:
    png.parent.mkdir(parents=True, exist_ok=True)
    _run([f"--screenshot={png.resolve()}", f"--window-size={width},{height}", page.resolve().as_uri()])
    if not png.is_file():
        raise PeerError(f"chromium reported success but wrote no {png}")
    return png
