"""The stock-limits survey (issue 36): every installed catalogue proxy, stock and long_streams, in front of one
stub, measured by `tokenpath timeouts` in one run (all probes wait at once: it takes about --max plus the longest
limit, a quarter of an hour with the defaults below, at no CPU cost).

    PYTHONPATH=src .venv/bin/python examples/timeouts_survey.py [--max 660] [--json]

Progress goes to stderr (each try as it ends, and every PROGRESS_EVERY_S the time so far against --max, the round
that bounds the run); then a summary on stdout, one line per proxy: each stock limit found with the cut's kind, and
whether its long_streams variant came through every measure up to --max (the fix holds), or the JSON (--json).
docs/findings.md §15 has the figures and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.proxies.timeouts import LONG_STREAMS
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

# The catalogue's proxies in front of a stub (the gateways and the Node/Python peers have their own limits elsewhere).
PROXIES = (
    "nginx",
    "haproxy",
    "haproxy3",
    "caddy",
    "caddy-2.11",
    "apache2",
    "h2o",
    "lighttpd",
    "varnish",
    "squid",
    "traefik",
    "envoy",
    "starlette",  # httpx's 5 s read timeout
    "node",  # fetch's (undici's) 300 s body and headers timeouts
    "gateway",  # tokenpath's own [limits] (its 900 s total is above the default --max: found with --max 960)
)
VARIANTS = ("stock", LONG_STREAMS, "ingress_nginx", "f5_ingress", "envoy_gateway")
PROGRESS_EVERY_S = 30.0
MEASURES = ("first_byte", "mid_stream", "total")


def wait_with_progress(proc: subprocess.Popen[str], max_s: float) -> str:
    """The survey's stdout once it ends; meanwhile a line every PROGRESS_EVERY_S: the time so far against --max (the
    first round holds every path without a limit that long; the last confirms the longest limit found)."""
    started = time.monotonic()
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    reader = threading.Thread(target=read, daemon=True)  # a pipe is read while the process writes it
    reader.start()
    while proc.poll() is None:
        reader.join(PROGRESS_EVERY_S)
        if not reader.is_alive():  # its output closed: it is ending
            proc.wait()
        elif proc.poll() is None:
            took = time.monotonic() - started
            share = min(100.0, 100 * took / max_s)
            print(
                f"survey: {took / 60:.1f} min of about {max_s / 60:.1f} min (--max) plus the longest limit "
                f"({share:.0f} % of --max)",
                file=sys.stderr,
                flush=True,
            )
    reader.join()
    return "".join(out)


def limit_cell(found: dict[str, Any] | None, max_s: float) -> str:
    if found is None:
        return "-"
    survived, cut = found["longest_survived_s"], found["shortest_cut_s"]
    if cut is None:
        return f"none up to {max_s:g} s"
    how = found["cut"]["kind"] if found.get("cut") else "held"
    bracket = f"below {cut:g}" if survived is None else f"{survived:g}-{cut:g}"
    return f"{bracket} s ({how})"


def summary(doc: dict[str, Any], max_s: float) -> list[str]:
    """One line per path: its limits, then per proxy whether long_streams came through every measure up to --max."""
    rows = [["path", *MEASURES, "keep-alives reset idle"]]
    lifted: dict[str, bool] = {}
    for path in doc["paths"]:
        label = path.get("proxy") or path["target"]
        by = {found["measure"]: found for found in path["limits"]}
        reset = path.get("keepalives_reset_idle")
        rows.append([label, *(limit_cell(by.get(m), max_s) for m in MEASURES), "-" if reset is None else str(reset)])
        name, _, variant = label.partition(":")
        if variant == LONG_STREAMS:
            lifted[name] = all(found["shortest_cut_s"] is None for found in path["limits"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append("")
    for name, holds in lifted.items():
        verdict = f"came through every measure up to {max_s:g} s" if holds else "was cut: the fix does not hold"
        lines.append(f"{name}: long_streams {verdict}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max", default="660", help="longest silence or total tried, s (Varnish's total is 600)")
    parser.add_argument("--resolution", default="2", help="bracket each limit this closely, s")
    parser.add_argument("--json", action="store_true", help="the survey's JSON document on stdout")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        stub = stack.enter_context(ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub"))
        url = urlsplit(stub.url or "")
        upstream = Endpoint(url.hostname or "127.0.0.1", url.port or 0)
        targets = []
        for name in PROXIES:
            proxy = catalogue()[name]
            if proxy.missing_reason():
                print(f"skipped {name}: {proxy.missing_reason()}", file=sys.stderr)
                continue
            for variant in (v for v in proxy.variants if v.name in VARIANTS):
                site = Site(Endpoint("127.0.0.1", free_port()), upstream, new_workdir(name), variant)
                running: RunningProxy = start(proxy, site)
                stack.callback(running.stop)
                targets.append(f"{name}:{variant.name}={running.url}")
                print(f"{name}:{variant.name} at {running.url}", file=sys.stderr)
        argv = ["timeouts", *targets, "--min", "1", "--max", args.max, "--resolution", args.resolution, "--json"]
        proc = subprocess.Popen(tokenpath_argv(*argv), stdout=subprocess.PIPE, text=True)
        out = wait_with_progress(proc, float(args.max))
        if proc.returncode != 0:
            return proc.returncode
        doc = json.loads(out)
        print(json.dumps(doc, indent=2) if args.json else "\n".join(summary(doc, float(args.max))), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
