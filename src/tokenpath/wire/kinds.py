"""What one frame of a token stream is, in every API format: the words TTFT and the first-token figure are defined
with. Each format's spec (wire/formats/) decides it; the probe, the load client and the gateway only read these."""

from __future__ import annotations

from enum import StrEnum


class FrameKind(StrEnum):
    CONTENT = "content"  # carries model output (text or a tool call): what TTFT waits for
    REASONING = "reasoning"  # a reasoning/thinking delta: the first-token figure counts it, TTFT never does
    CONTROL = "control"  # data of the format that carries no output: role-only, empty, start/stop, usage, ping
    COMMENT = "comment"  # only comment lines (SSE keep-alives)
    DONE = "done"  # the format's end marker: [DONE], message_stop, response.completed, "done": true ...
    ERROR = "error"  # an error in the format's own shape (an "error" member, event: error, an exception message)
    FOREIGN = "foreign"  # valid framing, but not this format's event: another API format (named in the note)
