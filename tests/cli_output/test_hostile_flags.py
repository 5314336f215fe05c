"""A hostile CLI review's findings (2026-12-07): a flag no run could use is refused in one line, exit 2, before
anything is measured or recorded (a directory as an output file, an existing file as --out, an unknown --log-level,
NaN or infinite numbers), never a traceback after a long run; a URL's credentials and query are masked where a
command prints or saves it."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers import accept_each, stub_upstream
from tokenpath.cli import app
from tokenpath.proxies.base import Endpoint

CLOSED = "http://127.0.0.1:9/v1"  # nothing listens: a command that got past its checks would fail differently


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def refused(*args: str) -> str:
    out = run(*args)
    assert out.exit_code == 2, out.output
    assert "Traceback" not in out.output
    text: str = out.output
    return text


def test_timeouts_refuses_an_html_path_it_cannot_write_before_the_survey(tmp_path: Path) -> None:
    """Was: the whole survey (up to ~3 x --max), then IsADirectoryError and the table never printed."""
    assert f"--html {tmp_path}: a directory; name a file" in refused("timeouts", CLOSED, "--html", str(tmp_path))
    missing = tmp_path / "no" / "x.html"
    assert "cannot write there" in refused("timeouts", CLOSED, "--html", str(missing))


@pytest.mark.parametrize("command", [["matrix", "examples/quick.toml"], ["demo"]])
def test_an_out_that_is_a_file_is_refused_before_certification(tmp_path: Path, command: list[str]) -> None:
    """Was: every certification run, then FileExistsError in a traceback."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    out = refused(*command, "--out", str(a_file))
    assert f"--out {a_file}: cannot write results there" in out


def test_record_refuses_an_unknown_api_and_an_out_it_cannot_write_before_recording(tmp_path: Path) -> None:
    assert "--api: unknown API format 'bogus'" in refused("record", CLOSED, "--api", "bogus")
    assert f"--out {tmp_path}: a directory; name a file" in refused("record", CLOSED, "--out", str(tmp_path))
    assert "cannot write there" in refused("record", CLOSED, "--out", str(tmp_path / "no" / "r.json"))


@pytest.fixture
def resetting() -> Iterator[str]:
    """A server that reads the request, then resets the connection."""
    listener = socket.create_server(("127.0.0.1", 0))

    def reset(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    accept_each(listener, reset)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    listener.close()


def test_record_names_a_reset_as_probe_does(resetting: str, tmp_path: Path) -> None:
    """Was: ConnectionResetError in a traceback (origins/behaviour.py's HTTP/1.0 request)."""
    out = run("record", resetting, "--out", str(tmp_path / "r.json"))
    assert out.exit_code != 0
    assert "the connection was reset" in out.output
    assert "Traceback" not in out.output


@pytest.mark.parametrize(
    "command", [["gateway", "--upstream", CLOSED, "--no-auth"], ["monitor", "--url", CLOSED, "--once"]]
)
def test_an_unknown_log_level_is_one_line(command: list[str]) -> None:
    """Was: logging's ValueError in a traceback."""
    assert "--log-level 'bogus': expected debug, info, warning, error" in refused(*command, "--log-level", "bogus")


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "60001"])
def test_a_cork_time_that_is_no_finite_number_is_refused(value: str) -> None:
    """Was: NaN crashed every request (an empty reply); inf, or 1e300, held every byte until the client gave up."""
    out = refused("relay", "--upstream", "127.0.0.1:9", "--mode", "cork", "--cork-ms", value)
    assert "--cork-ms a number of ms > 0 and <= 60000" in out


def test_timeouts_refuses_an_infinite_max() -> None:
    assert "--max (inf) must be a finite number of seconds" in refused("timeouts", CLOSED, "--max", "inf")


def test_report_refuses_a_screenshot_path_that_is_a_directory_or_empty(tmp_path: Path) -> None:
    """Was: `screenshot: DIR`, exit 0, no PNG written; '' was dropped in silence."""
    assert "a directory; name the PNG file to write" in refused("report", str(tmp_path), "--screenshot", str(tmp_path))
    assert "--screenshot '': name the PNG file to write" in refused("report", str(tmp_path), "--screenshot", "")


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


def test_probe_and_record_mask_a_urls_credentials_and_query(stub: Endpoint, tmp_path: Path) -> None:
    """probe's table title and record's saved `source.url` carried `user:password@` and a `?key=` whole."""
    url = f"http://alice:hunter2pw@{stub.host}:{stub.port}/v1/chat/completions?key=SEKRETQ"
    probed = run("probe", url, "--runs", "1")
    assert probed.exit_code == 0, probed.output
    assert f"tokenpath probe http://***@{stub.host}:{stub.port}/v1/chat/completions?***" in probed.output
    saved = tmp_path / "r.json"
    recorded = run("record", url, "--out", str(saved))
    assert recorded.exit_code == 0, recorded.output
    text = saved.read_text()
    assert "SEKRETQ" not in text
    assert json.loads(text)["source"]["url"].endswith("/v1/chat/completions?***")


def test_load_refuses_a_target_url_before_measuring_the_direct_path() -> None:
    """Was: the direct path measured first (about 108 s at the defaults), then the URL refused."""
    out = refused("load", "--target", "ftp://x", "--stub-url", "http://127.0.0.1:9", "--concurrency", "1")
    assert "URL 'ftp://x': expected http:// or https://" in out
