from __future__ import annotations

from tokenpath.errors import ProxyError
from tokenpath.proxies.apache2 import Apache2
from tokenpath.proxies.base import Proxy
from tokenpath.proxies.caddy import Caddy, Caddy211
from tokenpath.proxies.envoy import Envoy
from tokenpath.proxies.gateway import Gateway
from tokenpath.proxies.h2o import H2O
from tokenpath.proxies.haproxy import HAProxy, HAProxy3
from tokenpath.proxies.lighttpd import Lighttpd
from tokenpath.proxies.litellm import LiteLLM
from tokenpath.proxies.nginx import Nginx
from tokenpath.proxies.node import NodeProxy
from tokenpath.proxies.portkey import Portkey
from tokenpath.proxies.relays import CONTROLS
from tokenpath.proxies.squid import Squid
from tokenpath.proxies.tensorzero import TensorZero
from tokenpath.proxies.traefik import Traefik
from tokenpath.proxies.varnish import Varnish


def catalogue() -> dict[str, Proxy]:
    entries: list[Proxy] = [
        Nginx(),
        HAProxy(),
        HAProxy3(),
        Caddy(),
        Caddy211(),
        Apache2(),
        H2O(),
        Lighttpd(),
        Varnish(),
        Squid(),
        Traefik(),
        Envoy(),
        NodeProxy(naive=False),
        NodeProxy(naive=True),
        NodeProxy(naive=False, runtime=22),
        NodeProxy(naive=True, runtime=22),
        LiteLLM(),
        TensorZero(),
        Portkey(),
        Gateway(),
        *CONTROLS,
    ]
    return {p.name: p for p in entries}


def lookup(name: str) -> Proxy:
    entries = catalogue()
    if name not in entries:
        raise ProxyError(f"no proxy {name!r} in the catalogue; known: {', '.join(sorted(entries))}")
    return entries[name]
