"""A real origin started like a proxy: on a free loopback port, its output in a log file, ready once its model is
loaded (a GET of its ready path answers 200), stopped with every process it started."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tokenpath.errors import ServiceError, UsageError
from tokenpath.hostport import join_hostport
from tokenpath.origins.behaviour import http10_answer
from tokenpath.origins.catalogue import MODEL_ALIAS, Origin, Settings, version
from tokenpath.probe.client import ProbeConfig
from tokenpath.serve import guard
from tokenpath.serve.procs import stop_process_group
from tokenpath.stopsignals import StopSignals
from tokenpath.wire.apis import SPECS, Api

# What every request to a started origin asks: a prompt a small model answers at length, greedy sampling with a seed
# (temperature 0: the same tokens every time, so paired streams carry the same count).
PROMPT = "Count from one to one hundred in words, separated by commas."
SAMPLING: tuple[tuple[str, object], ...] = (("seed", 1), ("temperature", 0))
READY_TIMEOUT_S = 120.0  # loading a 93 MB model takes ~1 s idle; a busy 2-core machine is far slower
POLL_S = 0.2


@dataclass
class RunningOrigin:
    origin: Origin
    settings: Settings
    host: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_s: float = 0.0  # how long it took to be ready
    spawned_at: float = 0.0  # time.monotonic() at its spawn

    @property
    def url(self) -> str:
        return f"http://{join_hostport(self.host, self.port)}"

    @property
    def model(self) -> str:
        return MODEL_ALIAS

    def api_url(self, api: Api) -> str:
        """The streaming route of `api` on this origin (the probe's URL for it)."""
        if api not in self.origin.apis:
            speaks = ", ".join(a.value for a in self.origin.apis)
            raise UsageError(f"{self.origin.name} does not speak {api.value} (it speaks {speaks})")
        return self.url + SPECS[api].path(self.model)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def info(self) -> dict[str, object]:
        return {"name": self.origin.name, **self.origin.info(self.settings), "ready_s": round(self.started_s, 1)}

    def log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process, 5.0)
            guard.forget(self.process.pid)
            self.process = None

    def __enter__(self) -> RunningOrigin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


def start(
    origin: Origin,
    settings: Settings | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> RunningOrigin:
    """Start `origin` and wait until it serves; ServiceError (with its log's tail) if it exits or never does. A
    missing build is a UsageError that says how to make it. `port` 0: a free one."""
    running = spawn(origin, settings, host=host, port=port)
    try:
        await_ready(running, ready_timeout_s)
    except BaseException:
        running.stop()
        raise
    return running


def spawn(origin: Origin, settings: Settings | None = None, *, host: str = "127.0.0.1", port: int = 0) -> RunningOrigin:
    """Start `origin` in its own session, not awaited: a caller that must stop it whatever happens (a stop signal:
    the matrix, `tokenpath origin`) registers its stop (`with`, an ExitStack) between this and await_ready."""
    reason = origin.missing_reason()
    if reason:
        raise UsageError(reason)
    settings = settings or Settings.for_this_machine()
    port = port or _free_port(host)
    fd, log_name = tempfile.mkstemp(prefix=f"tokenpath-{origin.name}-", suffix=".log")
    os.close(fd)
    running = RunningOrigin(origin, settings, host, port, Path(log_name), spawned_at=time.monotonic())
    with running.log_path.open("wb") as log:
        running.process = subprocess.Popen(
            origin.argv(host, port, settings),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **origin.env()},
            start_new_session=True,  # stop() reaches the whole group (uvicorn's workers, if any)
        )
    guard.watch(running.process.pid)  # stopped even if this run is killed (serve/guard.py)
    return running


def await_ready(running: RunningOrigin, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Until a spawned origin serves (its ready path answers 200); ServiceError (with its log's tail) if it exits or
    never does. It is left running either way: stopping it is the caller's."""
    _wait_ready(running, timeout_s)
    running.started_s = time.monotonic() - running.spawned_at


def _wait_ready(running: RunningOrigin, timeout_s: float) -> None:
    path = running.origin.ready_path
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not running.alive:
            code = running.process.returncode if running.process is not None else None
            raise ServiceError(f"{running.origin.name} exited with code {code}:\n{running.log_tail()}")
        if _status(running.host, running.port, path) == 200:
            return
        time.sleep(POLL_S)
    raise ServiceError(
        f"{running.origin.name} was not ready ({path} answering 200) within {timeout_s:.0f} s:\n{running.log_tail()}"
    )


def _status(host: str, port: int, path: str) -> int | None:
    conn = http.client.HTTPConnection(host, port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve(origin: Origin, settings: Settings, host: str, port: int, say: Callable[[str], None]) -> None:
    """`tokenpath origin NAME`: start it, say where it listens (with what it runs and what it does besides pacing,
    measured), and stop it on SIGINT or SIGTERM, also while it is still loading its model (the stop used to wait for
    the load, up to READY_TIMEOUT_S, and then serve its first answer)."""
    try:
        with StopSignals() as signals, contextlib.ExitStack() as stack:
            with signals.held():  # its stop registered before a stop signal can land
                running = stack.enter_context(spawn(origin, settings, host=host, port=port))
            await_ready(running)
            answer = http10_answer(origin_probe(running, origin.apis[0], max_tokens=4))
            say(
                f"listening on {running.url} ({origin.name}: {version()}; model {running.model}; "
                f"{settings.describe()}; ready in {running.started_s:.1f} s; {answer.behaviour.describe()})"
            )
            while running.alive:
                time.sleep(POLL_S)
            raise ServiceError(f"{origin.name} exited:\n{running.log_tail()}")
    except KeyboardInterrupt:  # SIGINT or SIGTERM: stopped with everything it started, as asked
        return


def origin_probe(running: RunningOrigin, api: Api, *, max_tokens: int, prompt: str = PROMPT) -> ProbeConfig:
    """The probe's request to a started origin in `api`: its model, a short deterministic answer (temperature 0,
    a fixed seed: the token count repeats), timeouts for a CPU-bound server on a busy machine."""
    return ProbeConfig(
        url=running.api_url(api),
        model=running.model,
        prompt=prompt,
        max_tokens=max_tokens,
        extra_body=SAMPLING,
        api=api,
        first_byte_timeout_s=120,
        idle_timeout_s=120,
        total_timeout_s=600,
    )
