"""`tokenpath load --plan`: how many cores each role needs for a level, from the per-frame costs measured here.

A closed-loop stream lasts ttft + tokens x interval and carries tokens + 3 frames (role delta, the tokens, the
finish chunk, [DONE]), so C open streams move C x (tokens + 3) / duration frames per second through every role:
the stub writes each one, the proxy relays it, the client reads it. Cores = frames/s x CPU per frame, kept under
UTILISATION of each core so the role measures instead of queueing. The costs default to what bench/RESULTS.md
measured on this project's 2-core VM (loopback, where the sender's write also runs the receiver's TCP path: the
stub's figure is an upper bound for a stub on its own host); give your own with the --*-us-per-frame flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.table import Table

from tokenpath.errors import UsageError
from tokenpath.progress import escaped

UTILISATION = 0.7  # a role busier than this per core starts to add queueing delay to what it measures
FRAMES_EXTRA = 3  # role delta, finish chunk, [DONE]

# CPU per frame, µs, measured here (bench/RESULTS.md): the lean client (bench/client_scaling.py, 8.6-9.0), one stub
# worker at its ~40,000 writes/s ceiling (bench/stub_drift.py, ~25 incl. the kernel's loopback path), and the
# proxies' sampled CPU at 200 streams x 71 frames/s (tokenpath load): nginx 0.24 cores, the gateway 0.37, Node 0.64.
CLIENT_US = 8.8
STUB_US = 25.0
PROXY_US = {"nginx": 17.0, "gateway": 26.0, "node": 45.0}
STUB_WRITES_PER_WORKER = 40_000  # one stub worker's ceiling, measured: past it, pacing drifts


@dataclass(frozen=True, slots=True)
class RolePlan:
    role: str
    us_per_frame: float
    cores: float  # at UTILISATION
    processes: int  # client workers / stub workers / proxy cores to give it
    why: str


@dataclass(frozen=True, slots=True)
class LevelPlan:
    streams: int
    frames_per_s: float
    roles: tuple[RolePlan, ...]


def plan(
    levels: tuple[int, ...],
    *,
    tokens: int,
    interval_ms: float,
    ttft_ms: float,
    client_us: float = CLIENT_US,
    stub_us: float = STUB_US,
    proxy: str = "gateway",
    proxy_us: float | None = None,
) -> list[LevelPlan]:
    if proxy_us is None:
        if proxy not in PROXY_US:
            raise UsageError(
                f"no measured cost for {proxy!r}: give `proxy_us_per_frame` (known: {', '.join(sorted(PROXY_US))})"
            )
        proxy_us = PROXY_US[proxy]
    for name, value in (("client", client_us), ("stub", stub_us), ("proxy", proxy_us)):
        if not 0 < value < math.inf:
            raise UsageError(f"`{name}_us_per_frame` must be > 0 (and finite)")
    if not levels or min(levels) < 1:
        raise UsageError("`levels` needs levels >= 1, e.g. 50,200,500")
    for name, value in (("interval_ms", interval_ms), ("ttft_ms", ttft_ms)):
        if not 0 <= value < math.inf:
            raise UsageError(f"`{name}` must be a finite number >= 0, not {value}")
    stream_s = (ttft_ms + tokens * interval_ms) / 1000
    if stream_s <= 0:
        raise UsageError("a plan needs streams that last: `ttft_ms` or `interval_ms` > 0")
    out = []
    for streams in levels:
        fps = streams * (tokens + FRAMES_EXTRA) / stream_s
        client = fps * client_us / 1e6 / UTILISATION
        stub = fps * stub_us / 1e6 / UTILISATION
        stub_workers = max(math.ceil(stub), math.ceil(fps / STUB_WRITES_PER_WORKER))
        relay = fps * proxy_us / 1e6 / UTILISATION
        out.append(
            LevelPlan(
                streams,
                fps,
                (
                    RolePlan(
                        "client",
                        client_us,
                        client,
                        math.ceil(client),
                        "one --client-workers process per core (a process is one event loop)",
                    ),
                    RolePlan(
                        "stub",
                        stub_us,
                        stub,
                        stub_workers,
                        f"--stub-workers; one worker writes at most ~{STUB_WRITES_PER_WORKER:,} frames/s",
                    ),
                    RolePlan(
                        f"proxy ({proxy})",
                        proxy_us,
                        relay,
                        math.ceil(relay),
                        "cores the path under test needs, on its own node (a single-process proxy caps at one)",
                    ),
                ),
            )
        )
    return out


PLAN_NOTE = (
    "Costs measured on a 2-core VM over loopback (bench/RESULTS.md and docs/scale.md in tokenpath's source "
    "repository, whose bench/client_scaling.py measures the client's); pass yours with "
    "--client/--stub/--proxy-us-per-frame."
)


def plan_table(
    levels: tuple[int, ...],
    *,
    tokens: int,
    interval_ms: float,
    ttft_ms: float,
    proxy: str,
    client_us: float | None = None,
    stub_us: float | None = None,
    proxy_us: float | None = None,
) -> Table:
    """`load --plan`'s table: per level, each role's cost per frame, cores and processes, and why."""
    rows = plan(
        levels,
        tokens=tokens,
        interval_ms=interval_ms,
        ttft_ms=ttft_ms,
        client_us=CLIENT_US if client_us is None else client_us,
        stub_us=STUB_US if stub_us is None else stub_us,
        proxy=proxy.partition(":")[0],
        proxy_us=proxy_us,
    )
    table = Table(
        title=f"load --plan: {tokens} tokens every {interval_ms:g} ms after {ttft_ms:g} ms, "
        f"each role under {UTILISATION:.0%} of its cores"
    )
    for col in ("streams", "frames/s", "role", "µs/frame", "cores", "processes", "why"):
        table.add_column(col, justify="left" if col in ("role", "why") else "right")
    for level in rows:
        for i, r in enumerate(level.roles):
            table.add_row(
                str(level.streams) if i == 0 else "",
                f"{level.frames_per_s:,.0f}" if i == 0 else "",
                escaped(r.role),  # "proxy (NAME)": the --proxy the user typed
                f"{r.us_per_frame:g}",
                f"{r.cores:.2f}",
                str(r.processes),
                escaped(r.why),
            )
    return table
