"""Optional active health checks: every `active_interval_s`, GET `active_path` on each member. A failed check
counts like a failed request (consecutive failures eject); a passing check re-admits an ejected member at once,
so a recovered backend does not wait out its whole cooldown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from tokenpath.gateway.pools import MemberState, Pool

log = logging.getLogger("tokenpath.gateway")
CHECK_TIMEOUT_S = 2.0


async def check(member: MemberState, path: str, timeout_s: float = CHECK_TIMEOUT_S) -> bool:
    m = member.member
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(m.host, m.port)
            try:
                writer.write(f"GET {m.base_path}{path} HTTP/1.1\r\nHost: {m.host}:{m.port}\r\n"
                             "Connection: close\r\n\r\n".encode())  # fmt: skip
                status_line = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    parts = status_line.split()
    return len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 500


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
