"""How a WebSocket session's end crosses the gateway (RFC 6455 7.4): the close one side sent, or the way its
connection ended, becomes the close the other side gets. Tables, not branches (h11's `_state.py` shape).

Codes no close frame may carry (1005 no code given, 1006 no close frame, 1015 TLS failed: 7.4.1) are never sent on;
a code about one hop's own frames (1002 protocol error, 1010 a client's missing extension) is that hop's business,
not the other side's; application codes (3000-4999) pass as they are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NORMAL = 1000
GOING_AWAY = 1001
NO_STATUS = 1005
ABNORMAL = 1006
INTERNAL = 1011
MAX_REASON_BYTES = 123  # a close frame's payload is at most 125 bytes, two of them the code

# The member's close code → the client's. Codes about what the client sent (1003, 1007, 1008, 1009) pass: the member
# refused the client's message, and the gateway relayed it as it was.
UPSTREAM_TO_CLIENT: dict[int, int] = {
    NORMAL: NORMAL,
    GOING_AWAY: GOING_AWAY,
    NO_STATUS: NORMAL,
    1003: 1003,
    1007: 1007,
    1008: 1008,
    1009: 1009,
    INTERNAL: INTERNAL,
    1012: 1012,  # service restart
    1013: 1013,  # try again later
    1014: 1014,  # bad gateway
}
# The client's close code → the member's. The client closing for any reason of its own is, to the member, a client
# that went away (1001), unless it said it was done (1000) or gave an application code.
CLIENT_TO_UPSTREAM: dict[int, int] = {NORMAL: NORMAL, NO_STATUS: NORMAL, GOING_AWAY: GOING_AWAY}


def reason_text(reason: str) -> str:
    """At most MAX_REASON_BYTES of UTF-8, cut on a character boundary."""
    data = reason.encode("utf-8")
    if len(data) <= MAX_REASON_BYTES:
        return reason
    return data[:MAX_REASON_BYTES].decode("utf-8", "ignore")


@dataclass(frozen=True, slots=True)
class Side:
    """What one direction makes of a close: the peer's codes passed on (`codes`), the code of every other end
    (`default`), and the words its reasons name the peer with."""

    codes: Mapping[int, int]
    default: int
    peer: str  # "upstream", "client": the prefix of the gateway's own close, and who "closed with" a code
    went_away: str  # the reason when the peer's connection ended without a close frame


# The gateway's own close of a member is its failure to the client (1011); of a client, a client gone to the member.
MEMBER_SIDE = Side(UPSTREAM_TO_CLIENT, INTERNAL, "upstream", "the upstream closed the connection without a close frame")
CLIENT_SIDE = Side(CLIENT_TO_UPSTREAM, GOING_AWAY, "client", "the client went away")


def crossed(side: Side, code: int, reason: str, by_peer: bool) -> tuple[int, str]:
    """The close the other side gets for `side`'s peer's end: its close frame (`by_peer`), or the gateway's own
    close of that peer (a limit it broke, no pong): the side's default code with the reason."""
    if not by_peer:
        return side.default, reason_text(f"{side.peer}: {reason}")
    if code == ABNORMAL:
        return side.default, side.went_away
    if 3000 <= code <= 4999:
        return code, reason_text(reason)
    mapped = side.codes.get(code)
    if mapped is None:
        return side.default, reason_text(f"the {side.peer} closed with {code}{f': {reason}' if reason else ''}")
    return mapped, reason_text(reason)


def to_client(code: int, reason: str, by_member: bool) -> tuple[int, str]:
    """The client's close for the member's end."""
    return crossed(MEMBER_SIDE, code, reason, by_member)


def to_upstream(code: int, reason: str, by_client: bool) -> tuple[int, str]:
    """The member's close for the client's end."""
    return crossed(CLIENT_SIDE, code, reason, by_client)
