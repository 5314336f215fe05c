"""Peak RSS and wall time of `tokenpath probe` and `tokenpath monitor --once` against hostile endpoints (issue 22).

The endpoints are tests/probe/hostile.py's loopback servers, in their own process. Each probe is a child process;
its peak RSS is its own ru_maxrss (getrusage via os.wait4). A child still running after --kill-after seconds, or
whose RSS passes --kill-rss MB, is killed (and reported as such, with the peak it had reached).

    .venv/bin/python bench/hostile_rss.py [--total-timeout 5] [--kill-after 60] [--kill-rss 2048] [--json]
    git archive BEFORE src | tar -x -C /tmp/before && .venv/bin/python bench/hostile_rss.py --src /tmp/before/src
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import self_signed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.probe.hostile import Measured, run_measured  # noqa: E402

PROBED = ["flood_tls", "huge_tls", "flood", "huge", "head_trickle", "body_trickle", "handshake_trickle",
          "endless_event", "endless_head"]  # fmt: skip


def measure(argv: list[str], kill_after: float, kill_rss: float, src: str) -> Measured:
    env = {**os.environ, "COLUMNS": "200", **({"PYTHONPATH": src} if src else {})}
    return run_measured(argv, kill_after_s=kill_after, kill_rss_mb=kill_rss, env=env)


def ending(m: Measured) -> str:
    if m.killed:
        return m.killed
    outcomes = []
    for line in m.stderr.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("event") == "probe":
                outcomes.append(f"{record['target']}: {record['outcome']}")
    if outcomes:
        return ", ".join(outcomes)
    errors = [line for line in m.stderr.splitlines() if "error" in line]
    return errors[-1][:140] if errors else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total-timeout", type=float, default=5.0)
    ap.add_argument("--kill-after", type=float, default=60.0)
    ap.add_argument("--kill-rss", type=float, default=2048.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--src",
        default="",
        help="run the children from this source tree (PYTHONPATH), e.g. a checkout of the commit before the fix",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tokenpath-hostile-"))
    files = self_signed(tmp, ["127.0.0.1"])
    server = subprocess.Popen([sys.executable, "-m", "tests.probe.hostile", str(files.cert), str(files.key)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)  # fmt: skip
    urls: dict[str, str] = {}
    assert server.stdout is not None
    try:
        while len(urls) < len(PROBED) + 2:
            name, url = server.stdout.readline().split()
            urls[name] = url
        results: dict[str, Measured] = {}
        timeouts = ["--total-timeout", str(args.total_timeout), "--connect-timeout", "3",
                    "--first-byte-timeout", "3", "--idle-timeout", "30"]  # fmt: skip
        for name in PROBED:
            if args.only and name not in args.only.split(","):
                continue
            argv = tokenpath_argv("probe", urls[name], "--insecure", *timeouts)
            results[f"probe {name}"] = m = measure(argv, args.kill_after, args.kill_rss, args.src)
            print(name, m.peak_rss_mb, m.wall_s, m.returncode, ending(m), file=sys.stderr)
        if not args.only or "monitor" in args.only:
            config = tmp / "monitor.toml"
            lines = ['[monitor]\nmetrics_listen = "127.0.0.1:0"\nmax_concurrency = 16\n',
                     f"[defaults]\ninsecure = true\ntotal_timeout_s = {args.total_timeout}\nconnect_timeout_s = 3\n"
                     "first_byte_timeout_s = 3\nidle_timeout_s = 30\n"]  # fmt: skip
            lines += [f'[[target]]\nname = "{name}"\nurl = "{urls[name]}"\n' for name in PROBED]
            config.write_text("\n".join(lines))
            argv = tokenpath_argv("monitor", str(config), "--once", "--probes", "1", "--log-level", "warning")
            results["monitor --once"] = m = measure(argv, args.kill_after, args.kill_rss, args.src)
            print("monitor", m.peak_rss_mb, m.wall_s, m.returncode, ending(m), file=sys.stderr)
        if args.json:
            print(json.dumps({name: {"peak_rss_mb": m.peak_rss_mb, "wall_s": m.wall_s, "exit": m.returncode,
                                     "ended": ending(m)} for name, m in results.items()}, indent=2))  # fmt: skip
        else:
            print("| run | peak RSS MB | wall s | exit | how it ended |\n|---|---:|---:|---:|---|")
            for name, m in results.items():
                print(f"| {name} | {m.peak_rss_mb} | {m.wall_s} | {m.returncode} | {ending(m)} |")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
