"""Certification per condition kind, with the runner's streams scripted (no processes): the compression controls
are certified when a condition sends Accept-Encoding, a format's direct stream when a condition uses it."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from tokenpath.audit import AuditVerdict
from tokenpath.errors import CertificationError
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.runner import CERT_FRAMES, Environment, MatrixRunner
from tokenpath.experiment.spec import Condition, parse
from tokenpath.probe.metrics import RunMetrics
from tokenpath.wire.apis import Api

OPENAI = Condition(50.0, 60, "loopback", False)
GZIP = Condition(50.0, 60, "loopback", False, accept_encoding="gzip")
ANTHROPIC = Condition(50.0, 0, "loopback", False, api=Api.ANTHROPIC)
# An Anthropic stream as the stub writes it: three events at once, a token every 50 ms, three at the end.
ANTHROPIC_WRITES = [0.0, 0.1, 0.2, *(20.0 + 50 * i for i in range(CERT_FRAMES)), 570.1, 570.2]


def _run(label: str, arrivals: int, added: float, encoding: str = "identity", writes: int = CERT_FRAMES) -> RunRecord:
    frames = writes
    metrics = RunMetrics("s", 200, frames, arrivals, frames / arrivals, 0.3, 20 + added, {}, {}, 600.0)
    audit = AuditVerdict("s", "complete", frames, 50.0, 0.0, 0.0, 0.0, 0, True)
    record = RunRecord(label, "s", metrics=metrics, path_added_ttft_ms=added, audit=audit, content_encoding=encoding)
    record.writes_ms = [50.0 * i for i in range(frames)]
    return record


class Scripted:
    """What each path does to a stream; a compressing control answers gzip only when gzip was asked for."""

    def __init__(self, probe_decodes: bool = True, anthropic_arrivals: int = 15) -> None:
        self.probe_decodes = probe_decodes
        self.anthropic_arrivals = anthropic_arrivals
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, env: Environment, paths: list[tuple[str, str]], cond: Condition, tokens: int) -> list[RunRecord]:
        out = []
        for label, _ in paths:
            self.asked.append((label, cond.api, cond.accept_encoding))
            gzip = cond.compressed and self.probe_decodes and label.startswith("gzip")
            if cond.api == "anthropic":
                record = _run(label, self.anthropic_arrivals, 0.1, writes=len(ANTHROPIC_WRITES))
                record.writes_ms = list(ANTHROPIC_WRITES)
            elif label == "buffer" or (label == "gzip-hold" and gzip):
                record = _run(label, 1, 560.0, "gzip" if gzip else "identity")
            elif label == "cork":
                record = _run(label, 4, 150.0)
            else:  # direct, pass, gzip-flush, and gzip-hold when nothing asked it to compress
                record = _run(label, CERT_FRAMES, 0.1, "gzip" if gzip else "identity")
            out.append(record)
        return out


def _runner(tmp_path: Path, script: Scripted, force: bool = False) -> tuple[MatrixRunner, Environment]:
    runner = MatrixRunner(parse({}), tmp_path, force=force, console=Console(file=io.StringIO()))
    runner._round = script  # type: ignore[method-assign]
    names = ("pass", "buffer", "cork", "gzip-hold", "gzip-flush")
    env = Environment("loopback", False, stub_url="http://127.0.0.1:1")
    env.controls = {n: SimpleNamespace(url=f"http://127.0.0.1:2/{n}") for n in names}  # type: ignore[misc]
    return runner, env


def _checks(runner: MatrixRunner) -> dict[str, bool]:
    return {c.name: c.passed for c in runner.certification.checks}


def test_identity_openai_conditions_certify_as_before(tmp_path: Path) -> None:
    script = Scripted()
    runner, env = _runner(tmp_path, script)
    runner._certify(env, [OPENAI])
    assert runner.certification.passed
    assert not [n for n in _checks(runner) if "gzip" in n or " in " in n]
    assert not [a for a in script.asked if a[0].startswith("gzip")]


def test_a_compressed_condition_certifies_gzip_hold_as_held_and_gzip_flush_within_the_floor(tmp_path: Path) -> None:
    script = Scripted()
    runner, env = _runner(tmp_path, script)
    runner._certify(env, [OPENAI, GZIP])
    checks = _checks(runner)
    assert checks["gzip-hold relay seen (held: bursts, late; decoded gzip)"]
    assert checks["gzip-flush relay within the floor (decoded gzip)"]
    assert runner.certification.passed
    assert ("gzip-hold", "openai", "gzip") in script.asked  # the controls were asked for gzip


def test_a_client_that_does_not_decode_fails_the_compression_certification(tmp_path: Path) -> None:
    runner, env = _runner(tmp_path, Scripted(probe_decodes=False))
    with pytest.raises(CertificationError, match="certification failed"):
        runner._certify(env, [GZIP])
    assert not _checks(runner)["gzip-hold relay seen (held: bursts, late; decoded gzip)"]
    assert not _checks(runner)["gzip-flush relay within the floor (decoded gzip)"]


def test_another_format_is_certified_on_the_direct_path_in_that_format(tmp_path: Path) -> None:
    script = Scripted()
    runner, env = _runner(tmp_path, script)
    runner._certify(env, [OPENAI, ANTHROPIC])
    assert _checks(runner)["direct streams cleanly in anthropic"]
    assert ("direct", "anthropic", "identity") in script.asked
    assert runner.certification.passed


def test_a_format_whose_direct_stream_arrives_bunched_fails(tmp_path: Path) -> None:
    runner, env = _runner(tmp_path, Scripted(anthropic_arrivals=5), force=True)
    runner._certify(env, [ANTHROPIC])  # forced: recorded as failed, not raised
    assert not _checks(runner)["direct streams cleanly in anthropic"]
    assert not runner.certification.passed
    assert runner.certification.forced
