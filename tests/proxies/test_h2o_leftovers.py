"""h2o 2.2.5 with a TLS listener starts neverbleed (its private keys in a daemon of their own), whose socket lives in
a directory of /tmp it never removes: one per start, 42 left by one session of this suite. Stopping the proxy
removes the one its own daemon made, and never another h2o's."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.proxies.h2o import PRIVSEP_PREFIX, neverbleed_dirs
from tokenpath.serve.tlscert import self_signed

pytestmark = pytest.mark.e2e


def _tls_h2o(tls_dir: Path) -> RunningProxy:
    proxy = lookup("h2o")
    if proxy.missing_reason():
        pytest.skip(f"h2o: {proxy.missing_reason()}")
    tls = self_signed(tls_dir, ["127.0.0.1"])
    upstream = Endpoint("127.0.0.1", free_port())  # never asked: the test makes no request
    site = Site(Endpoint("127.0.0.1", free_port()), upstream, new_workdir("h2o"), proxy.variant("stock"), tls=tls)
    return start(proxy, site)


def test_stopping_h2o_removes_its_own_neverbleed_directory_only(tmp_path: Path) -> None:
    first, second = _tls_h2o(tmp_path / "a"), None
    try:
        second = _tls_h2o(tmp_path / "b")
        assert first.process is not None
        assert second.process is not None
        (mine,), (theirs,) = neverbleed_dirs(first.process.pid), neverbleed_dirs(second.process.pid)
        assert mine != theirs
        assert mine.parent == Path("/tmp")
        assert mine.name.startswith(PRIVSEP_PREFIX)
        assert mine.is_dir()
        first.stop()
        assert not mine.exists()
        assert theirs.is_dir()  # another h2o's daemon still listens there
        second.stop()
        assert not theirs.exists()
    finally:
        for running in (first, second):
            if running is not None:
                running.stop()


def test_a_process_with_no_such_socket_names_nothing() -> None:
    assert neverbleed_dirs(2**22 + 7) == []  # no such process
    assert neverbleed_dirs(os.getpid()) == []


def test_an_h2o_that_died_before_stop_still_has_its_directory_removed(tmp_path: Path) -> None:
    """Its directory is noted once it accepts: an h2o killed mid-run (its pid maybe another's by stop()) leaves
    nothing either."""
    running = _tls_h2o(tmp_path)
    try:
        assert running.process is not None
        (mine,) = neverbleed_dirs(running.process.pid)
        os.killpg(running.process.pid, signal.SIGKILL)  # the whole session: h2o, its daemon, its helpers
        running.process.wait(10)
        assert mine.is_dir()  # h2o never removes it itself
        running.stop()
        assert not mine.exists()
    finally:
        running.stop()
