from __future__ import annotations

from tokenpath.proxies.base import Proxy, ProxyError
from tokenpath.proxies.haproxy import HAProxy
from tokenpath.proxies.nginx import Nginx
from tokenpath.proxies.relays import CONTROLS


def catalogue() -> dict[str, Proxy]:
    entries: list[Proxy] = [Nginx(), HAProxy(), *CONTROLS]
    return {p.name: p for p in entries}


def lookup(name: str) -> Proxy:
    entries = catalogue()
    if name not in entries:
        raise ProxyError(f"no proxy {name!r} in the catalogue; known: {', '.join(sorted(entries))}")
    return entries[name]
