"""`make demo`: the instrument's certificate. A paced stub, probed direct and through relays whose behaviour is
known exactly; the probe must see each of them for what it is before anything it reports counts."""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table

from tokenpath.probe.client import ProbeConfig, probe_stream
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.procs import ServiceProcess, tokenpath_argv
from tokenpath.stats import median
from tokenpath.stub.control import fetch_audit, verdicts_by_id

FLOOR_MARGIN_FPR = 0.05  # fpr within this of the direct path's worst run is noise, not a proxy effect


@dataclass(frozen=True, slots=True)
class DemoConfig:
    runs: int = 3
    frames: int = 40
    interval_ms: float = 50.0
    frame_bytes: int = 60
    ttft_ms: float = 90.0
    cork_ms: float = 200.0
    cork_bytes: int = 1448


@dataclass(slots=True)
class PathResult:
    name: str
    expect: str
    runs: list[RunMetrics] = field(default_factory=list)
    audits: list[dict[str, Any]] = field(default_factory=list)

    def med(self, key: str) -> float:
        return median([v for r in self.runs if (v := getattr(r, key)) is not None])

    @property
    def modal_burst(self) -> int:
        counts: Counter[int] = Counter()
        for r in self.runs:
            counts.update(r.bursts)
        return counts.most_common(1)[0][0] if counts else 0

    @property
    def audits_passed(self) -> int:
        return sum(1 for a in self.audits if a.get("passed"))


PATHS = (
    ("direct", "streams"),
    ("pass", "streams"),
    ("cork", "coalesces"),
    ("buffer", "buffers"),
)


def run_demo(cfg: DemoConfig, console: Console) -> tuple[list[PathResult], bool]:
    stub_args = [
        "stub", "--port", "0", "--format", "plain", "--tokens", str(cfg.frames),
        "--interval-ms", str(cfg.interval_ms), "--ttft-ms", str(cfg.ttft_ms), "--frame-bytes", str(cfg.frame_bytes),
    ]  # fmt: skip
    results = {name: PathResult(name, expect) for name, expect in PATHS}
    with contextlib.ExitStack() as stack:
        stub = stack.enter_context(ServiceProcess(tokenpath_argv(*stub_args), "stub"))
        assert stub.url is not None
        upstream = urlsplit(stub.url).netloc
        urls = {"direct": stub.url}
        for mode in ("pass", "cork", "buffer"):
            relay_args = [
                "relay", "--listen", "127.0.0.1:0", "--upstream", upstream, "--mode", mode,
                "--cork-ms", str(cfg.cork_ms), "--cork-bytes", str(cfg.cork_bytes),
            ]  # fmt: skip
            relay = stack.enter_context(ServiceProcess(tokenpath_argv(*relay_args), f"relay-{mode}"))
            assert relay.url is not None
            urls[mode] = relay.url
        console.print(
            f"stub {stub.url}: {cfg.frames} frames of {cfg.frame_bytes} B every {cfg.interval_ms:g} ms, "
            f"first after {cfg.ttft_ms:g} ms; {cfg.runs} runs per path, interleaved"
        )
        ids: dict[str, list[str]] = {name: [] for name in urls}
        for run in range(cfg.runs):
            for name, url in urls.items():  # interleaved, so drift on the host hits every path alike
                trace = probe_stream(ProbeConfig(url=url))
                metrics = run_metrics(trace)
                results[name].runs.append(metrics)
                ids[name].append(trace.stream_id)
                console.print(
                    f"  run {run + 1}/{cfg.runs} {name:<7} fpr {metrics.frames_per_read or 0:6.2f}  "
                    f"ttft {metrics.ttft_ms or 0:8.1f} ms",
                    highlight=False,
                )
        audit = verdicts_by_id(fetch_audit(stub.url, [i for v in ids.values() for i in v], with_log=False))
        for name, stream_ids in ids.items():
            results[name].audits = [audit.get(i, {"passed": False, "stream_id": i}) for i in stream_ids]
    ordered = [results[name] for name, _ in PATHS]
    certified = render(ordered, console)
    return ordered, certified


def verdict(path: PathResult, direct: PathResult) -> str:
    """streams: fpr within the direct floor; buffers: everything in one read; coalesces: anything between."""
    floor = max(r.frames_per_read or 1.0 for r in direct.runs) + FLOOR_MARGIN_FPR
    if path.med("frames_per_read") <= floor:
        return "streams"
    if path.med("arrivals") <= 1:
        return "buffers"
    return "coalesces"


def render(results: list[PathResult], console: Console) -> bool:
    direct = results[0]
    table = Table(title="can the probe see known buffering? (medians; times in ms)")
    for col in ("path", "fpr", "reads", "TTFB", "TTFT", "+TTFT", "burst", "audit", "seen as", "expected"):
        table.add_column(col, justify="left" if col in ("path", "seen as", "expected") else "right", no_wrap=True)
    ok = True
    for path in results:
        seen = verdict(path, direct)
        audit_ok = path.audits_passed == len(path.audits)
        match = seen == path.expect and audit_ok
        ok &= match
        style = "green" if match else "bold red"
        table.add_row(
            path.name,
            f"{path.med('frames_per_read'):.2f}",
            f"{path.med('arrivals'):.0f}",
            f"{path.med('ttfb_ms'):.1f}",
            f"{path.med('ttft_ms'):.1f}",
            "-" if path is direct else f"{path.med('ttft_ms') - direct.med('ttft_ms'):+.1f}",
            str(path.modal_burst),
            f"{path.audits_passed}/{len(path.audits)}",
            f"[{style}]{seen}[/]",
            path.expect,
        )
    console.print(table)
    if ok:
        console.print("[green]certified:[/] direct and pass stream at the floor, cork and buffer are seen, "
                      "and every stub write kept its schedule.")  # fmt: skip
    else:
        console.print("[bold red]NOT certified:[/] the probe did not see a control for what it is, or the stub "
                      "missed its schedule; nothing measured on this host should be trusted.")  # fmt: skip
    return ok
