"""`tokenpath monitor` as a process: the Exporter (metrics served, the watch run, the OTLP export when asked for)
under serve.runner until SIGTERM/SIGINT; and the one-shot gate for pipelines."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from tokenpath.errors import RuleBreached, UsageError
from tokenpath.hostport import join_hostport
from tokenpath.monitor import otlp
from tokenpath.monitor.config import MonitorConfig
from tokenpath.monitor.metrics import MonitorMetrics
from tokenpath.monitor.otlp_endpoint import shown
from tokenpath.monitor.rules import Rule
from tokenpath.monitor.runner import Breach, TargetSummary, Watch, check_rules, run_once
from tokenpath.serve import exposition
from tokenpath.serve.runner import Config, Server


def serve(config: MonitorConfig, announce: Callable[[str], None]) -> None:
    """Probe until SIGTERM or SIGINT (serve.runner's signals). Stopping aborts the probes in flight, so it never
    waits out a timeout."""
    if config.settings.otlp_endpoint is not None:
        otlp.require()  # before anything listens: a missing package is a usage error, not a dead export
    host, port = config.metrics_host_port
    server = Server(Config("monitor", host, port, loop="asyncio"), lambda _sock: Exporter(config, server.exit))
    server.run(announce)
    announce("stopped")


class Exporter:
    """The monitor as the runner's app: /metrics served from threads (serve.exposition), the watch on a thread of
    its own; close() stops the watch, which aborts its probes in flight. `on_end` is told if the watch ends by
    itself (it raised), so the process stops and the error is seen instead of a silent exporter. With
    `otlp_endpoint`, the watch's outcomes also go to an OtlpExport, flushed once the watch has stopped."""

    def __init__(self, config: MonitorConfig, on_end: Callable[[], None]) -> None:
        self.config = config
        self.metrics = MonitorMetrics(config)
        self.otlp = otlp.OtlpExport(config) if config.settings.otlp_endpoint is not None else None
        self.watch = Watch(config, self.metrics, sinks=(self.otlp,) if self.otlp is not None else ())
        self._on_end = on_end
        self._httpd: WSGIServer | None = None
        self._watching: asyncio.Future[None] | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() first"
        return f"http://{join_hostport(self.config.metrics_host_port[0], self._httpd.server_address[1])}/metrics"

    def note(self) -> str:
        also = ""
        if self.otlp is not None:
            also = f"; OTLP to {shown(self.otlp.endpoint)} every {self.config.settings.otlp_interval_s:g} s"
        return f"Prometheus{also}; probing {', '.join(t.name for t in self.config.targets)}"

    async def start(self) -> None:
        host, port = self.config.metrics_host_port
        self._httpd = exposition.serve(host, port, self.metrics.registry)  # a port in use fails here, before a probe
        self._watching = asyncio.get_running_loop().run_in_executor(None, self.watch.run)
        self._watching.add_done_callback(lambda _: self._on_end())

    async def close(self) -> None:
        self.watch.stop()
        try:
            if self._watching is not None:
                await self._watching
        finally:
            if self.otlp is not None:  # after the watch: every outcome it recorded is in the flush
                await asyncio.get_running_loop().run_in_executor(None, self.otlp.close)
            if self._httpd is not None:
                threading.Thread(target=self._httpd.shutdown, daemon=True).start()


def once(config: MonitorConfig, cycles: int, rules: tuple[Rule, ...]) -> tuple[list[TargetSummary], list[Breach]]:
    """`cycles` probes of every route, then the rules. Raises RuleBreached (after the caller has shown the
    summary, via `finish`) when a rule is breached."""
    if cycles < 1:
        raise UsageError("`probes` must be >= 1")
    direct = [t.name for t in config.targets if "direct" in t.routes]
    if not direct and any(r.base == "added_ttft" for r in rules):
        raise UsageError("`fail_on` added_ttft needs a target with a `direct_url`: nothing to subtract")
    summaries = run_once(config, cycles)
    return summaries, check_rules(rules, summaries)


def finish(breaches: list[Breach]) -> None:
    if breaches:
        lines = [b.line() for b in breaches]
        raise RuleBreached(lines[0] + "".join(f"\n  also: {line}" for line in lines[1:]))
