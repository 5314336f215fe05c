"""`tokenpath load` with one spawn held at the worst moment for a stop signal (test_stop_while_starting.py).

`python gated_load.py GATE_DIR AT load ARGS...`: the first spawn of AT (`stub`, `relay`: the Popen of a command whose
argv holds that word; `pool`: the first client process's submit) returns only once GATE_DIR/release exists (at most
RELEASE_S), after writing its child's pid to GATE_DIR/gated. A signal sent meanwhile lands where one landing between a
process's spawn and its stop's registration would: inside Popen with its child running, or among a pool's submits.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

RELEASE_S = 20.0


def hold(gate: Path, pid: int) -> None:
    (gate / "gated.tmp").write_text(str(pid))
    (gate / "gated.tmp").replace(gate / "gated")  # whole or absent: a reader never sees it empty
    deadline = time.monotonic() + RELEASE_S
    while not (gate / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # a stop signal's KeyboardInterrupt lands here, unless the caller holds it


def gate_popen(gate: Path, word: str) -> None:
    real = subprocess.Popen.__init__
    held: list[int] = []

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        real(self, args, *rest, **kw)
        if not held and isinstance(args, list) and word in args:
            held.append(self.pid)
            hold(gate, self.pid)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]


def gate_pool(gate: Path) -> None:
    real = ProcessPoolExecutor.submit
    held: list[int] = []

    def submit(self: ProcessPoolExecutor, *args: Any, **kw: Any) -> Any:
        future = real(self, *args, **kw)
        if not held:
            held.append(max(self._processes or [0]))
            hold(gate, held[0])
        return future

    ProcessPoolExecutor.submit = submit  # type: ignore[method-assign,assignment]


def main() -> None:
    gate, at, *argv = sys.argv[1:]
    if at == "pool":
        gate_pool(Path(gate))
    else:
        gate_popen(Path(gate), at)
    sys.argv = ["tokenpath", *argv]
    from tokenpath.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
