"""`tokenpath monitor` as a process: metrics served, signals handled, the watch run until SIGTERM/SIGINT; and the
one-shot gate for pipelines."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

from tokenpath import exposition
from tokenpath.errors import RuleBreached, UsageError
from tokenpath.monitor.config import MonitorConfig
from tokenpath.monitor.metrics import MonitorMetrics
from tokenpath.monitor.rules import Rule
from tokenpath.monitor.runner import Breach, TargetSummary, Watch, check_rules, run_once


def serve(config: MonitorConfig, announce: Callable[[str], None]) -> None:
    """Probe until SIGTERM or SIGINT. Stopping aborts the probes in flight, so it never waits out a timeout."""
    metrics = MonitorMetrics(config)
    host, port = config.metrics_host_port
    httpd = exposition.serve(host, port, metrics.registry)  # a port in use fails here, before any probe
    watch = Watch(config, metrics)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        watch.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        bound = httpd.server_address[1]
        names = ", ".join(t.name for t in config.targets)
        announce(f"listening on http://{host}:{bound}/metrics (Prometheus); probing {names}")
        watch.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        threading.Thread(target=httpd.shutdown, daemon=True).start()
    announce("stopped")


def once(config: MonitorConfig, cycles: int, rules: tuple[Rule, ...]) -> tuple[list[TargetSummary], list[Breach]]:
    """`cycles` probes of every route, then the rules. Raises RuleBreached (after the caller has shown the
    summary, via `finish`) when a rule is breached."""
    if cycles < 1:
        raise UsageError("--probes must be >= 1")
    direct = [t.name for t in config.targets if "direct" in t.routes]
    if not direct and any(r.base == "added_ttft" for r in rules):
        raise UsageError("--fail-on added_ttft needs a target with a direct_url (--direct-url): nothing to subtract")
    summaries = run_once(config, cycles)
    return summaries, check_rules(rules, summaries)


def finish(breaches: list[Breach]) -> None:
    if breaches:
        lines = [b.line() for b in breaches]
        raise RuleBreached(lines[0] + "".join(f"\n  also: {line}" for line in lines[1:]))
