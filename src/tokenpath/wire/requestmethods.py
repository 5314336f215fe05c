"""The methods of a client's HTTP/1.1 requests, in order, read off the bytes it sends (a relay's view of the
requests it forwards as they are: controls/policies.py's buffer mode needs them to read each response, since a
response to HEAD has no body). Only request heads are parsed; bodies are skipped by llhttp's own framing.

    methods = RequestMethods(); methods.feed(data); methods.methods.popleft() -> "POST"

`broken` once the bytes are not HTTP/1.1 this reads (an upgrade, CONNECT, garbage): the methods read before that are
still good, and nothing after it is read.
"""

from __future__ import annotations

from collections import deque

import httptools


class RequestMethods:
    def __init__(self) -> None:
        self.methods: deque[str] = deque()
        self.broken = False
        self._parser = httptools.HttpRequestParser(self)

    def feed(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # what follows is not HTTP/1.1 requests
            self.broken = True  # (HttpParserUpgrade is no HttpParserError: an upgrade raised out of the relay)

    def on_headers_complete(self) -> None:  # httptools' callback
        self.methods.append(self._parser.get_method().decode("latin-1"))
