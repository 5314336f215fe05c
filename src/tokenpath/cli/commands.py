"""Every command by name, in the order `tokenpath --help` lists them, with the line it lists for each: what the CLI
knows of a command before it imports it (click's LazyGroup pattern: a process builds only the command it runs)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """One command: its function `name` in the module tokenpath.cli.`name`; `summary` is its docstring's first
    paragraph as written (tests/test_cli_startup.py holds the two equal), which `tokenpath --help` shows."""

    name: str
    summary: str

    @property
    def short_help(self) -> str:
        """The summary as one line for the command list: Typer's rich markup keeps a list entry's single newlines, so
        the docstring's own line ends would break each entry where the source does, at any terminal width."""
        return " ".join(self.summary.split())

    @property
    def module(self) -> str:
        return f"tokenpath.cli.{self.name}"

    def load(self) -> Callable[..., Any]:
        function: Callable[..., Any] = getattr(importlib.import_module(self.module), self.name)
        return function


COMMANDS = (
    Command(
        "stub",
        "Serve a model stub that streams every API format (--api) on its route, with exact pacing and an audit log of\n"
        "every write. A request's own pacing (its body's `tokenpath` member) overrides these flags' for that request.",
    ),
    Command(
        "probe",
        "Measure one stream at a time through a raw socket: reads, frames, frames per read, TTFB, TTFT, bursts. The\n"
        "stub's pacing options ask a tokenpath stub behind the path for that pacing (the body's `tokenpath` member).",
    ),
    Command("relay", "A relay that delays or compresses in a known way: the control the instrument must detect."),
    Command("matrix", "Run a buffering experiment: real proxies x conditions x runs, certified, with exclusions."),
    Command("sweep", "Sweep frame size x interval through one proxy and infer what makes it flush (size? timer?)."),
    Command(
        "load",
        "TTFT added by each target under concurrency, joined to the stub's write log, the direct path as the floor.\n"
        "The stub's options (--interval-ms ... --pause-after) start load's stub with them, or are checked against a\n"
        "--stub-url stub's own.",
    ),
    Command("demo", "A quick certified matrix: every installed proxy, stock and with its fix, plus the controls."),
    Command(
        "gateway",
        "A streaming OpenAI gateway: JWT auth, backend pools, failover before the first byte, per-read relay.",
    ),
    Command(
        "monitor",
        "Watch TTFT from outside: a synthetic client that probes each target on a schedule, for Prometheus. The\n"
        "request's options (--api ... --h2-window) are the one --url target's.",
    ),
    Command("report", "Render results.json as one self-contained HTML page (inline SVG charts), Markdown and CSV."),
    Command(
        "diagnose",
        "Run a short series through a path, growing it until it can tell, and name what the path does to a token\n"
        "stream and the line that fixes it.",
    ),
    Command(
        "timeouts",
        "Find each path's limits on a token stream: the longest silence it survives before the first byte and\n"
        "mid-stream, the longest total, and whether keep-alives reset its idle timer. All probes of all paths wait at\n"
        "once. Progress on stderr. In any API format (--api: the stub's silences in its shape), over HTTP/1.1 or "
        "HTTP/2\nwith prior knowledge (--http2); no TLS yet.",
    ),
    Command(
        "origin",
        "Start a real inference server as an origin: its version, model, settings and what it does besides pacing\n"
        "(its HTTP/1.0 framing, the headers a path acts on) on its `listening on` line; stopped with everything it\n"
        "started on Ctrl-C or SIGTERM, also while it is still loading.",
    ),
    Command(
        "record",
        "Record a real server's response shape: its headers, how it frames a stream for HTTP/1.0, each event's bytes\n"
        "and kind, grouped as it wrote them, and when (`tokenpath stub --replay FILE` plays it back, audited).",
    ),
)
BY_NAME = {c.name: c for c in COMMANDS}
