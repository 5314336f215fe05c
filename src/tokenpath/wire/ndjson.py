"""Newline-delimited JSON (`application/x-ndjson`), sans-IO: Ollama's `/api/chat` stream, one JSON object per line.

Lines end in LF or CRLF (JSON Lines, https://jsonlines.org: "the last character in the file may be a line
separator, and it will be treated the same as if there was no line separator present"; Ollama ends every line
with LF). A blank line is no frame. The framer does not decode JSON: what a line says is its format spec's to
read, and only until the first content line, as for SSE.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tokenpath.errors import ResponseTooLarge, StreamFormatError

# One line may be this long before the parser gives up: the probe's limit for one SSE event (wire/sse.py
# MAX_EVENT_BYTES). An Ollama line is a few hundred bytes.
MAX_LINE_BYTES = 8 << 20
_WHITESPACE = b" \t\r"


@dataclass(frozen=True, slots=True)
class JsonLine:
    """One line with its line end (none for a last line the body ended without one)."""

    raw: bytes

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def data(self) -> bytes:
        """The line without its line end: the JSON text."""
        end = len(self.raw)
        if self.raw.endswith(b"\n"):
            end -= 2 if self.raw.endswith(b"\r\n") else 1
        return self.raw[:end]


class NDJSONParser:
    """Feed bytes in any split; get back the lines each feed completed, in order.

    Linear however a line is split: the bytes of an unfinished line sit in a bytearray that grows in place, and the
    search for its end resumes where it stopped. A line may not grow past `max_line_bytes` (ResponseTooLarge)."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._held = bytearray()  # the unfinished line
        self._max = max_line_bytes

    def feed(self, data: bytes) -> list[JsonLine]:
        held = self._held
        lines: list[JsonLine] = []
        start = 0
        if held:
            end = data.find(b"\n")
            if end < 0:
                held += data
                self._check(len(held))
                return lines
            held += memoryview(data)[: end + 1]
            self._emit(bytes(held), lines)
            held.clear()
            start = end + 1
        find = data.find
        while (end := find(b"\n", start)) >= 0:
            self._emit(data[start : end + 1], lines)
            start = end + 1
        if start < len(data):
            held += memoryview(data)[start:]
            self._check(len(held))
        return lines

    def _emit(self, raw: bytes, lines: list[JsonLine]) -> None:
        self._check(len(raw))
        if raw.strip(_WHITESPACE + b"\n"):
            lines.append(JsonLine(raw))

    def _check(self, size: int) -> None:
        if size > self._max:
            self._held = bytearray()
            raise ResponseTooLarge(
                f"an NDJSON line grew past {self._max} bytes without ending ({size} bytes): "
                "not a token stream this client can measure"
            )

    def pending_bytes(self) -> int:
        """Bytes of a line that has not ended yet."""
        return len(self._held)

    def close(self) -> list[JsonLine]:
        """The body ended: a last line without a line end is a line if it is whole JSON (JSON Lines allows it);
        anything else is a StreamFormatError, a line cut short."""
        rest = bytes(self._held)
        self._held = bytearray()
        if not rest.strip(_WHITESPACE):
            return []
        try:
            json.loads(rest)
        except (ValueError, RecursionError):
            raise StreamFormatError(
                f"the stream ended inside an NDJSON line ({len(rest)} bytes without a line end that are not whole "
                "JSON): truncated",
                truncated=True,
            ) from None
        return [JsonLine(rest)]
