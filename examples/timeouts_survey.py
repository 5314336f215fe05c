"""The stock-limits survey (issue 36): every installed catalogue proxy, stock and long_streams, in front of one
stub, measured by `tokenpath timeouts` in one run (all probes wait at once: it takes about --max plus the longest
limit, a quarter of an hour with the defaults below, at no CPU cost).

    PYTHONPATH=src .venv/bin/python examples/timeouts_survey.py [--max 660] [--out timeouts.json]

Progress goes to stderr; the table (or --json) to stdout; docs/findings.md §13 has the figures and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
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
)
VARIANTS = ("stock", LONG_STREAMS, "ingress_nginx", "f5_ingress", "envoy_gateway")


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
        argv = ["timeouts", *targets, "--min", "1", "--max", args.max, "--resolution", args.resolution]
        return subprocess.run(tokenpath_argv(*argv, *(["--json"] if args.json else [])), check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
