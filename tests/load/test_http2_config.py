"""LoadConfig's HTTP/2 options: checked before anything starts, and written into results.json's config."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tokenpath.errors import UsageError
from tokenpath.load.runner import LoadConfig, LoadRunner, _config_json
from tokenpath.proxies import lookup
from tokenpath.wire.httpversion import HttpVersion


def test_http2_options_without_http2_are_refused() -> None:
    with pytest.raises(UsageError, match="http2"):
        LoadConfig(targets=(), streams_per_connection=50)
    with pytest.raises(UsageError, match="http2"):
        LoadConfig(targets=(), h2_window="browser")


@pytest.mark.parametrize("window", ["huge", "-1", "0"])
def test_a_bad_window_is_refused(window: str) -> None:
    with pytest.raises(UsageError):
        LoadConfig(targets=(), http_version=HttpVersion.HTTP2, h2_window=window)


def test_streams_per_connection_must_be_positive() -> None:
    with pytest.raises(UsageError, match="streams_per_connection"):
        LoadConfig(targets=(), http_version=HttpVersion.HTTP2, streams_per_connection=0)


def test_the_config_records_the_http_version_and_the_window() -> None:
    cfg = LoadConfig(targets=(), http_version=HttpVersion.HTTP2, h2_window="browser", streams_per_connection=50)
    doc = _config_json(cfg)
    assert (doc["http_version"], doc["h2_window"], doc["streams_per_connection"]) == ("2", "browser", 50)
    plain = _config_json(LoadConfig(targets=()))
    assert (plain["http_version"], plain["h2_window"], plain["streams_per_connection"]) == ("1.1", None, 1)


def test_a_catalogue_target_that_cannot_speak_the_run_http_version_is_skipped_with_its_reason(tmp_path: Path) -> None:
    from tokenpath.proxies.custom import CustomProxy

    nginx = lookup("nginx")
    h2 = LoadRunner(LoadConfig(targets=(), http_version=HttpVersion.HTTP2), tmp_path, Console())
    h11 = LoadRunner(LoadConfig(targets=()), tmp_path, Console())
    assert "HTTP/1.1 to the client" in (h2._http_unsupported(nginx, nginx.variant("stock")) or "")
    assert h2._http_unsupported(nginx, nginx.variant("http2")) is None
    assert h11._http_unsupported(nginx, nginx.variant("stock")) is None
    assert "h2c only" in (h11._http_unsupported(nginx, nginx.variant("http2")) or "")  # its cleartext port
    command = CustomProxy("mine", "mine --listen {listen} --to {upstream}")
    assert h2._http_unsupported(command, command.variant("stock")) is None  # speaks what the user says


def test_a_level_row_over_http2_carries_connections_stalls_and_data_frames_per_read() -> None:
    from tokenpath.load.runner import Cell, _level_row, connection_split
    from tokenpath.results.model import MedianAndTail

    cfg = LoadConfig(targets=(), http_version=HttpVersion.HTTP2, streams_per_connection=50)
    cell = Cell("nginx", 50.0, stall_ms=[0.0, 0.0, 4.0, 12.0], stalls=5, stalled=2, data_frames=300, data_reads=200,
                connections=5, peer_limit=10)  # fmt: skip
    row = _level_row(cell, MedianAndTail(), cfg)
    assert (row.http_version, row.streams_per_connection, row.connections) == ("2", 50, 5)
    assert row.connection_split == connection_split(cell, cfg)
    assert row.connection_split is not None
    assert "allows 10 concurrent streams per connection, 50 were asked: 5 connections" in row.connection_split
    stalls = row.flow_control_stalls
    assert stalls is not None
    assert (stalls.streams, stalls.stalled_streams, stalls.stalls) == (4, 2, 5)
    assert row.data_frames_per_read == 1.5
    plain = _level_row(Cell("nginx", 50.0), MedianAndTail(), LoadConfig(targets=()))
    assert (plain.http_version, plain.flow_control_stalls, plain.connections) == ("1.1", None, None)
