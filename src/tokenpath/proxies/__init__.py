"""The proxy catalogue: one module per proxy, each a `Proxy` that can write its stock config, start, and say
what it is running. `catalogue()` lists them by name."""

from tokenpath.errors import ProxyError
from tokenpath.proxies.base import Proxy, RunningProxy, Variant
from tokenpath.proxies.catalogue import catalogue, lookup

__all__ = ["Proxy", "ProxyError", "RunningProxy", "Variant", "catalogue", "lookup"]
