"""What `make test` installs is exercised, never skipped: a proxy's tests skip with its missing reason when it is not
installed (tests/e2e/test_catalogue.py and others), which is right for an opt-in tool and wrong for one `make test`
installs (a failed apt-get would otherwise turn every one of its tests into a quiet skip). As root, where
scripts/install-proxies --all installs everything, only the opt-in entries below may be missing."""

from __future__ import annotations

import os
import shutil

import pytest

from tokenpath.chromium import find_chromium
from tokenpath.proxies import catalogue

# Catalogue entries `make test` does not install; their tests skip with the entry's missing reason.
OPT_IN = {
    "haproxy3",  # scripts/install-proxies --build haproxy3 (root; a few minutes of compiling)
    "node", "node-naive",  # Debian's nodejs (Node 20): the machine's, not installed by make test
}  # fmt: skip

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="not root: make test installs the Debian packages as root")


def test_every_catalogue_entry_make_test_installs_is_installed() -> None:
    entries = catalogue()
    assert set(OPT_IN) <= set(entries)  # a renamed entry is a decision here too
    missing = {name: proxy.missing_reason() for name, proxy in entries.items()
               if proxy.runnable and name not in OPT_IN and proxy.missing_reason()}  # fmt: skip
    assert not missing, f"installed by `make test` (scripts/install-proxies --all), yet missing: {missing}"


def test_the_tools_make_test_installs_for_the_report_and_monitor_tests_are_installed() -> None:
    assert find_chromium() is not None  # tests/report/test_browser.py
    assert shutil.which("prometheus") is not None  # tests/e2e/test_monitor.py
    assert shutil.which("promtool") is not None


def test_an_opt_in_entry_that_is_missing_says_how_to_get_it() -> None:
    haproxy3 = catalogue()["haproxy3"]
    if haproxy3.binary() is None:
        assert "scripts/install-proxies --build haproxy3" in (haproxy3.missing_reason() or "")
