"""`make demo`: a quick matrix of every installed proxy in the catalogue, stock, with its fix and with compression
turned on as people do, plus the controls, at the second article's condition (60-byte frames every 50 ms), asked
the way a browser asks (`Accept-Encoding: gzip, deflate, br, zstd`): a path that compresses answers compressed, one
that does not answers as it would to curl. Certification runs first (the compressing controls too)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tokenpath.experiment.runner import MatrixRunner
from tokenpath.experiment.spec import Condition, Experiment, PathSpec
from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING
from tokenpath.proxies import catalogue
from tokenpath.proxies.relays import CONTROLS
from tokenpath.results.model import MatrixResults


def quick_experiment(runs: int = 3, frames: int = 20) -> Experiment:
    """~55 paths on a machine with the whole catalogue: 20 frames (1 s streams) keep the demo to a few minutes."""
    controls = {c.name for c in CONTROLS}
    paths = [PathSpec("direct")]
    for proxy in catalogue().values():
        if proxy.name not in controls and proxy.runnable and not proxy.openai_only:
            paths += [PathSpec(proxy.name, v.name) for v in proxy.variants]
    paths += [PathSpec(name) for name in ("pass", "cork", "buffer")]
    return Experiment(
        name="demo: every installed proxy, stock, fixed and compressing, 60 B frames every 50 ms, asked as a browser",
        paths=paths,
        conditions=[Condition(50.0, 60, "loopback", False, accept_encoding=BROWSER_ACCEPT_ENCODING)],
        frames=frames,
        runs=runs,
    )


def run_demo(out_dir: Path, console: Console, runs: int = 3) -> MatrixResults:
    return MatrixRunner(quick_experiment(runs), out_dir, console=console).run()
