"""Optional active health checks: every `active_interval_s`, GET `active_path` on each member. A failed check
counts like a failed request (consecutive failures eject); a passing check re-admits an ejected member at once,
so a recovered backend does not wait out its whole cooldown.

A check goes through the member's own connection pool, so it speaks what requests speak (TLS with the pool's CA
and client certificate, HTTP/1.1 or HTTP/2); it reads the status and drops the connection (or the stream)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from tokenpath.gateway.failures import Failure
from tokenpath.gateway.h2upstream import H2UpstreamPool
from tokenpath.gateway.link import AttemptFailed
from tokenpath.gateway.pools import MemberState, Pool
from tokenpath.gateway.upstream import ConnectionPool
from tokenpath.wire.client import ResponseHead

log = logging.getLogger("tokenpath.gateway")
CHECK_TIMEOUT_S = 2.0


class _StatusSink:
    """Takes the response head of a check; the body is not read."""

    def __init__(self) -> None:
        self.status: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def upstream_head(self, head: ResponseHead) -> None:
        if not self.status.done():
            self.status.set_result(head.status)

    def upstream_body(self, data: bytes) -> None:
        pass

    def upstream_read_done(self) -> None:
        pass

    def upstream_complete(self) -> None:
        pass

    def upstream_lost(self, failure: Failure) -> None:
        if not self.status.done():
            self.status.set_result(0)


async def check(
    member: MemberState, path: str, connections: ConnectionPool | H2UpstreamPool, timeout_s: float = CHECK_TIMEOUT_S
) -> bool:
    """A member passes when it answers the check's GET with a status below 500."""
    m = member.member
    conn = None
    try:
        async with asyncio.timeout(timeout_s):
            conn = await connections.acquire(timeout_s)
            sink = _StatusSink()
            conn.send_request(sink, "GET", m.authority, f"{m.base_path}{path}", [("Accept", "*/*")], b"")
            status = await sink.status
    except (AttemptFailed, TimeoutError, OSError):
        return False
    finally:
        if conn is not None:
            conn.abort()  # never reused: the body was not read
    return 200 <= status < 500


async def run_checks(
    pools: list[Pool],
    path: str,
    interval_s: float,
    connections: Callable[[MemberState], ConnectionPool | H2UpstreamPool],
    on_change: Callable[[Pool, MemberState], None] | None = None,
) -> None:
    """Runs until cancelled."""
    while True:
        for pool in pools:
            results = await asyncio.gather(*(check(m, path, connections(m)) for m in pool.members))
            for member, ok in zip(pool.members, results, strict=True):
                if ok:
                    pool.record_success(member)
                    member.ejected_until = 0.0
                elif pool.record_failure(member):
                    log.warning(
                        json.dumps(
                            {"event": "member_ejected", "pool": pool.name, "member": member.url, "by": "active check"}
                        )
                    )
                if on_change is not None:
                    on_change(pool, member)
        await asyncio.sleep(interval_s)
