"""Issue 35's nine configurations, written by hand from each proxy's own documentation (not the catalogue's files),
in front of one `tokenpath stub`: each diagnosed as a user would (`tokenpath diagnose URL --json`), the fix line it
prints applied by hand, and diagnosed again. Done when each names the right cause, its fix fixes it, and the second
diagnosis does not suggest the same line again (no loop).

The diagnoses run three at a time: a paced series mostly waits on its schedule. The held paths grow their series to
its bound (a few 3-second streams), so this file takes a minute or two on a loaded machine.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.proxies import lookup
from tokenpath.proxies.base import free_port
from tokenpath.serve.procs import stop_process_group, tokenpath_argv

pytestmark = pytest.mark.e2e
PARALLEL = 3
START_S = 20.0
STOP_S = 10.0  # SIGTERM to a proxy's group, then SIGKILL to what is left
APACHE_MODULES = "/usr/lib/apache2/modules"


@dataclass(frozen=True, slots=True)
class HandWritten:
    """One configuration: writes its files into `workdir` for a proxy on `port` in front of the stub on `stub`, and
    returns the command that runs it in the foreground. `fixed` is the same with the printed fix applied."""

    name: str
    binary: str | None
    write: Callable[[Path, int, int, bool], list[str]]
    proxy_flag: tuple[str, ...] = ()  # --proxy for a proxy whose headers do not name it
    # False for a configuration that already streams: diagnose prints no fix, so there is no second one to diagnose
    has_fix: bool = True


# --- the configurations -------------------------------------------------------------------------------------------


def nginx(extra: str, fixed_extra: str) -> Callable[[Path, int, int, bool], list[str]]:
    """nginx.org's "Beginner's Guide" proxy server: a location with proxy_pass, and the lines under test."""

    def write(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
        conf = workdir / "nginx.conf"
        conf.write_text(f"""daemon off;
master_process off;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {workdir}/body;
  proxy_temp_path {workdir}/proxy;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{stub};
      {fixed_extra if fixed else extra}
    }}
  }}
}}
""")
        return [lookup("nginx").require_binary(), "-c", str(conf), "-p", str(workdir)]

    return write


def haproxy(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
    """The configuration manual's minimal HTTP proxy: defaults, a frontend, a backend."""
    conf = workdir / "haproxy.cfg"
    conf.write_text(f"""defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  {"option http-no-delay" if fixed else ""}
frontend web
  bind 127.0.0.1:{port}
  default_backend stub
backend stub
  server s1 127.0.0.1:{stub}
""")
    return [lookup("haproxy").require_binary(), "-db", "-f", str(conf)]


def lighttpd(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
    """lighttpd's mod_proxy documentation: proxy.server for every path."""
    (workdir / "www").mkdir(exist_ok=True)
    conf = workdir / "lighttpd.conf"
    conf.write_text(f"""server.modules = ("mod_proxy")
server.document-root = "{workdir}/www"
server.bind = "127.0.0.1"
server.port = {port}
proxy.server = ("" => (("host" => "127.0.0.1", "port" => {stub})))
{"server.stream-response-body = 2" if fixed else ""}
""")
    return [lookup("lighttpd").require_binary(), "-D", "-f", str(conf)]


def apache_deflate(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
    """mod_proxy's ProxyPass and mod_deflate's "compress only a few types" (AddOutputFilterByType): it streams, so
    there is no fix to apply (has_fix False: it is diagnosed once)."""
    modules = ("mpm_event", "authz_core", "proxy", "proxy_http", "filter", "deflate")
    loads = "\n".join(f"LoadModule {m}_module {APACHE_MODULES}/mod_{m}.so" for m in modules)
    conf = workdir / "httpd.conf"
    conf.write_text(f"""ServerRoot "{workdir}"
ServerName localhost
DefaultRuntimeDir "{workdir}"
PidFile "{workdir}/httpd.pid"
ErrorLog "{workdir}/error.log"
Mutex file:{workdir}
User www-data
Group www-data
{loads}
Listen 127.0.0.1:{port}
AddOutputFilterByType DEFLATE text/event-stream
ProxyPass "/" "http://127.0.0.1:{stub}/"
""")
    return [lookup("apache2").require_binary(), "-DFOREGROUND", "-f", str(conf)]


def traefik(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
    """Traefik's file provider with one router and the compress middleware in the docs' minimal form."""
    options = '{excludedContentTypes: ["text/event-stream"]}' if fixed else "{}"
    dynamic = workdir / "routes.yml"
    dynamic.write_text(f"""http:
  routers:
    all:
      rule: "PathPrefix(`/`)"
      service: stub
      middlewares: [compress]
  middlewares:
    compress:
      compress: {options}
  services:
    stub:
      loadBalancer:
        servers: [{{url: "http://127.0.0.1:{stub}"}}]
""")
    binary = lookup("traefik@3.3.2").binary()
    assert binary is not None
    return [binary, f"--entryPoints.web.address=127.0.0.1:{port}", f"--providers.file.filename={dynamic}"]


def envoy(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
    """Envoy's compressor filter as its documentation shows it, with the zstd library (gzip once fixed)."""
    library = "gzip" if fixed else "zstd"
    kind = "gzip.compressor.v3.Gzip" if fixed else "zstd.compressor.v3.Zstd"
    conf = workdir / "envoy.yaml"
    conf.write_text(f"""static_resources:
  listeners:
  - address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: stub, timeout: 0s}}
          http_filters:
          - name: envoy.filters.http.compressor
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor
              response_direction_config:
                common_config:
                  content_type: [text/event-stream]
              compressor_library:
                name: {library}
                typed_config:
                  "@type": type.googleapis.com/envoy.extensions.compression.{kind}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: stub
    type: STATIC
    load_assignment:
      cluster_name: stub
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {stub}}}}}}}
""")
    binary = lookup("envoy").binary()
    assert binary is not None
    return [binary, "-c", str(conf), "--disable-hot-restart", "--log-level", "warn"]


NODE_PROXY = """
// A hand-written proxy (Node's http module) that writes to the client once 16 KiB are held: LIMIT 0 writes each
// chunk as it comes (the generic fix diagnose prints: write each chunk as it arrives).
const http = require('http');
const [port, upstream, limit] = process.argv.slice(2).map(Number);
http.createServer((req, res) => {
  const up = http.request({host: '127.0.0.1', port: upstream, method: req.method, path: req.url, headers: req.headers},
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      let held = [], n = 0;
      answer.on('data', (chunk) => {
        held.push(chunk); n += chunk.length;
        if (n >= limit) { res.write(Buffer.concat(held)); held = []; n = 0; }
      });
      answer.on('end', () => { if (n) res.write(Buffer.concat(held)); res.end(); });
    });
  req.pipe(up);
}).listen(port, '127.0.0.1');
"""


def node(workdir: Path, port: int, stub: int, fixed: bool) -> list[str]:
    script = workdir / "proxy.js"
    script.write_text(NODE_PROXY)
    binary = lookup("node22").binary()
    assert binary is not None
    return [binary, str(script), str(port), str(stub), "0" if fixed else str(16 * 1024)]


CONFIGS = (
    HandWritten("nginx_stock", "nginx", nginx("", "proxy_buffering off;")),
    HandWritten(
        "nginx_gzip_buffering_off",
        "nginx",
        nginx("gzip on; gzip_types text/event-stream; proxy_buffering off;", ""),
        has_fix=False,
    ),
    HandWritten(
        "nginx_small_buffers",
        "nginx",
        nginx("proxy_buffer_size 4k; proxy_buffers 2 4k; proxy_busy_buffers_size 4k;", "proxy_buffering off;"),
    ),
    HandWritten("haproxy_stock", "haproxy", haproxy),
    HandWritten("lighttpd_stock", "lighttpd", lighttpd),
    HandWritten("apache_deflate", "apache2", apache_deflate, has_fix=False),
    HandWritten("traefik_compress", "traefik@3.3.2", traefik, ("--proxy", "traefik@3.3.2")),
    HandWritten("envoy_zstd", "envoy", envoy),
    HandWritten("node_16k", "node22", node),
)


# --- running them -------------------------------------------------------------------------------------------------


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Running:
    name: str
    fixed: bool
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def launch(config: HandWritten, stub_port: int, fixed: bool, root: Path) -> Running | None:
    if config.binary is None or lookup(config.binary).binary() is None:
        return None
    workdir = Path(tempfile.mkdtemp(prefix=f"{config.name}-", dir=root))
    workdir.chmod(0o755)  # Apache's workers (www-data) read nothing here, but the parent must be reachable
    port = free_port()
    argv = config.write(workdir, port, stub_port, fixed)
    log = workdir / "output.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    deadline = time.monotonic() + START_S
    while not _accepts(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process_group(process, STOP_S)
            raise AssertionError(f"{config.name} did not start:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return Running(config.name, fixed, f"http://127.0.0.1:{port}", process, log)


Diagnosed = dict[tuple[str, bool], tuple[int, dict[str, Any], str]]


@pytest.fixture(scope="module")
def diagnosed(module_service: Start, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Diagnosed]:
    stub = module_service("stub", "--port", "0", "--format", "plain", name="stub")
    stub_port = int(netloc(stub.url).rsplit(":", 1)[1])
    root = tmp_path_factory.mktemp("by_hand")
    root.chmod(0o755)
    running: list[Running] = []
    try:
        for config in CONFIGS:
            for fixed in (False, True) if config.has_fix else (False,):
                started = launch(config, stub_port, fixed, root)
                if started is not None:
                    running.append(started)
        flags = {c.name: c.proxy_flag for c in CONFIGS}

        def run(r: Running) -> tuple[tuple[str, bool], tuple[int, dict[str, Any], str]]:
            argv = tokenpath_argv("diagnose", r.url, *flags[r.name], "--json")
            out = subprocess.run(argv, capture_output=True, text=True, timeout=180)
            doc: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
            return (r.name, r.fixed), (out.returncode, doc, out.stderr)

        # The unfixed paths first: a held path grows its series to 3-second streams, a fixed one streams in a few
        # seconds, so the long diagnoses start at once and the short ones fill in behind them.
        with ThreadPoolExecutor(PARALLEL) as pool:
            yield dict(pool.map(run, sorted(running, key=lambda r: r.fixed)))
    finally:
        for r in running:  # its group: Apache's workers outlive a parent killed alone
            stop_process_group(r.process, STOP_S)
        assert not _left_running(root), "a proxy's processes outlived the test"


def _left_running(root: Path) -> list[str]:
    """The processes still running whose command line names a file under `root` (the proxies' configs)."""
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if str(root) in cmdline:
            left.append(f"{proc.pid}: {cmdline}")
    return left


def result(diagnosed: Diagnosed, name: str, fixed: bool, code: int) -> dict[str, Any]:
    if (name, fixed) not in diagnosed:
        pytest.skip(f"{name}: its proxy is not installed (scripts/install-proxies --all)")
    returncode, doc, stderr = diagnosed[(name, fixed)]
    assert returncode == code, (stderr, json.dumps({k: v for k, v in doc.items() if k != "runs"}, indent=1))
    assert doc["paced"] is True
    assert "error" not in stderr  # a finding is not an error
    return doc


def no_loop(before: dict[str, Any], after: dict[str, Any]) -> None:
    """The second diagnosis, with the fix applied, does not print the same line again."""
    if before["fix"] is not None and after["fix"] is not None:
        assert after["fix"]["line"] != before["fix"]["line"]


def test_nginx_stock_is_its_buffers_and_proxy_buffering_off_fixes_it(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "nginx_stock", False, 16)
    assert doc["verdict"]["cause"] == "byte_quantized", doc["verdict"]  # ~4 KB bursts on a long stream
    assert doc["proxy"]["name"] == "nginx"
    assert doc["fix"]["line"] == "proxy_buffering off;"
    after = result(diagnosed, "nginx_stock", True, 0)
    assert after["verdict"]["cause"] == "streams"
    no_loop(doc, after)


def test_nginx_gzip_with_buffering_off_streams_compressed(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "nginx_gzip_buffering_off", False, 0)
    assert doc["verdict"]["cause"] == "streams"
    assert any("compressed (gzip) and flushed" in n for n in doc["verdict"]["notes"])
    assert doc["fix"] is None


def test_nginx_small_buffers_are_bytes_and_proxy_buffering_off_fixes_them(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "nginx_small_buffers", False, 16)
    assert doc["verdict"]["cause"] in ("byte_quantized", "whole_response"), doc["verdict"]
    assert doc["fix"]["line"] == "proxy_buffering off;"
    after = result(diagnosed, "nginx_small_buffers", True, 0)
    no_loop(doc, after)


def test_haproxy_stock_is_a_timer_and_http_no_delay_fixes_it(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "haproxy_stock", False, 16)
    assert doc["verdict"]["cause"] == "time_quantized", doc["verdict"]
    assert 150 <= doc["verdict"]["period_ms"] <= 260
    assert doc["proxy"] is None  # HAProxy names itself nowhere: the rule and a generic fix, no proxy's name
    assert "haproxy" not in json.dumps(doc["generic_fix"]).lower()
    assert "200 ms" in doc["generic_fix"] or "ms" in doc["generic_fix"]
    after = result(diagnosed, "haproxy_stock", True, 0)
    assert after["verdict"]["cause"] == "streams"


def test_lighttpd_stock_is_recognised_and_stream_response_body_fixes_it(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "lighttpd_stock", False, 16)
    assert doc["verdict"]["cause"] == "whole_response", doc["verdict"]
    assert doc["proxy"]["name"] == "lighttpd"
    assert doc["proxy"]["by"].startswith("Server: lighttpd")
    assert doc["fix"]["line"] == "server.stream-response-body = 2"
    after = result(diagnosed, "lighttpd_stock", True, 0)
    no_loop(doc, after)


def test_apache_mod_deflate_streams_gzip(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "apache_deflate", False, 0)
    assert doc["verdict"]["cause"] == "streams"
    assert doc["proxy"]["name"] == "apache2"
    assert doc["fix"] is None


def test_traefik_3_3_2_compress_holds_the_first_kib_and_excluding_sse_fixes_it(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "traefik_compress", False, 16)
    v = doc["verdict"]
    assert v["cause"] == "compression_hold", v
    assert v["encoding"] in ("br", "zstd")
    assert "excludedContentTypes" in doc["fix"]["line"]
    after = result(diagnosed, "traefik_compress", True, 0)
    no_loop(doc, after)


def test_envoy_zstd_holds_and_gzip_fixes_it(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "envoy_zstd", False, 16)
    assert doc["verdict"]["cause"] == "compression_hold", doc["verdict"]
    assert doc["verdict"]["encoding"] == "zstd"
    assert doc["proxy"]["name"] == "envoy"
    assert "gzip" in doc["fix"]["line"]
    after = result(diagnosed, "envoy_zstd", True, 0)
    no_loop(doc, after)


def test_a_16_kib_node_proxy_is_a_threshold_not_the_whole_response(diagnosed: Diagnosed) -> None:
    doc = result(diagnosed, "node_16k", False, 16)
    v = doc["verdict"]
    assert v["cause"] == "byte_quantized", v
    assert 12 * 1024 <= v["size_bytes"] <= 20 * 1024
    assert doc["proxy"] is None
    text = json.dumps(doc["generic_fix"]).lower()
    assert "nginx" not in text
    assert "lighttpd" not in text
    after = result(diagnosed, "node_16k", True, 0)
    assert after["verdict"]["cause"] == "streams"
