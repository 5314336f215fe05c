"""The final status in a server's HTTP/1.x bytes, read passively beside the probe's own parser (the exporter's
probe_http_status_code: the probe raises on a non-2xx answer, and its exception carries a message).

Sans-IO: `feed(data)` with each read's bytes, as they came. The status counts once its head is whole, as the probe's
parser (wire/client.py) takes it: an interim head (103 Early Hints, 100 Continue) is passed over, and a head that
grows past MAX_RESPONSE_HEAD_BYTES by the same reads the probe refuses is no status (0), never the 200 its first line
said. Anything llhttp cannot parse ends the sniff with what it has.
"""

from __future__ import annotations

import httptools

from tokenpath.wire.client import MAX_RESPONSE_HEAD_BYTES


class H1StatusSniffer:
    def __init__(self, max_head_bytes: int = MAX_RESPONSE_HEAD_BYTES) -> None:
        self.status: int | None = None  # the final status, once its head is whole
        self.done = False  # seen, or given up
        self._max = max_head_bytes
        self._seen = 0
        self._parser = httptools.HttpResponseParser(self)

    def on_headers_complete(self) -> None:  # llhttp's callback, one per head (interim heads included)
        status = self._parser.get_status_code()
        if status >= 200 or status == 101:
            self.status = status
            self.done = True

    def feed(self, data: bytes) -> int | None:
        """The status, once known (then later bytes are ignored)."""
        if self.done or not data:
            return self.status
        self._seen += len(data)  # the probe's count: every read while the head is incomplete
        try:
            self._parser.feed_data(data)  # past a final head llhttp reads on into the body: stopped below
        except httptools.HttpParserError:  # the upgrade's too (101): its status is already taken
            self.done = True
        if self.status is None and self._seen > self._max:
            self.done = True  # the probe refused this head as too large: no status
        return self.status
