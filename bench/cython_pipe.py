"""bench/uvloop_pipe.py compiled: its two protocols as Cython cdef classes (bench/cython_pipe.pyx), the same
callbacks and writes per read with no Python frame run for them. bench/gateway_cpu.py `--floor` measures it beside
the interpreted pipe: between the two is what the interpreter costs a relay per read on uvloop; between it and nginx,
what uvloop, libuv and the kernel do.

    .venv/bin/python bench/cython_pipe.py --build                       # builds it (cached), prints the module's path
    .venv/bin/python bench/cython_pipe.py UPSTREAM_HOST UPSTREAM_PORT   # builds if needed, prints `listening on URL`

The build needs Cython (the dev extra) and a C compiler: it is compiled once per source and interpreter, into
$XDG_CACHE_HOME/tokenpath/bench (~/.cache by default). Without either, one line on stderr and exit 2.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("cython_pipe.pyx")


class BuildError(Exception):
    """Cython or a C compiler is missing, or the build failed: what to say."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokenpath" / "bench"


def build() -> Path:
    """The compiled module's path: built now unless this source was built for this interpreter already."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(SOURCE.read_bytes() + sys.version.encode()).hexdigest()[:16]
    built = cache_dir() / f"cython_pipe_{digest}{suffix}"
    if built.exists():
        return built
    if importlib.util.find_spec("Cython") is None:
        raise BuildError("Cython is not installed (pip install cython; the dev extra has it)")
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if shutil.which(cc[0]) is None:
        raise BuildError(f"no C compiler ({cc[0]}) to build bench/cython_pipe.pyx with")
    built.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=built.parent) as work:
        c_file = Path(work) / "cython_pipe.c"
        include = f"-I{sysconfig.get_paths()['include']}"
        steps = [
            [sys.executable, "-m", "cython", "-3", "--module-name", "cython_pipe", str(SOURCE), "-o", str(c_file)],
            [*cc, "-O2", "-shared", "-fPIC", include, str(c_file), "-o", str(Path(work) / built.name)],
        ]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise BuildError(f"{shlex.join(argv[:3])}... failed:\n{done.stdout}{done.stderr}")
        os.replace(Path(work) / built.name, built)  # whole or not at all: a killed build leaves no half module
    return built


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("cython_pipe", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    try:
        path = build()
    except BuildError as exc:
        print(f"cython_pipe: {exc}", file=sys.stderr)
        sys.exit(2)
    if sys.argv[1:] == ["--build"]:
        print(path)
        return
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    import uvloop

    uvloop.run(load(path).serve(sys.argv[1], int(sys.argv[2])))


if __name__ == "__main__":
    main()
