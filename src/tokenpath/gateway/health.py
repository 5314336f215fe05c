"""Optional active health checks: every `active_interval_s`, GET `active_path` on each member. A failed check
counts like a failed request (consecutive failures eject); a passing check re-admits an ejected member at once,
so a recovered backend does not wait out its whole cooldown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from tokenpath.errors import RemoteProtocolError
from tokenpath.gateway.pools import MemberState, Pool
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.request import build_request

log = logging.getLogger("tokenpath.gateway")
CHECK_TIMEOUT_S = 2.0
HEAD_READ_BYTES = 4096  # a check needs the status only


async def check(member: MemberState, path: str, timeout_s: float = CHECK_TIMEOUT_S) -> bool:
    """A member passes when it answers the check's GET with a well-formed head whose status is below 500."""
    m = member.member
    request = build_request("GET", f"{m.host}:{m.port}", f"{m.base_path}{path}")
    parser = ResponseParser("GET")
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(m.host, m.port)
            try:
                writer.write(request)
                while parser.head is None:
                    data = await reader.read(HEAD_READ_BYTES)
                    if not data:
                        parser.feed_eof()
                        break
                    parser.feed(data)
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except (OSError, TimeoutError, RemoteProtocolError):
        return False
    return parser.head is not None and 200 <= parser.head.status < 500


async def run_checks(
    pools: list[Pool], path: str, interval_s: float, on_change: Callable[[Pool, MemberState], None] | None = None
) -> None:
    """Runs until cancelled."""
    while True:
        for pool in pools:
            results = await asyncio.gather(*(check(m, path) for m in pool.members))
            for member, ok in zip(pool.members, results, strict=True):
                if ok:
                    pool.record_success(member)
                    member.ejected_until = 0.0
                elif pool.record_failure(member):
                    log.warning(json.dumps({"event": "member_ejected", "pool": pool.name, "member": member.url,
                                            "by": "active check"}))  # fmt: skip
                if on_change is not None:
                    on_change(pool, member)
        await asyncio.sleep(interval_s)
