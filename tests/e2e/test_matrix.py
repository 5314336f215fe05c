"""`tokenpath matrix` against real proxies (Debian packages installed by scripts/install-proxies).

The facts asserted are the ones measured on this machine and explained in docs/findings.md: HAProxy 2.6 on a stock
config delivers 60-byte frames in bursts, ~200 ms late, and `option http-no-delay` removes it; stock nginx speaks
HTTP/1.0 upstream, so a compliant server sends a close-delimited body and nginx holds it in its buffers, while
`proxy_buffering off` or `proxy_http_version 1.1` stream.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tokenpath.proxies import lookup
from tokenpath.serve.procs import tokenpath_argv

FRAMES = 12  # 600 ms streams: HAProxy still holds bursts of ~4 (200 ms), nginx still the whole body

needs_proxies = pytest.mark.skipif(
    lookup("nginx").binary() is None or lookup("haproxy").binary() is None,
    reason="nginx and haproxy are not installed (make test installs them as root: scripts/install-proxies)",
)


# What a loaded host may still exclude from a `--force` run in the four-at-a-time lane: a run whose stub wrote late
# (the audit), never one the path cut or refused.
LOAD_EXCLUSIONS = {"stub audit failed"}


def streamed(row: dict[str, Any]) -> bool:
    """Every run of the row streamed over its transport: none excluded for anything but the host's load."""
    return set(row["exclusions"]) <= LOAD_EXCLUSIONS


def run_matrix(
    tmp_path: Path,
    toml: str,
    *extra: str,
    timeout: float = 300,
    pids: list[int] | None = None,
    exit_code: int = 0,
) -> tuple[dict[str, Any], str]:
    """Run the matrix CLI; `pids` (if given) receives the matrix process's pid (its veth namespaces carry it)."""
    exp = tmp_path / "exp.toml"
    exp.write_text(toml)
    with subprocess.Popen(
        tokenpath_argv("matrix", str(exp), "--out", str(tmp_path / "out"), *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
    ) as proc:  # fmt: skip
        if pids is not None:
            pids.append(proc.pid)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert out.returncode == exit_code, out.stdout[-3000:] + out.stderr[-3000:]
    doc: dict[str, Any] = json.loads((tmp_path / "out" / "results.json").read_text())
    report = tmp_path / "out" / "report.html"
    assert f"report: {report}" in out.stdout
    assert report.read_text().startswith("<!doctype html>")
    return doc, out.stdout


def namespaces() -> set[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip()}


def namespaces_of(pid: int) -> set[str]:
    """The namespaces a matrix process made (netns.VethPair tags them with its pid): other tests running beside
    this one (the sweep over veth) make their own."""
    return {n for n in namespaces() if n.endswith(f"-{pid}")}


def row(doc: dict[str, Any], proxy: str, variant: str = "stock", **cond: Any) -> dict[str, Any]:
    matches = [
        r for r in doc["rows"]
        if r["proxy"] == proxy and r["variant"] == variant and all(r[k] == v for k, v in cond.items())
    ]  # fmt: skip
    assert len(matches) == 1, (proxy, variant, cond, [(r["proxy"], r["variant"]) for r in doc["rows"]])
    found: dict[str, Any] = matches[0]
    return found


# The known facts and the stub-header condition from one certified run: one certification, one set of proxies.
KNOWN_FACTS = f"""
name = "ci"
frames = {FRAMES}
runs = 3
[conditions]
interval_ms = [50]
frame_bytes = [60]
stub_headers = [{{}}, {{"X-Accel-Buffering" = "no"}}]
[[proxy]]
name = "nginx"
variants = ["stock", "proxy_buffering_off", "http_1_1"]
[[proxy]]
name = "haproxy"
variants = ["stock", "http_no_delay"]
"""


@needs_proxies
def test_known_facts_on_nginx_and_haproxy_and_a_stub_header_condition(tmp_path: Path) -> None:
    """One test, not two sharing a module fixture: the timed lane runs two tests at a time, and a fixture shared
    by tests on two workers would run the certified matrix twice."""
    doc, _ = run_matrix(tmp_path, KNOWN_FACTS)
    known_facts_hold(doc, tmp_path / "out")
    a_stub_header_is_a_declared_condition_does_x_accel_buffering_fix_nginx(doc)


def known_facts_hold(doc: dict[str, Any], out: Path) -> None:
    assert doc["certification"]["passed"], doc["certification"]
    assert {c["name"] for c in doc["certification"]["checks"] if c["passed"]} >= {
        "buffer relay seen (one arrival)", "cork relay seen (bursts, late)", "pass relay within the floor",
    }  # fmt: skip
    assert row(doc, "direct", stub_headers={})["within_floor"] is True
    haproxy = row(doc, "haproxy", stub_headers={})
    assert haproxy["fpr_median"] >= 3
    assert haproxy["added_ttft_ms_median"] >= 100
    assert row(doc, "haproxy", "http_no_delay", stub_headers={})["within_floor"] is True
    nginx = row(doc, "nginx", stub_headers={})
    assert nginx["arrivals_median"] == 1  # HTTP/1.0 upstream, close-delimited body: held in nginx's buffers
    assert row(doc, "nginx", "proxy_buffering_off", stub_headers={})["within_floor"] is True
    assert row(doc, "nginx", "http_1_1", stub_headers={})["within_floor"] is True
    for r in doc["rows"]:
        for key in ("proxy", "variant", "interval_ms", "frame_bytes", "link", "tls", "runs", "excluded",
                    "fpr_median", "added_ttft_ms_median"):  # fmt: skip
            assert key in r
    assert "nginx -T" not in doc["proxies"]["nginx"]["variants"]["stock"]["config"]
    assert "configuration file" in doc["proxies"]["nginx"]["variants"]["stock"]["config"]  # nginx -T output
    assert (out / "table.md").read_text().count("\n| ") >= 6
    assert len((out / "results.csv").read_text().splitlines()) == 1 + 6 * 2  # six paths, two conditions


def a_stub_header_is_a_declared_condition_does_x_accel_buffering_fix_nginx(doc: dict[str, Any]) -> None:
    header = {"X-Accel-Buffering": "no"}
    stock = row(doc, "nginx", stub_headers={})
    fixed = row(doc, "nginx", stub_headers=header)
    assert stock["arrivals_median"] == 1  # stock nginx holds the whole response
    assert fixed["within_floor"] is True  # the header alone makes it stream
    assert row(doc, "haproxy", stub_headers=header)["fpr_median"] >= 3  # HAProxy knows no such header: still held
    labels = {s["label"] for s in doc["exclusion_shares"]}  # schema 7: "condition" is its value, "label" its words
    assert "60 B @ 50 ms, loopback, stub sends X-Accel-Buffering: no" in labels
