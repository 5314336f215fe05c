"""What a stream over WebSocket adds to its trace (probe --transport websocket): the upgrade (its status, its time,
whether it was carried), the messages and how many arrived per read, and the end as WebSocket saw it (the close
code, whether the format's final event came first). With a fallback policy (probe/wsfallback.py): the upgrades it
tried and, when it fell back to SSE, what that cost before the first content event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["WsFigures"]


@dataclass(frozen=True, slots=True)
class WsFigures:
    upgraded: bool  # the path answered 101 with the right Sec-WebSocket-Accept
    upgrade_status: int  # 101, or what came instead (200, 400, 404, 426 ...: the path did not carry the upgrade)
    upgrade_ms: float  # from the upgrade request's last byte to the answer's head
    messages: int = 0  # text messages received (each one event of the stream)
    message_reads: int = 0  # reads that completed at least one message
    final_event: bool = False  # the format's final event arrived (Responses: response.completed)
    close_code: int | None = None  # the close frame's code; 1006: the socket ended without one; None: still open
    closed_by: str = ""  # "server" (its close frame or its socket's end), "client" (ours, after the final event)
    pings: int = 0  # pings the server sent (answered)
    pings_sent: int = 0  # our keep-alive pings (probe --ws-ping-s): every N s while the stream runs
    pongs: int = 0  # the answers to them that came back through the path
    refused_body: str = ""  # a refused upgrade's first body bytes, for the message
    attempts: int = 1  # upgrades tried (a fallback policy retries; the figures above are the last one's)
    fell_back: bool = False  # every upgrade failed and the request went out over SSE (the trace is that stream's)
    # The fallback's cost: the first upgrade attempt -> the first content event over SSE (the SSE stream's own TTFT,
    # from its request, is the trace's; None: the SSE stream carried no content).
    fallback_ms: float | None = None

    @property
    def messages_per_read(self) -> float | None:
        """Coalescing: several messages completed by one socket read (1.00: every message alone)."""
        return self.messages / self.message_reads if self.message_reads else None

    @property
    def cut(self) -> bool:
        """Upgraded, then closed before the final event: the stream was cut."""
        return self.upgraded and not self.final_event and self.close_code is not None

    @property
    def note(self) -> str:
        """One line for the table, when something is wrong."""
        if self.fell_back:
            cost = (
                "no content" if self.fallback_ms is None else f"{self.fallback_ms:,.0f} ms to the first content event"
            )
            return f"{self._refusal}; fell back to SSE after {self.attempts} upgrades: {cost}"
        return self._refusal

    @property
    def _refusal(self) -> str:
        if not self.upgraded and self.upgrade_status in (0, 101):
            # the reason after the colon: a row counts its exclusions by what comes before it
            return f"WebSocket upgrade failed: {self.refused_body or 'no answer'} after {self.upgrade_ms:.1f} ms"
        if not self.upgraded:
            return (
                f"WebSocket upgrade not carried: HTTP {self.upgrade_status} instead of 101 "
                f"after {self.upgrade_ms:.1f} ms"
            )
        if self.cut:
            return f"WebSocket closed ({self.close_code}) before the final event: cut"
        return ""

    @property
    def summary(self) -> str:
        """One line for the probe's table: what WebSocket added to the stream's figures."""
        if self.note:
            return self.note
        per_read = "-" if self.messages_per_read is None else f"{self.messages_per_read:.2f}"
        final = "the final event" if self.final_event else "no final event"
        close = "open" if self.close_code is None else f"close {self.close_code} ({self.closed_by})"
        if self.pings_sent:
            close += f", {self.pings_sent} pings sent, {self.pongs} pongs back"
        tries = f" (upgrade {self.attempts})" if self.attempts > 1 else ""
        return (
            f"WebSocket: 101 in {self.upgrade_ms:.1f} ms{tries}, {self.messages} messages, {per_read} per read, "
            f"{final}, {close}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "upgraded": self.upgraded,
            "upgrade_status": self.upgrade_status,
            "upgrade_ms": round(self.upgrade_ms, 3),
            "messages": self.messages,
            "message_reads": self.message_reads,
            "messages_per_read": self.messages_per_read,
            "final_event": self.final_event,
            "close_code": self.close_code,
            "closed_by": self.closed_by,
            "pings": self.pings,
            "pings_sent": self.pings_sent,
            "pongs": self.pongs,
            "cut": self.cut,
            "refused_body": self.refused_body,
            "attempts": self.attempts,
            "fell_back": self.fell_back,
            "fallback_ms": None if self.fallback_ms is None else round(self.fallback_ms, 3),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> WsFigures:
        return cls(
            upgraded=obj["upgraded"],
            upgrade_status=obj["upgrade_status"],
            upgrade_ms=obj["upgrade_ms"],
            messages=obj.get("messages", 0),
            message_reads=obj.get("message_reads", 0),
            final_event=obj.get("final_event", False),
            close_code=obj.get("close_code"),
            closed_by=obj.get("closed_by", ""),
            pings=obj.get("pings", 0),
            pings_sent=obj.get("pings_sent", 0),
            pongs=obj.get("pongs", 0),
            refused_body=obj.get("refused_body", ""),
            attempts=obj.get("attempts", 1),
            fell_back=obj.get("fell_back", False),
            fallback_ms=obj.get("fallback_ms"),
        )
