"""diagnose/cuts.py: a measured cut named (which limit, its value) with its fix: the catalogue's long_streams line
for a known proxy (one source), keep-alives more often than the measured idle limit where nobody can configure it,
and the cloud default it matches."""

from __future__ import annotations

import pytest

from tokenpath.diagnose.cuts import CLOUD_LIMITS, Limit, lift_line, name_cut, name_end, path_cuts, split_target
from tokenpath.diagnose.limits import LimitFound, Measure, PathLimits
from tokenpath.errors import UsageError
from tokenpath.proxies import lookup
from tokenpath.proxies.timeouts import LONG_STREAMS
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd


def test_a_known_proxys_fix_is_its_long_streams_line() -> None:
    named = name_cut(LimitFound(Measure.MID_STREAM, 59.5, 60.5, None, 6), "nginx")
    assert named is not None
    assert named.limit is Limit.IDLE_MID_STREAM
    assert named.cut_s == 60.5
    assert named.fix == f"nginx: {lookup('nginx').variant(LONG_STREAMS).line}"
    assert "proxy_read_timeout 3600s;" in named.fix


@pytest.mark.parametrize(
    "proxy", ["nginx", "haproxy", "envoy", "apache2", "h2o", "varnish", "squid", "caddy", "lighttpd", "traefik"]
)
def test_every_catalogue_proxy_has_a_line_that_lifts_its_limits(proxy: str) -> None:
    assert lift_line(proxy)


def test_an_idle_limit_nobody_can_configure_asks_for_keep_alives_and_names_the_cloud_default() -> None:
    named = name_cut(LimitFound(Measure.MID_STREAM, 59.5, 60.5, None, 6))
    assert named is not None
    assert "send keep-alives more often than every 59.5 s" in named.fix
    assert "AWS Application Load Balancer" in named.fix
    first = name_cut(LimitFound(Measure.FIRST_BYTE, 19.5, 20.5, None, 6), "no-such-proxy")
    assert first is not None
    assert first.limit is Limit.IDLE_BEFORE_FIRST_BYTE
    assert "Azure Application Gateway" in first.fix


def test_a_total_limit_is_not_fixed_by_keep_alives() -> None:
    named = name_cut(LimitFound(Measure.TOTAL, 29.5, 30.5, None, 6))
    assert named is not None
    assert named.limit is Limit.TOTAL
    assert "keep-alives do not help" in named.fix
    assert "Google Cloud" in named.fix


def test_no_cut_names_nothing() -> None:
    assert name_cut(LimitFound(Measure.TOTAL, 300.0, None, None, 2)) is None


def test_the_cloud_table_cites_a_page_for_each_row() -> None:
    assert all(row.source.startswith("https://") and row.default_s > 0 for row in CLOUD_LIMITS)


def test_a_silence_cut_by_the_total_limit_is_the_totals() -> None:
    idle = LimitFound(Measure.MID_STREAM, 14.0, 16.0, None, 5)
    total = LimitFound(Measure.TOTAL, 14.5, 15.5, None, 5)
    named = path_cuts(PathLimits("http://x", (idle, total), None), "envoy")
    assert [n.limit for n in named] == [Limit.TOTAL]
    alone = path_cuts(PathLimits("http://x", (idle,), None), "envoy")
    assert [n.limit for n in alone] == [Limit.IDLE_MID_STREAM]


def test_one_observed_cut_is_named_from_its_timing() -> None:
    silent_head = StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, at_ns=60_010_000_000, since_last_byte_ns=None)
    named = name_end(silent_head, "nginx")
    assert named is not None
    assert named.limit is Limit.IDLE_BEFORE_FIRST_BYTE
    assert named.cut_s == 60.01
    assert "proxy_read_timeout 3600s;" in named.fix
    mid = StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, at_ns=75_000_000_000, since_last_byte_ns=60_000_000_000)
    named = name_end(mid)
    assert named is not None
    assert named.limit is Limit.IDLE_MID_STREAM
    assert "more often than every 60 s" in named.fix
    assert "AWS Application Load Balancer" in named.fix
    far = name_end(
        StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, at_ns=140_000_000_000, since_last_byte_ns=130_000_000_000)
    )
    assert far is not None
    assert "AWS" not in far.fix  # 60 s is no explanation for a cut at 130 s
    total = StreamEnd(EndKind.CUT_ERROR, BodyEnd.RESET, at_ns=15_000_000_000, since_last_byte_ns=200_000_000)
    named = name_end(total, "envoy")
    assert named is not None
    assert named.limit is Limit.TOTAL
    assert named.cut_s == 15.0
    complete = StreamEnd(EndKind.COMPLETE, BodyEnd.CHUNKED, at_ns=1, since_last_byte_ns=0)
    assert name_end(complete) is None


def test_targets_may_name_their_proxy() -> None:
    assert split_target("nginx=http://127.0.0.1:1/v1") == ("nginx", "http://127.0.0.1:1/v1")
    assert split_target("http://127.0.0.1:1/v1?a=b") == (None, "http://127.0.0.1:1/v1?a=b")
    assert split_target("nginx:long_streams=http://127.0.0.1:1") == ("nginx:long_streams", "http://127.0.0.1:1")
    named = name_cut(LimitFound(Measure.MID_STREAM, 1.0, 1.5, None, 4), "haproxy:stock")
    assert named is not None
    assert named.fix.startswith("haproxy: timeout server 3600s")


def test_keep_alives_measured_not_to_reset_the_idle_timer_are_not_the_fix() -> None:
    idle = LimitFound(Measure.MID_STREAM, 2.524, 3.524, None, 5)
    named = path_cuts(PathLimits("http://x", (idle,), False, 0.631))
    assert len(named) == 1
    assert "do not reset this path's idle timer" in named[0].fix
    assert "send keep-alives" not in named[0].fix
    assert "data events more often than every 2.524 s" in named[0].fix
    known = path_cuts(PathLimits("http://x", (idle,), False, 0.631), "nginx")
    assert "do not reset" in known[0].fix
    assert f"nginx: {lookup('nginx').variant(LONG_STREAMS).line}" in known[0].fix
    unmeasured = path_cuts(PathLimits("http://x", (idle,), None))
    assert "send keep-alives more often than every 2.524 s" in unmeasured[0].fix
    reset = path_cuts(PathLimits("http://x", (idle,), True, 0.631))
    assert reset[0].fix == unmeasured[0].fix


@pytest.mark.parametrize(("text", "said"), [("ngnix=http://127.0.0.1:1", "no proxy 'ngnix'"),
                                            ("nginx:long=http://127.0.0.1:1", "no variant 'long'")])  # fmt: skip
def test_a_name_the_catalogue_does_not_know_is_refused(text: str, said: str) -> None:
    """A misspelt NAME was kept as the path's label and its fix line left out without a word."""
    with pytest.raises(UsageError, match=said):
        split_target(text)
