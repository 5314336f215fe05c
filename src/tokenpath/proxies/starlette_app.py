"""A Starlette (FastAPI's core) streaming endpoint, the application shape users deploy most in Python: httpx relays
the upstream's stream in a `StreamingResponse` (proxies/peers/starlette_proxy.py, package data), run by uvicorn on
the project's own Python; the `peers` extra of pyproject.toml installs starlette, uvicorn and httpx.

What `GZipMiddleware` does to an event stream depends on the Starlette release (checked against its source and
changelog, Kludex/starlette):
- before 0.46 it compressed text/event-stream without a flush: zlib held the events until ~32 KB or the end;
- since 0.46 (#2871) text/event-stream is excluded by default: the `gzip` variant answers identity and streams;
- since 1.5.0 `exclude_content_types` (#3418) can take the exclusion off, and every streamed chunk is flushed with
  Z_SYNC_FLUSH (#3419): the `gzip_sse` variant is compressed and timely.
When it compresses, the middleware holds the response head until the first body chunk (it decides Content-Encoding
there): a server that sends its head before the first token loses that early head behind GZipMiddleware.

Its stream limit is httpx's: `httpx.AsyncClient()` enforces a 5 s timeout on every read unless told otherwise
(python-httpx.org/advanced/timeouts: "the default behavior is to raise a TimeoutException after 5 seconds of network
inactivity"), so a relay written the plain way cuts a silence longer than 5 s, before the first token or mid-stream.
`long_streams` lifts the read timeout (`read=None`).
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from importlib.resources import files
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.proxies.timeouts import LONG_STREAMS, StreamTimeouts

SCRIPT = Path(str(files("tokenpath.proxies") / "peers" / "starlette_proxy.py"))  # installed with the package
MODULES = ("starlette", "uvicorn", "httpx")
MINIMUM_SIZE = 500  # GZipMiddleware's default, written out as users do
GZIP_LINE = f"app.add_middleware(GZipMiddleware, minimum_size={MINIMUM_SIZE})"
GZIP_SSE_LINE = f"app.add_middleware(GZipMiddleware, minimum_size={MINIMUM_SIZE}, exclude_content_types=())"
# httpx's default timeout, 5 s on each read (python-httpx.org/advanced/timeouts; its DEFAULT_TIMEOUT_CONFIG)
HTTPX_READ_TIMEOUT_S = 5.0
LONG_STREAMS_LINE = "httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None))"


class StarletteApp(Proxy):
    name = "starlette"
    package = "starlette, uvicorn, httpx (PyPI; pip install 'tokenpath[peers]')"
    tls_unsupported = "the Starlette peer serves plain HTTP"
    variants = (
        Variant(STOCK.name, "StreamingResponse over httpx's aiter_bytes(), no middleware"),
        Variant(
            "gzip",
            "GZipMiddleware with its defaults: since Starlette 0.46 they exclude text/event-stream, so the stream "
            "passes uncompressed (the head waits for the first chunk); older releases held events until ~32 KB "
            "(fix: upgrade, or exclude text/event-stream)",
            GZIP_LINE,
        ),
        Variant(
            "gzip_sse",
            "GZipMiddleware compressing event streams too: Starlette >= 1.5 flushes every streamed chunk "
            "(Z_SYNC_FLUSH), but the head now waits for the first chunk",
            GZIP_SSE_LINE,
        ),
        Variant(LONG_STREAMS, "httpx's read timeout lifted (stock: 5 s, httpx's default)", LONG_STREAMS_LINE),
    )
    stock_timeouts = StreamTimeouts(idle_s=HTTPX_READ_TIMEOUT_S)

    def binary(self) -> str | None:
        found = all(importlib.util.find_spec(m) is not None for m in MODULES)
        return sys.executable if found else None

    def missing_reason(self) -> str | None:
        if not SCRIPT.exists():
            return f"{SCRIPT} is missing from this installation of tokenpath (package data)"
        if self.binary() is None:
            return f"not installed (pip install 'tokenpath[peers]' into {sys.prefix})"
        return None

    def version(self) -> str:
        if self.binary() is None:
            return "not installed"
        code = f"import importlib.metadata as m; print(', '.join(p + ' ' + m.version(p) for p in {MODULES!r}))"
        return run_quiet([sys.executable, "-c", code])

    def env(self, site: Site) -> dict[str, str]:
        return site.ca_env("SSL_CERT_FILE")  # httpx reads it (trust_env) for an https upstream's private CA

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "starlette.args"
        line = site.variant.line or "(no middleware)"
        command = shlex.join(self.command_line(self.binary() or "python3", site, config))
        config.write_text(f"# tokenpath: Starlette StreamingResponse relay; {line}\n{command}\n")
        return config

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        argv = [binary, str(SCRIPT), "--listen", site.listen.hostport, "--upstream", site.upstream_url]
        if site.variant.name in ("gzip", "gzip_sse"):
            argv += ["--gzip-minimum-size", str(MINIMUM_SIZE)]
        if site.variant.name == "gzip_sse":
            argv.append("--compress-event-streams")
        limits = self.timeouts_for(site)  # None: long_streams
        idle = None if limits is None else limits.idle_s or limits.first_byte_s
        return [*argv, "--read-timeout", "none" if idle is None else f"{idle:g}"]
