"""What every proxy in the catalogue provides, and how one is started, awaited and stopped.

A proxy runs in the foreground on a free loopback port (or a namespace address), with a private work directory
for its config, pid and logs. Readiness is its listening port accepting a connection.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tokenpath.errors import ProxyError, UsageError
from tokenpath.hostport import join_hostport, parse_hostport
from tokenpath.proxies.timeouts import LONG_STREAMS, NO_LIMITS, StreamTimeouts
from tokenpath.serve import guard
from tokenpath.serve.procs import stop_process_group
from tokenpath.serve.tlscert import TLSFiles
from tokenpath.tools import INSTALL_HINT, tool

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Variant:
    """A named config change, e.g. nginx `proxy_buffering off`. `stock` is the untouched default."""

    name: str
    description: str
    line: str = ""  # the config line(s) that make the variant, as a user would write them (the report shows it)


STOCK = Variant("stock", "the distribution's defaults for a plain reverse proxy")


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    @property
    def hostport(self) -> str:
        return join_hostport(self.host, self.port)


@dataclass(frozen=True, slots=True)
class UpstreamTLS:
    """An https upstream: the name its certificate is checked against (and sent as SNI), and whom to trust."""

    server_name: str
    cacert: Path | None = None  # None: the system's CA store

    @property
    def ca_bundle(self) -> Path:
        """A file for proxies that need one even for the system store."""
        return self.cacert or SYSTEM_CA_BUNDLE


SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's ca-certificates


@dataclass(slots=True)
class Site:
    """Everything a proxy's config needs to know."""

    listen: Endpoint
    upstream: Endpoint
    workdir: Path
    variant: Variant = STOCK
    tls: TLSFiles | None = None
    # A real endpoint instead of the stub (`upstream = URL` in an experiment): https to it, the Host it expects
    # (a proxy passing the client's own Host would reach the wrong virtual host), and the key a gateway sends.
    upstream_tls: UpstreamTLS | None = None
    upstream_host: str = ""  # "" for the stub: each proxy's own default Host, as measured so far
    upstream_api_key_env: str = ""
    # What an AI gateway is configured with (it calls the OpenAI API itself rather than passing bytes on): the
    # upstream's API base path and model name. The stub's by default.
    upstream_path: str = "/v1"
    upstream_model: str = "tokenpath-stub"
    # Limits to render instead of the proxy's stock ones (tests and surveys use 1-2 s ones); long_streams ignores it.
    timeouts: StreamTimeouts | None = None

    @property
    def upstream_url(self) -> str:
        return f"{'https' if self.upstream_tls else 'http'}://{self.upstream.hostport}"

    @property
    def upstream_api_base(self) -> str:
        """The OpenAI API base a gateway calls, e.g. http://127.0.0.1:8000/v1."""
        return self.upstream_url + self.upstream_path

    def ca_env(self, *names: str) -> dict[str, str]:
        """A private CA for an https upstream, in the variables a gateway's TLS stack reads (none for the stub)."""
        cacert = self.upstream_tls.cacert if self.upstream_tls else None
        return {name: str(cacert) for name in names} if cacert else {}


Wrap = Callable[[list[str]], list[str]]  # e.g. prefixes `ip netns exec NS`


def no_wrap(argv: list[str]) -> list[str]:
    return argv


class Proxy:
    """Base for catalogue entries. Subclasses set name/binaries/variants and write their config."""

    name = ""
    binaries: tuple[str, ...] = ()
    variants: tuple[Variant, ...] = (STOCK,)
    package = ""  # the Debian package that provides it, for the 'not installed' message
    runnable = True  # False: config shipped for the Docker export only
    image = ""  # pinned image for the Docker export
    tls_unsupported = ""  # why this proxy cannot terminate TLS here, when it cannot
    upstream_tls_unsupported = ""  # why it cannot reach an https upstream, when it cannot
    container_config = ""  # compose-only proxies: where their image reads its config
    openai_only = False  # re-serialises OpenAI chunks (a gateway): measured by `load`, not the byte-level matrix
    tool_paths: tuple[str, ...] = ()  # executables under the tools folder (tokenpath.tools), looked for first
    tools_only = False  # found only there (a second version of something Debian also ships)
    announces_url = False  # it picks its own port and prints "listening on URL" (the URL replaces site.listen)
    start_timeout_s = START_TIMEOUT_S  # how long start() waits for it to accept
    base_path = ""  # where its OpenAI API lives, e.g. "/openai/v1" (clients append /chat/completions)
    drops_stream_id = False  # drops the stream header, the body's `user` and the chunk ids: the id rides in the prompt
    attached = False  # already running somewhere (proxies/attached.py): never started, configured or stopped here
    # Its shipped or documented limits on a streamed response (proxies/timeouts.py), rendered into every variant
    # but long_streams; NO_LIMITS: none by default (the module cites where that is documented).
    stock_timeouts: StreamTimeouts = NO_LIMITS

    def timeouts_for(self, site: Site) -> StreamTimeouts | None:
        """The limits its config renders for `site`: None for long_streams (lifted), else the site's or stock."""
        if site.variant.name == LONG_STREAMS:
            return None
        return site.timeouts if site.timeouts is not None else self.stock_timeouts

    def binary(self) -> str | None:
        for relative in self.tool_paths:
            found = tool(relative)
            if found is not None:
                return str(found)
        if self.tools_only:
            return None
        for name in self.binaries:
            for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
                if candidate and os.access(candidate, os.X_OK):
                    return candidate
        return None

    def require_binary(self) -> str:
        binary = self.binary()
        if binary is None:
            raise ProxyError(f"{self.name}: {self.missing_reason()}")
        return binary

    def missing_reason(self) -> str | None:
        if not self.runnable:
            return "no Debian package on this machine; config shipped for the Docker export"
        if self.binary() is None:
            if self.tool_paths:
                return f"not installed ({INSTALL_HINT})"
            return f"not installed (apt-get install {self.package or self.name})"
        return None

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        known = ", ".join(v.name for v in self.variants)
        raise ProxyError(f"{self.name} has no variant {name!r}; known: {known}")

    def version(self) -> str:
        return "unknown"

    def write_config(self, site: Site) -> Path:
        raise NotImplementedError

    def argv(self, site: Site, config: Path) -> list[str]:
        """The command that runs it here: `command_line` with the installed binary (ProxyError with the reason when
        there is none). Entries whose command is not a binary's (peers, relays, custom commands) override this."""
        return self.command_line(self.require_binary(), site, config)

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        """Its command line with `binary` as the executable: argv() passes the installed one, a compose file the
        image's (image_argv). Writing it never needs the binary."""
        raise NotImplementedError

    @property
    def image_binary(self) -> str:
        """The executable's name in its image: the binary's own name, installed here or not."""
        return Path(self.tool_paths[0]).name if self.tool_paths else self.binaries[0]

    def image_argv(self, site: Site, config: Path) -> list[str]:
        """What its container image runs (the compose export): the same command, the image's executable."""
        return self.command_line(self.image_binary, site, config)

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        """What the proxy says it runs (e.g. `nginx -T`); the written file when it has no such command."""
        return config.read_text()

    def env(self, site: Site) -> dict[str, str]:
        return {}

    def api_key(self, site: Site) -> str | None:
        """The key a client must send, for proxies that require one (LiteLLM)."""
        return None

    def files_outside(self, pid: int) -> list[Path]:
        """Files the running proxy (its process `pid` and its children) made outside its working directory, which
        it leaves behind when stopped: removed after it stops (RunningProxy.stop). Nothing by default."""
        return []

    def request_headers(self, site: Site) -> tuple[tuple[str, str], ...]:
        """Headers a client must send for this proxy to route the request (e.g. Portkey's provider headers)."""
        return ()

    def request_model(self, model: str) -> str:
        """The model name a client must ask this proxy for, to reach the stub's `model` (its naming scheme)."""
        return model

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        """Why this path cannot serve HTTP `http` ("1.1" or "2") to the client ("" when it can; HTTP/2 is ALPN h2
        over TLS, h2c with prior knowledge over cleartext; the upstream stays HTTP/1.1). A runner skips such a
        condition on the path with this reason: a client that fell back to HTTP/1.1 would measure something else
        under the h2 label."""
        return H2_NONE if http == "2" else ""

    def client_h3_unsupported(self, variant: Variant, tls: bool) -> str:
        """Why this path cannot serve HTTP/3 to the client ("" when it can: a QUIC listener on the port's UDP twin,
        with TLS). A runner skips an HTTP/3 condition on the path with this reason, as for HTTP/2."""
        return H3_NONE


H2_NONE = "no HTTP/2 listener in its catalogue config: HTTP/1.1 to the client only"
H3_NONE = "no HTTP/3 (QUIC) listener in its catalogue config"


def client_version_unsupported(proxy: Proxy, variant: Variant, tls: bool, http: str) -> str:
    """Why `proxy` cannot serve HTTP `http` ("1.1", "2" or "3") to the client ("" when it can): the one question
    for every runner; HTTP/3 is answered by its QUIC listener (client_h3_unsupported), the others by
    client_http_unsupported."""
    return (
        proxy.client_h3_unsupported(variant, tls) if http == "3" else proxy.client_http_unsupported(variant, tls, http)
    )


def h2_hint(variant: Variant, h2_variants: tuple[str, ...]) -> str:
    """The usual reason: "" when `variant` is one of `h2_variants`, else which variants serve HTTP/2."""
    if variant.name in h2_variants:
        return ""
    names = ", ".join(h2_variants)
    return f"the {variant.name!r} variant speaks HTTP/1.1 to the client; HTTP/2 is the {names} variant"


@dataclass
class RunningProxy:
    proxy: Proxy
    site: Site
    process: subprocess.Popen[bytes] | None  # None: an attached path, running outside this run
    config: Path
    effective: str = ""
    log_path: Path = field(default_factory=Path)
    outside: set[Path] = field(default_factory=set)  # files it made outside its workdir: removed by stop()

    @property
    def origin(self) -> str:
        return f"{'https' if self.site.tls else 'http'}://{self.site.listen.hostport}"

    @property
    def url(self) -> str:
        return f"{self.origin}{self.proxy.base_path}"

    @property
    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def note_files_outside(self) -> None:
        """What the proxy made outside its workdir so far (Proxy.files_outside), looked up while it runs: once it
        has stopped, its pid may be another process's."""
        if self.process is not None and self.process.poll() is None:
            self.outside |= set(self.proxy.files_outside(self.process.pid))

    def stop(self) -> None:
        """Stops the proxy and every process it started (see procs.stop_process_group), then removes its files."""
        self.note_files_outside()  # what it made since it started accepting
        if self.process is not None:
            stop_process_group(self.process, STOP_TIMEOUT_S)
            guard.forget(self.process.pid)
        for path in (self.site.workdir, *sorted(self.outside)):
            shutil.rmtree(path, ignore_errors=True)


def start(
    proxy: Proxy,
    site: Site,
    *,
    wrap: Wrap = no_wrap,
    connect: Callable[[Endpoint], socket.socket] | None = None,
    timeout_s: float | None = None,
) -> RunningProxy:
    """Write the config, start the proxy in the foreground in its own session, wait until it accepts (within
    `timeout_s`, by default the proxy's own start_timeout_s); stopped again if that fails."""
    running = spawn(proxy, site, wrap=wrap)
    try:
        await_ready(running, wrap=wrap, connect=connect, timeout_s=timeout_s)
    except BaseException:
        running.stop()
        raise
    return running


def spawn(proxy: Proxy, site: Site, *, wrap: Wrap = no_wrap) -> RunningProxy:
    """Write the config and start the proxy in its own session, not awaited: a caller that must stop it whatever
    happens (a stop signal, load/runner.py) registers its stop between this and await_ready."""
    site.workdir.mkdir(parents=True, exist_ok=True)
    config = proxy.write_config(site)
    log_path = site.workdir / "output.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            wrap(proxy.argv(site, config)),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=site.workdir,
            env={**os.environ, **proxy.env(site)},
            start_new_session=True,
        )
    guard.watch(process.pid)  # stopped even if this run is killed (serve/guard.py)
    return RunningProxy(proxy, site, process, config, log_path=log_path)


def await_ready(
    running: RunningProxy,
    *,
    wrap: Wrap = no_wrap,
    connect: Callable[[Endpoint], socket.socket] | None = None,
    timeout_s: float | None = None,
) -> None:
    """Until a spawned proxy accepts (or announces its URL), then what it runs; ProxyError when it exits or does not
    accept in time. It is left running either way: stopping it is the caller's."""
    proxy, site, process = running.proxy, running.site, running.process
    assert process is not None
    timeout_s = proxy.start_timeout_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise ProxyError(f"{proxy.name} exited with code {process.returncode}:\n{running.log_tail()}")
        if proxy.announces_url:
            announced = _LISTENING.search(running.log_path.read_text(errors="replace"))
            if announced:
                try:
                    site.listen = Endpoint(*parse_hostport(urlsplit(announced.group(1)).netloc, proxy.name))
                except UsageError as exc:
                    raise ProxyError(f"{exc} (announced by {proxy.name})") from None
                break
        elif _accepts(site.listen, connect):
            break
        if time.monotonic() > deadline:
            raise ProxyError(f"{proxy.name} did not accept on {site.listen.hostport} within {timeout_s:.0f} s")
        time.sleep(0.02)
    running.effective = proxy.effective_config(site, running.config, wrap)
    running.note_files_outside()  # now, while its pid is surely its own (it may die before stop())


_LISTENING = re.compile(r"listening on (https?://\S+)")


def attach(
    proxy: Proxy,
    site: Site,
    connect: Callable[[Endpoint], socket.socket] | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> RunningProxy:
    """An attached path as the runner holds a started one, once it accepts a connection (it may be starting too:
    Compose starts the proxy services after the runner's, so that the runner's name resolves for them)."""
    deadline = time.monotonic() + timeout_s
    while not _accepts(site.listen, connect):
        if time.monotonic() > deadline:
            raise ProxyError(f"{proxy.name}: nothing accepts at {site.listen.hostport} within {timeout_s:.0f} s")
        time.sleep(0.1)
    effective = f"# already running at {site.listen.hostport}; its configuration is not visible to tokenpath\n"
    return RunningProxy(proxy, site, None, Path(), effective=effective)


def _accepts(endpoint: Endpoint, connect: Callable[[Endpoint], socket.socket] | None) -> bool:
    try:
        sock = connect(endpoint) if connect else socket.create_connection((endpoint.host, endpoint.port), 0.5)
    except OSError:
        return False
    sock.close()
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (bound and released): the proxy binds it a moment later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def new_workdir(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"tokenpath-{name}-"))


def run_quiet(argv: Sequence[str], timeout_s: float = 10.0, env: dict[str, str] | None = None) -> str:
    """Output (stdout + stderr) of a short command, for versions and config dumps; never raises."""
    try:
        out = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, **env} if env else None,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({' '.join(argv)} failed: {exc})"
    return (out.stdout + out.stderr).strip()
