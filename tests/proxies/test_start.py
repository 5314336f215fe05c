"""proxies.base.start: how long it waits is the proxy's own start_timeout_s (LiteLLM's import alone takes ~14 s of
CPU here), and a proxy that never accepts is named with the time it was given."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tokenpath.errors import ProxyError
from tokenpath.proxies.base import Endpoint, Proxy, Site, free_port, start
from tokenpath.proxies.litellm import LiteLLM


class NeverAccepts(Proxy):
    """A process that runs but never listens."""

    name = "never-accepts"
    start_timeout_s = 0.5

    def binary(self) -> str | None:
        return sys.executable

    def write_config(self, site: Site) -> Path:
        path = site.workdir / "none.conf"
        path.write_text("")
        return path

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-c", "import time; time.sleep(30)"]


def test_start_waits_as_long_as_the_proxy_says_and_no_longer(tmp_path: Path) -> None:
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint("127.0.0.1", free_port()), tmp_path)
    t0 = time.monotonic()
    with pytest.raises(ProxyError, match=r"did not accept .* within 0 s"):
        start(NeverAccepts(), site)
    assert time.monotonic() - t0 < 5  # the default (15 s) would have been waited out otherwise


def test_litellm_is_given_longer_than_the_default_to_start() -> None:
    assert LiteLLM().start_timeout_s >= 60
