"""Certification over HTTP/3 with the runner's streams scripted (no processes): the controls are Caddy 2.11's clean
h3 site (h3-direct, the floor), its response_buffers variant and Caddy in front of the cork relay; a holding control
the instrument does not see as held fails the certificate, and so does a probe that did not speak HTTP/3."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from tokenpath.audit import AuditVerdict
from tokenpath.errors import CertificationError
from tokenpath.experiment.h3controls import H3_CONTROLS
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.runner import CERT_FRAMES, Environment, MatrixRunner
from tokenpath.experiment.spec import Condition, parse
from tokenpath.probe.metrics import RunMetrics
from tokenpath.wire.httpversion import HttpVersion

H3 = Condition(50.0, 60, "loopback", True, http_version=HttpVersion.HTTP3)


def _run(label: str, arrivals: int, added: float, version: str) -> RunRecord:
    metrics = RunMetrics("s", 200, CERT_FRAMES, arrivals, CERT_FRAMES / arrivals, 0.3, 20 + added, {}, {}, 600.0)
    audit = AuditVerdict("s", "complete", CERT_FRAMES, 50.0, 0.0, 0.0, 0.0, 0, True)
    record = RunRecord(
        label, "s", metrics=replace(metrics, http_version=version), path_added_ttft_ms=added, audit=audit
    )
    record.writes_ms = [50.0 * i for i in range(CERT_FRAMES)]
    return record


class Scripted:
    """Each path as it streams; over HTTP/3 the held control holds unless `buffer_streams`."""

    def __init__(self, buffer_streams: bool = False, spoke: str | None = None) -> None:
        self.buffer_streams, self.spoke = buffer_streams, spoke
        self.asked: list[tuple[str, str]] = []

    def __call__(self, env: Environment, paths: list[tuple[str, str]], cond: Condition, tokens: int) -> list[RunRecord]:
        out = []
        for label, _ in paths:
            self.asked.append((label, cond.http_version))
            version = self.spoke or cond.http_version
            if label in ("buffer", "h3-buffer") and not (label == "h3-buffer" and self.buffer_streams):
                out.append(_run(label, 1, 560.0, version))
            elif label in ("cork", "h3-cork"):
                out.append(_run(label, 4, 150.0, version))
            else:
                out.append(_run(label, CERT_FRAMES, 0.1, version))
        return out


def _runner(tmp_path: Path, script: Scripted) -> tuple[MatrixRunner, Environment]:
    runner = MatrixRunner(parse({}), tmp_path, console=Console(file=io.StringIO()))
    runner._round = script  # type: ignore[method-assign]
    env = Environment("loopback", True, stub_url="http://127.0.0.1:1")
    names = ("pass", "buffer", "cork", *(c.name for c in H3_CONTROLS))
    env.controls = {n: SimpleNamespace(url=f"https://127.0.0.1:2/{n}") for n in names}  # type: ignore[misc]
    return runner, env


def test_http3_is_certified_through_the_h3_controls(tmp_path: Path) -> None:
    script = Scripted()
    runner, env = _runner(tmp_path, script)
    runner._certify(env, [H3])
    checks = {c.name: c for c in runner.certification.checks}
    assert runner.certification.passed
    assert checks["Caddy response_buffers seen held (HTTP/3)"].passed
    assert checks["direct over HTTP/3: not run"].passed  # a stated reason, in the certificate
    over_h3 = {label for label, version in script.asked if version == HttpVersion.HTTP3}
    assert over_h3 == {"h3-direct", "h3-buffer", "h3-cork"}  # never the stub or a relay, which speak no QUIC


def test_a_held_control_not_seen_held_over_http3_fails_the_certificate(tmp_path: Path) -> None:
    runner, env = _runner(tmp_path, Scripted(buffer_streams=True))
    with pytest.raises(CertificationError, match="certification failed"):
        runner._certify(env, [H3])
    assert not next(c for c in runner.certification.checks if c.name.startswith("Caddy response_buffers")).passed


def test_probes_that_did_not_speak_http3_fail_the_certificate(tmp_path: Path) -> None:
    runner, env = _runner(tmp_path, Scripted(spoke="2"))
    with pytest.raises(CertificationError):
        runner._certify(env, [H3])
    assert not next(c for c in runner.certification.checks if c.name == "probes spoke HTTP/3").passed
