"""The connections to a gateway's members: one connection pool per member, HTTP/1.1 keep-alive (upstream.py) or
HTTP/2 (h2upstream.py) as its pool's `protocol` says, TLS where the member's URL is https. The request path names
the two kinds only through this module's aliases."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable

from tokenpath.gateway.config import PoolConfig
from tokenpath.gateway.h2upstream import H2UpstreamPool, H2UpstreamStream
from tokenpath.gateway.link import AttemptFailed
from tokenpath.gateway.pools import Pool
from tokenpath.gateway.tls import client_context
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection

__all__ = [
    "AttemptFailed",
    "ConnectionPool",
    "MemberConnections",
    "UpstreamPool",
    "UpstreamStream",
    "open_member_pools",
]

UpstreamPool = ConnectionPool | H2UpstreamPool  # a member's connections
# one request's: a connection of its own, or a stream on a shared one
UpstreamStream = UpstreamConnection | H2UpstreamStream
MemberConnections = dict[int, UpstreamPool]  # by id() of the MemberState


def open_member_pools(pools: list[Pool], on_handshake: Callable[[str, bool], None]) -> MemberConnections:
    """`on_handshake(pool name, resumed)` is called for each TLS handshake with a member."""
    connections: MemberConnections = {}
    for pool in pools:
        tls = _tls_context(pool.cfg)
        kind = H2UpstreamPool if pool.cfg.protocol == "h2" else ConnectionPool
        handshake = functools.partial(on_handshake, pool.name)
        for state in pool.members:
            member = state.member
            connections[id(state)] = kind(member.host, member.port, tls if member.tls else None, handshake)
    return connections


def _tls_context(pool: PoolConfig) -> ssl.SSLContext | None:
    if not any(m.tls for m in pool.members):
        return None
    alpn = ["h2", "http/1.1"] if pool.protocol == "h2" else ["http/1.1"]
    return client_context(pool.ca_file, pool.client_cert, pool.client_key, alpn, f"pool {pool.name!r}")
