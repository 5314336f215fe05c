from __future__ import annotations

from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, Wrap, h2_hint, no_wrap, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts, duration

GZIP = "gzip on; gzip_types text/event-stream;"  # as people turn compression on for an API behind nginx
WEBSOCKET = "\n      ".join(
    ("proxy_http_version 1.1;", "proxy_set_header Upgrade $http_upgrade;", 'proxy_set_header Connection "upgrade";')
)
# nginx honours an upstream's `X-Accel-Buffering: no` (buffering off for that response) unless told to ignore it: a
# site that ignores it holds llama-cpp-python's close-delimited stream, which stock nginx streams (issue 37).
IGNORE_X_ACCEL = "proxy_ignore_headers X-Accel-Buffering;"
VARIANT_DIRECTIVES = {
    "stock": "",
    "proxy_buffering_off": "proxy_buffering off;",
    "ignore_x_accel": IGNORE_X_ACCEL,
    "http_1_1": 'proxy_http_version 1.1;\n      proxy_set_header Connection "";',
    "gzip": GZIP,
    "gzip_buffering_off": f"{GZIP}\n      proxy_buffering off;",
    # nginx's documented way to carry a WebSocket (nginx.org/en/docs/http/websocket.html): hop-by-hop Upgrade and
    # Connection passed on explicitly, over HTTP/1.1 to the upstream. Stock nginx drops both (and speaks 1.0 upstream).
    "websocket": WEBSOCKET,
    "http2": "",  # the listen line changes (see write_config); the location is stock
    "http2_buffering_off": "proxy_buffering off;",
    LONG_STREAMS: "",  # its proxy_read_timeout is the lifted one (see _read_timeout)
    # What the two common ingress controllers render into a location from their defaults (their timeouts come
    # from _read_timeout, 60 s in both). ingress-nginx (kubernetes.github.io/ingress-nginx/user-guide/nginx-
    # configuration/configmap/): proxy-buffering "off", proxy-http-version "1.1", proxy-connect-timeout 5,
    # proxy-read-timeout 60. F5 NGINX Ingress Controller (docs.nginx.com/nginx-ingress-controller/configuration/
    # global-configuration/configmap-resource/): proxy-buffering True, proxy-connect-timeout 60s, proxy-read-timeout
    # 60s, and its template's proxy_http_version 1.1 with keep-alive to the upstream.
    "ingress_nginx": 'proxy_http_version 1.1;\n      proxy_set_header Connection "";\n      proxy_buffering off;'
    "\n      proxy_connect_timeout 5s;",
    "f5_ingress": 'proxy_http_version 1.1;\n      proxy_set_header Connection "";\n      proxy_buffering on;'
    "\n      proxy_connect_timeout 60s;",
}
# nginx's documented default (nginx.org/en/docs/http/ngx_http_proxy_module.html#proxy_read_timeout): 60 s between
# two reads from the upstream, the wait for the response head included. It has no total limit and no "off".
STOCK_READ_TIMEOUT_S = 60.0
LONG_STREAMS_LINE = f"proxy_read_timeout {LIFTED_S:.0f}s;"
# HTTP/2 to the client (1.22's syntax; 1.25 moved it to `http2 on;`): ALPN h2 beside http/1.1 over TLS, and on a
# cleartext port h2c with prior knowledge only (1.22 answers no HTTP/1.1 there: measured). The upstream is stock's.
H2_VARIANTS = ("http2", "http2_buffering_off")
H2_LISTEN = "listen ... ssl http2;"


class Nginx(Proxy):
    name = "nginx"
    binaries = ("nginx",)
    package = "nginx-light"
    image = "nginx:1.22.1-alpine"
    variants = (
        STOCK,
        Variant("proxy_buffering_off", "proxy_buffering off (the advice everyone gives)", "proxy_buffering off;"),
        Variant("ignore_x_accel", "stock, ignoring the upstream's X-Accel-Buffering", IGNORE_X_ACCEL),
        Variant("http_1_1", "proxy_http_version 1.1 with keep-alive to the upstream", "proxy_http_version 1.1;"),
        # Compression as it is turned on: gzip compresses for a client whose Accept-Encoding asks for it, and the
        # gzip filter flushes (Z_SYNC_FLUSH) only what reaches it flushed, i.e. with proxy_buffering off.
        Variant("gzip", "gzip on for event streams (compresses what the client accepts)", GZIP),
        Variant("gzip_buffering_off", "gzip on, with proxy_buffering off", f"{GZIP} proxy_buffering off;"),
        Variant(
            "websocket",
            "carries a WebSocket upgrade: proxy_http_version 1.1 and the Upgrade and Connection headers set",
            'proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade";',
        ),
        Variant("http2", "HTTP/2 to the client (ALPN h2 over TLS, h2c over cleartext); upstream as stock", H2_LISTEN),
        Variant(
            "http2_buffering_off", "HTTP/2 to the client, with proxy_buffering off", f"{H2_LISTEN} proxy_buffering off;"
        ),
        Variant(LONG_STREAMS, "proxy_read_timeout an hour (stock: 60 s of silence ends a stream)", LONG_STREAMS_LINE),
        Variant(
            "ingress_nginx",
            "what ingress-nginx renders by default: buffering off, HTTP/1.1 upstream, read timeout 60 s",
            "proxy_buffering off; proxy_http_version 1.1; proxy_read_timeout 60s;",
        ),
        Variant(
            "f5_ingress",
            "what F5 NGINX Ingress Controller renders by default: buffering on, HTTP/1.1 upstream, read timeout 60 s",
            "proxy_buffering on; proxy_http_version 1.1; proxy_read_timeout 60s;",
        ),
    )
    stock_timeouts = StreamTimeouts(idle_s=STOCK_READ_TIMEOUT_S)

    def version(self) -> str:
        binary = self.binary()
        return run_quiet([binary, "-v"]).removeprefix("nginx version: ") if binary else "not installed"

    def write_config(self, site: Site) -> Path:
        tmp = site.workdir / "tmp"
        tmp.mkdir(exist_ok=True)
        # Started as root, nginx's workers run as its unprivileged user: they must reach the (mkdtemp, 0700) work
        # directory and write their temp files, or a response larger than proxy_buffers (a client whose h2 window is
        # shut, a slow reader) ends in a reset with "Permission denied" in error.log (seen by the h2 probe). The
        # master creates tmp/proxy... and chowns them to the worker's user itself, so tmp stays root's, 0755: a
        # world-writable tmp would let a local user plant tmp/proxy as a symlink that the master then chowns.
        site.workdir.chmod(0o711)
        tmp.chmod(0o755)
        h2 = " http2" if site.variant.name in H2_VARIANTS else ""
        listen = f"{site.listen.hostport}{' ssl' if site.tls else ''}{h2}"
        tls = f"ssl_certificate {site.tls.cert};\n    ssl_certificate_key {site.tls.key};\n    " if site.tls else ""
        config = site.workdir / "nginx.conf"
        config.write_text(f"""# tokenpath: stock reverse proxy; only the variant line differs from the defaults
daemon off;
worker_processes 1;
pid {site.workdir}/nginx.pid;
error_log {site.workdir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream backend {{ server {site.upstream.hostport}; }}
  server {{
    listen {listen};
    {tls}location / {{
      proxy_pass {"https" if site.upstream_tls else "http"}://backend;{_endpoint_directives(site)}
      {self._read_timeout(site)}
      {VARIANT_DIRECTIVES[site.variant.name]}
    }}
  }}
}}
""")
        return config

    def _read_timeout(self, site: Site) -> str:
        limits = self.timeouts_for(site)
        if limits is None or limits.idle_s is None:
            return LONG_STREAMS_LINE
        return f"proxy_read_timeout {duration(limits.idle_s)};"

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        if http == "2":
            return h2_hint(variant, H2_VARIANTS)
        if variant.name in H2_VARIANTS and not tls:  # measured: curl --http1.1 gets no response from it
            return "nginx 1.22's cleartext `listen ... http2` port speaks h2c only (an HTTP/1.1 request gets no reply)"
        return ""

    def command_line(self, binary: str, site: Site, config: Path) -> list[str]:
        return [binary, "-c", str(config), "-p", str(site.workdir), "-e", str(site.workdir / "error.log")]

    def effective_config(self, site: Site, config: Path, wrap: Wrap = no_wrap) -> str:
        binary = self.require_binary()
        return run_quiet(wrap([binary, "-T", "-c", str(config), "-p", str(site.workdir)]))


def _endpoint_directives(site: Site) -> str:
    """A real endpoint: its own Host (nginx would send the upstream block's name), and TLS checked against its
    name. Nothing for the stub, so the measured stock config stays stock."""
    lines = [f"proxy_set_header Host {site.upstream_host};"] if site.upstream_host else []
    if site.upstream_tls:
        lines += [
            "proxy_ssl_server_name on;",
            f"proxy_ssl_name {site.upstream_tls.server_name};",
            "proxy_ssl_verify on;",
            f"proxy_ssl_trusted_certificate {site.upstream_tls.ca_bundle};",
        ]
    return "".join(f"\n      {line}" for line in lines)
