"""Prometheus exposition on its own port (the gateway's and the monitor's /metrics, the monitor exporter's /probe),
bounded in threads and time."""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from tokenpath.errors import UsageError

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

SCRAPE_THREADS = 4  # concurrent /metrics requests; more connections are closed at once
SCRAPE_TIMEOUT_S = 5.0  # a connection that sends no whole request by then is closed


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """prometheus-client's own server starts a thread per connection and never times one out, so idle
    connections cost a thread each, forever. This one serves at most SCRAPE_THREADS at a time and drops the rest."""

    daemon_threads = True

    def __init__(self, *args: Any, threads: int = SCRAPE_THREADS, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(threads)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """Serve `registry` on http://host:port/metrics from a daemon thread; a port in use is a usage error."""
    return serve_app(host, port, make_wsgi_app(registry))


def serve_app(host: str, port: int, app: WSGIApplication, threads: int = SCRAPE_THREADS) -> WSGIServer:
    """Serve a WSGI app the same way: at most `threads` connections at once (more are closed at once), each given
    SCRAPE_TIMEOUT_S to send its request."""
    server_class = _BoundedServer6 if ":" in host else _BoundedServer
    try:
        httpd = server_class((host, port), _QuietHandler, threads=threads)  # what make_server does, with `threads`
    except OSError as exc:
        raise UsageError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    httpd.set_app(app)
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return httpd
