"""Where the host's Chromium is: the one lookup the probe's browser client (probe/browser.py) and the report's
screenshots (report/browser.py) share."""

from __future__ import annotations

import shutil

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The first of CANDIDATES on PATH (Debian's package installs `chromium`), or None."""
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)
