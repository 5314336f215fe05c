# cython: language_level=3
"""bench/uvloop_pipe.py's two protocols compiled (cdef classes): the same callbacks and writes per read, with no
Python frame run for them. bench/cython_pipe.py builds and serves it; the comparison with the interpreted pipe is
what the interpreter costs a relay per read on uvloop, and with nginx what uvloop and libuv do (bench/RESULTS.md)."""

import asyncio
import socket


cdef _nodelay(transport):
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# uvloop takes any object with the Protocol methods: a cdef class cannot subclass asyncio.Protocol, nor need it. That
# is why this is a copy of uvloop_pipe.py's classes and not that file compiled (Cython would keep them Python classes).
cdef class Upstream:
    cdef Client client

    def __init__(self, Client client):
        self.client = client

    def connection_made(self, transport):
        _nodelay(transport)

    def data_received(self, data):
        self.client.transport.write(data)

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.client.transport.close()

    def pause_writing(self):
        self.client.transport.pause_reading()

    def resume_writing(self):
        self.client.transport.resume_reading()


cdef class Client:
    cdef public object transport
    cdef object upstream
    cdef list early
    cdef bint closed
    cdef str host
    cdef int port

    def __init__(self, str host, int port):
        self.host = host
        self.port = port
        self.upstream = None
        self.early = []
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport
        _nodelay(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self):
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: Upstream(self), self.host, self.port)
        except OSError:
            self.transport.close()
            return
        if self.closed:
            upstream.close()
            return
        self.upstream = upstream
        for data in self.early:
            upstream.write(data)
        self.early.clear()

    def data_received(self, data):
        if self.upstream is None:
            self.early.append(data)
        else:
            self.upstream.write(data)

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.closed = True
        if self.upstream is not None:
            self.upstream.close()

    def pause_writing(self):
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self):
        if self.upstream is not None:
            self.upstream.resume_reading()


async def serve(str host, int port):
    server = await asyncio.get_running_loop().create_server(lambda: Client(host, port), "127.0.0.1", 0)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()
