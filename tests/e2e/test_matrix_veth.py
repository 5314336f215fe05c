"""`tokenpath matrix` over a veth pair (issue-3 facts): the size effect loopback hides, and TLS changes HAProxy.
Its own file so the timed lane (`--dist loadfile`) runs it beside the other matrix tests, not after them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_matrix import namespaces_of, needs_proxies, row, run_matrix
from tokenpath.links import netns


@needs_proxies
@pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
def test_veth_shows_the_size_effect_loopback_hides_and_tls_changes_haproxy(tmp_path: Path) -> None:
    pids: list[int] = []
    doc, _ = run_matrix(
        tmp_path,
        """
name = "links"
frames = 16
runs = 2
[conditions]
interval_ms = [50]
frame_bytes = [1100]
link = ["loopback", "veth"]
tls = [false, true]
[[proxy]]
name = "haproxy"
""",
        pids=pids,
    )
    assert doc["certification"]["passed"]
    loopback = row(doc, "haproxy", link="loopback", tls=False)
    veth = row(doc, "haproxy", link="veth", tls=False)
    assert loopback["modal_burst"] >= 4  # a 64 KB loopback segment never fills: held ~200 ms
    assert veth["modal_burst"] == 2  # two 1.1 KB frames fill a 1,448-byte segment on a 1,500 MTU link
    assert veth["added_ttft_ms_median"] < loopback["added_ttft_ms_median"] / 2
    for link in ("loopback", "veth"):  # HAProxy 2.6 does not cork TLS
        assert row(doc, "haproxy", link=link, tls=True)["within_floor"] is True
    assert namespaces_of(pids[0]) == set()  # the run removed what it made
