"""Prometheus exposition on its own port (the gateway's and the monitor's /metrics, the monitor exporter's /probe),
bounded in threads and time, and fair by client address (the IP): heads are read on one thread
(serve/headreader.py), where a full waiting set closes the oldest connection of the address waiting with the most;
a whole head then takes one of `threads` threads, of which one address may hold all but one, so a single address
that holds its requests open (reading its answers slowly, or a long /probe each) still leaves a thread for a scrape
from another. A head past either bound waits for a thread (the next one given back goes to the oldest waiting head
whose address may take it) and is answered 503 if none came within SCRAPE_TIMEOUT_S: a client's next request, sent
as soon as it read its answer, often comes before the thread that wrote the answer is given back."""

from __future__ import annotations

import io
import socket
import threading
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from tokenpath.errors import UsageError
from tokenpath.serve.headreader import MAX_WAITING, HeadReader, client_ip

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

    from _typeshed import WriteableBuffer

# Requests served at once. A whole request head that finds them all busy waits for one, and so does one from an
# address (the IP) already holding all but one of them: one address cannot take the last (with 1 thread, it may).
SCRAPE_THREADS = 4
# A connection that has not sent its whole request head this long after it was accepted is closed (the whole head's
# deadline, not each read's: a client dripping a byte a second would otherwise keep its connection forever); a
# whole head waits as long again for a thread, and each read or write after the head gets as long again.
SCRAPE_TIMEOUT_S = 5.0


class _BoundedServer(WSGIServer):
    """prometheus-client's own server starts a thread per connection and never times one out, so idle
    connections cost a thread each, forever. Here request heads are read on one thread (serve/headreader.py), each
    by SCRAPE_TIMEOUT_S, and only a whole request takes one of `threads` threads: slow or silent clients cannot
    keep an honest scrape from being answered, however many of them there are."""

    request_queue_size = MAX_WAITING  # the accept queue: a burst of connections waits for accept(), not refused
    _heads: HeadReader | None = None  # started once the port is bound (a port taken closes the server first)

    def __init__(self, *args: Any, threads: int = SCRAPE_THREADS, **kwargs: Any) -> None:
        self._threads = threads
        self._per_address = max(1, threads - 1)  # the last free thread is never one address's to take
        self._busy = 0
        self._busy_by_ip: dict[Any, int] = {}
        self._busy_lock = threading.Lock()  # taken on the head reader's thread, given back on the serving ones
        super().__init__(*args, **kwargs)
        self._heads = HeadReader(self._serve, SCRAPE_TIMEOUT_S)

    def process_request(self, request: Any, client_address: Any) -> None:
        assert self._heads is not None
        self._heads.add(request, client_address)

    def _serve(self, sock: socket.socket, client_address: Any, data: bytes) -> bool:
        """A whole head (on the head reader's thread): a thread of its own, or False: none may be its now."""
        ip = client_ip(client_address)
        if not self._take_thread(ip):
            return False
        try:
            threading.Thread(target=self._serve_thread, args=(sock, client_address, data), daemon=True).start()
        except BaseException:  # no thread started (RuntimeError: can't start new thread): not a slot lost for good
            self._give_thread(ip)
            raise
        return True

    def _take_thread(self, ip: Any) -> bool:
        with self._busy_lock:
            held = self._busy_by_ip.get(ip, 0)
            if self._busy >= self._threads or held >= self._per_address:
                return False
            self._busy += 1
            self._busy_by_ip[ip] = held + 1
            return True

    def _give_thread(self, ip: Any) -> None:
        with self._busy_lock:
            self._busy -= 1
            held = self._busy_by_ip.pop(ip) - 1
            if held:
                self._busy_by_ip[ip] = held
        if self._heads is not None:
            self._heads.retry()  # a head kept for want of a thread may take this one

    def _serve_thread(self, sock: socket.socket, client_address: Any, data: bytes) -> None:
        try:
            _QuietHandler(sock, client_address, self, data)
        except Exception:
            self.handle_error(sock, client_address)
        finally:
            self.shutdown_request(sock)
            self._give_thread(client_ip(client_address))

    def server_close(self) -> None:
        super().server_close()
        if self._heads is not None:
            self._heads.close()


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


class _ReadAhead(io.RawIOBase):
    """The bytes the head reader took from the socket (the head and whatever followed), then the socket's own."""

    def __init__(self, data: bytes, sock: socket.socket) -> None:
        self._data = memoryview(data)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        out = memoryview(buffer).cast("B")
        if self._data:
            n = min(len(out), len(self._data))
            out[:n] = self._data[:n]
            self._data = self._data[n:]
            return n
        return self._sock.recv_into(out)


class _QuietHandler(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT_S

    def __init__(self, request: Any, client_address: Any, server: Any, data: bytes = b"") -> None:
        self._read_ahead = data
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own file: the head is in what the head reader read
        self.rfile = io.BufferedReader(_ReadAhead(self._read_ahead, self.connection))

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """Serve `registry` on http://host:port/metrics from a daemon thread; a port in use is a usage error."""
    return serve_app(host, port, make_wsgi_app(registry))


def serve_app(host: str, port: int, app: WSGIApplication, threads: int = SCRAPE_THREADS) -> WSGIServer:
    """Serve a WSGI app the same way: at most `threads` requests at once, all but one of them from one address (a
    whole head past either waits for a thread), each connection given SCRAPE_TIMEOUT_S to send its whole head and as
    long again to be given a thread."""
    server_class = _BoundedServer6 if ":" in host else _BoundedServer
    try:
        httpd = server_class((host, port), _QuietHandler, threads=threads)  # what make_server does, with `threads`
    except OSError as exc:
        raise UsageError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    httpd.set_app(app)
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return httpd
