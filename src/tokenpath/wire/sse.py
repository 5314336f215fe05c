"""Incremental Server-Sent Events parser (sans-IO).

Written by hand because no maintained library exposes what tokenpath counts: the exact bytes of each event and
which `feed()` call completed it. Follows the WHATWG event-stream grammar: lines end in CRLF, LF or CR; a blank
line ends an event; lines starting with ':' are comments; a single space after 'field:' is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class FrameKind(StrEnum):
    CONTENT = "content"  # carries model output: what TTFT waits for
    CONTROL = "control"  # role-only delta, empty delta, usage or finish chunk: data, but no content
    COMMENT = "comment"  # only comment lines (keep-alives)
    DONE = "done"  # data: [DONE]
    ERROR = "error"  # a JSON body with an "error" member


@dataclass(slots=True)
class Frame:
    """One complete SSE event: everything from its first line to the blank line that ends it."""

    raw: bytes
    data: bytes | None = None  # data lines joined with b"\n"; None when the event had no data field
    event: bytes | None = None
    id: bytes | None = None
    comments: list[bytes] = field(default_factory=list)

    @property
    def kind(self) -> FrameKind:
        return classify(self.data)


def classify(data: bytes | None) -> FrameKind:
    """Decide whether a frame carries content, using OpenAI chunk shapes when the data is JSON."""
    if data is None:
        return FrameKind.COMMENT
    stripped = data.strip()
    if stripped == b"[DONE]":
        return FrameKind.DONE
    if not stripped.startswith(b"{"):
        return FrameKind.CONTENT  # plain text frames (e.g. `data: 17`) are content
    try:
        obj = json.loads(stripped)
    except ValueError:
        return FrameKind.CONTENT
    if not isinstance(obj, dict):
        return FrameKind.CONTENT
    if "error" in obj:
        return FrameKind.ERROR
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return FrameKind.CONTENT  # JSON, but not an OpenAI chunk: count it as content
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        ):
            return FrameKind.CONTENT
        if choice.get("text"):
            return FrameKind.CONTENT
    return FrameKind.CONTROL


class SSEParser:
    """Feed bytes in any split; get back the frames each feed completed, in order."""

    def __init__(self) -> None:
        self._buf = b""  # bytes of the event being read (from its first line on), plus unscanned bytes
        self._scan = 0  # where line scanning resumes inside _buf
        self._lines: list[bytes] = []
        self._at_start = True
        # A CR that ended the input ended its line at once (waiting would delay CR-only streams by a frame);
        # if the next byte is LF it is the rest of that CRLF and is skipped.
        self._skip_lf = False
        self._lf_frame: Frame | None = None  # the frame that CR ended: that LF belongs to its raw bytes

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf + data if self._buf else data
        if self._at_start:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._buf = buf
                return []
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
            self._at_start = False
        frames: list[Frame] = []
        start = 0  # where the current event's bytes begin in buf
        scan = self._scan
        if self._skip_lf and len(buf) > scan:
            self._skip_lf = False
            if buf[scan : scan + 1] == b"\n":
                scan += 1
                if self._lf_frame is not None:
                    self._lf_frame.raw += b"\n"
                if not self._lines:
                    start = scan  # between events: the LF belongs to no new event
            self._lf_frame = None
        lines = self._lines
        search = _LINE_END.search
        while True:
            m = search(buf, scan)
            if m is None:
                break
            end = m.end()
            cr_at_end = end == len(buf) and buf[end - 1] == 13  # b"\r"
            self._skip_lf = cr_at_end
            line = buf[scan : m.start()]
            scan = end
            if line:
                lines.append(line)
                continue
            if lines:
                frame = _build(lines, buf[start:scan])
                frames.append(frame)
                self._lf_frame = frame if cr_at_end else None
                lines = []
            start = scan  # blank lines between events belong to no event
        self._lines = lines
        self._buf = buf[start:]
        self._scan = scan - start
        return frames

    def pending_bytes(self) -> int:
        """Bytes held for an event that has not ended yet (trailing data at end of stream)."""
        return len(self._buf)


def _build(lines: list[bytes], raw: bytes) -> Frame:
    frame = Frame(raw=raw)
    data_parts: list[bytes] = []
    for line in lines:
        if line[:1] == b":":
            frame.comments.append(line[1:])
            continue
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data_parts.append(value)
        elif name == b"event":
            frame.event = value
        elif name == b"id":
            frame.id = value
        # retry and unknown fields are ignored, as the spec says
    if data_parts:
        frame.data = b"\n".join(data_parts)
    return frame
