"""`tokenpath diagnose`'s --stub-url reaches all it is for: the stub's write log that each run is read against (the
audit handed to the series) and the stub's origin behaviour, both asked of the stub, not of the path in front of it.
Every other flag's reach is asserted in tests/diagnose/test_cli.py. The network is scripted (tests/diagnose/test_cli.py
Scripted): no stub, no proxy, no stream. A CLI that read the audit or the origin off the path's URL fails here."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from typer.testing import CliRunner

from tests.diagnose.test_classify import streaming
from tests.diagnose.test_cli import URL, Scripted
from tokenpath.audit import StreamLog
from tokenpath.cli import app
from tokenpath.diagnose import measure
from tokenpath.diagnose.series import Run
from tokenpath.probe.client import ProbeConfig
from tokenpath.stub.presets import OriginBehaviour

STUB = "http://127.0.0.1:8"  # behind the path, which does not forward /_tokenpath/ to it


def no_log(stream_id: str) -> StreamLog | None:
    """The stub's audit as the series reads it: here it has no log of any stream."""
    return None


def test_stub_url_is_where_the_audit_and_the_origin_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted = Scripted(streaming, stub=False)
    audited: list[str] = []
    origins_asked: list[str] = []
    audits_handed: list[object] = []

    def stub_audit(stub_url: str) -> measure.Audit:
        audited.append(stub_url)
        return no_log

    def stub_origin(url: str, timeout_s: float = 2.0) -> OriginBehaviour | None:
        origins_asked.append(url)
        return None

    def run_series(
        template: ProbeConfig, runs: Sequence[Run], probe: object = None, audit: object = None, warm: bool = True
    ) -> list[measure.Measured]:
        audits_handed.append(audit)
        return scripted.run_series(template, runs)

    monkeypatch.setattr(measure, "is_stub", lambda url, timeout_s=2.0: url == STUB)  # the path itself is no stub
    monkeypatch.setattr(measure, "stub_audit", stub_audit)
    monkeypatch.setattr(measure, "stub_origin", stub_origin)
    monkeypatch.setattr(measure, "run_series", run_series)
    out = CliRunner().invoke(app, ["diagnose", URL, "--stub-url", STUB])
    assert out.exit_code == 0, out.output
    assert audited == [STUB]
    assert origins_asked == [STUB]
    assert audits_handed
    assert all(audit is no_log for audit in audits_handed)  # every run is read against the stub's log
