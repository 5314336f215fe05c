"""The monitor's probe log line (one JSON line per probe)."""

from __future__ import annotations

import json
import logging

import pytest

from tokenpath.monitor.probing import ProbeOutcome
from tokenpath.monitor.runner import log_outcome


def test_a_probe_s_log_line_never_carries_the_target_url_s_user_or_password(caplog: pytest.LogCaptureFixture) -> None:
    """The exporter's targets are URLs from the scrape (`/probe?target=http://user:pw@host/v1`): its probe log line
    names the target without the credentials a URL can carry (a hostile pass found the password logged)."""
    target = "http://user:secretpw@10.0.0.5:8000/v1?key=secretq"
    with caplog.at_level(logging.INFO):
        log_outcome(ProbeOutcome(target, "via", "s1", "connect", "cannot connect to 10.0.0.5:8000", None, (), 0.0))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "secret" not in line
    assert json.loads(line)["target"] == "http://10.0.0.5:8000/v1"


@pytest.mark.parametrize("name", ["edge#1", "a?b", "X:prod", "ingress"])
def test_a_config_target_s_name_is_logged_as_it_is(name: str, caplog: pytest.LogCaptureFixture) -> None:
    """A name is the metrics' `target` label: the log line must name it the same way."""
    with caplog.at_level(logging.INFO):
        log_outcome(ProbeOutcome(name, "via", "s1", "connect", "cannot connect", None, (), 0.0))
    (line,) = [r.getMessage() for r in caplog.records]
    assert json.loads(line)["target"] == name
