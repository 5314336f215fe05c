"""`make demo`: a quick matrix of every installed proxy in the catalogue, stock and with its fix, plus the
controls, at the second article's condition (60-byte frames every 50 ms). Certification runs first."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tokenpath.experiment.runner import MatrixRunner
from tokenpath.experiment.spec import Condition, Experiment, PathSpec
from tokenpath.proxies import catalogue
from tokenpath.proxies.relays import CONTROLS
from tokenpath.results.model import MatrixResults


def quick_experiment(runs: int = 3, frames: int = 30) -> Experiment:
    controls = {c.name for c in CONTROLS}
    paths = [PathSpec("direct")]
    for proxy in catalogue().values():
        if proxy.name not in controls and proxy.runnable and not proxy.openai_only:
            paths += [PathSpec(proxy.name, v.name) for v in proxy.variants]
    paths += [PathSpec(name) for name in ("pass", "cork", "buffer")]
    return Experiment(
        name="demo: every installed proxy, stock and fixed, 60 B frames every 50 ms",
        paths=paths,
        conditions=[Condition(50.0, 60, "loopback", False)],
        frames=frames,
        runs=runs,
    )


def run_demo(out_dir: Path, console: Console, runs: int = 3) -> MatrixResults:
    return MatrixRunner(quick_experiment(runs), out_dir, console=console).run()
