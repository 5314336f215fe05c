"""`--allow`: the targets the exporter may probe. An exporter that probes any URL it is handed lets whoever can
reach it make requests from inside the network (SSRF), so with no pattern every /probe is refused.

A pattern is a URL whose parts are shell-style globs (fnmatch: `*`, `?`, `[...]`), matched part by part against the
parsed target, never against the URL string (where `*` would also match the `@` of `http://allowed@evil/` or
cross from host into path):

    SCHEME://HOST[:PORT][/PATH]     e.g.  https://*.llm.example.com   http://10.0.0.5:8000/v1/*   http://127.0.0.1:*

- SCHEME: `http`, `https` or `*`; HOST: a glob over the host name or address, label by label (case-insensitive; an
  IPv6 address in brackets): a `*` matches within one DNS label, as in a TLS wildcard, so `http://127.0.0.*:80`
  never allows `127.0.0.1.attacker.example`; `*` alone is any host; PORT: digits or `*`, and without one only the
  scheme's default port; PATH: a glob over the path requested (the chat path a base URL gets appended, and the
  query), any path when left out.

A target is matched only once its path names one resource on any server: a dot segment (`/v1/../internal`, also
percent-encoded, in any case, or as Tomcat's `..;`) or an encoded slash or backslash is refused (a UsageError)
before any pattern is tried, as the gateway's router refuses them (wire/requesttarget.py): the probe sends the
path as written, and a server that resolves it would serve a path the pattern never named.

Patterns match names as written in the URL, not the addresses they resolve to: a host name under an attacker's DNS
control can point anywhere, so allow addresses, or names you control.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tokenpath.errors import UsageError
from tokenpath.probe.transport import Target, parse_target
from tokenpath.wire.requesttarget import resolvable_path_problem

_PATTERN = re.compile(
    r"^(?P<scheme>https?|\*)://(?P<host>\[[0-9A-Fa-f:.*?]+\]|[^/:@]+)(?::(?P<port>\d{1,5}|\*))?(?P<path>/.*)?$"
)
ANY_PORT = -1
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class UrlPattern:
    text: str
    scheme: str  # or "*"
    host: str  # a lower-case glob, IPv6 without brackets
    port: int | None  # None: the scheme's default port; ANY_PORT: any
    path: str  # a glob

    @classmethod
    def parse(cls, text: str) -> UrlPattern:
        m = _PATTERN.match(text.strip())
        if not m:
            raise UsageError(f"`allow` pattern {text!r}: expected SCHEME://HOST[:PORT][/PATH] with fnmatch globs")
        port_text = m.group("port")
        port = None if port_text is None else ANY_PORT if port_text == "*" else int(port_text)
        if port is not None and port > 65535:
            raise UsageError(f"`allow` pattern {text!r}: port {port} is out of range")
        host = m.group("host").lower()
        if host.startswith("[") and ":" in host:  # an IPv6 address; other brackets are a glob's [set]
            host = host[1:-1]
        return cls(text, m.group("scheme"), host, port, m.group("path") or "*")

    def matches(self, target: Target) -> bool:
        if self.scheme not in ("*", target.scheme):
            return False
        port = DEFAULT_PORTS[target.scheme] if self.port is None else self.port
        if port not in (ANY_PORT, target.port):
            return False
        return _host_matches(target.host.lower(), self.host) and fnmatchcase(target.path, self.path)


def _host_matches(host: str, glob: str) -> bool:
    """Label by label, so that a `*` (or `?`, `[...]`) never crosses a dot into a name someone else controls."""
    if glob == "*":
        return True
    labels, globs = host.split("."), glob.split(".")
    return len(labels) == len(globs) and all(fnmatchcase(label, g) for label, g in zip(labels, globs, strict=True))


@dataclass(frozen=True, slots=True)
class AllowList:
    patterns: tuple[UrlPattern, ...] = ()

    @classmethod
    def parse(cls, patterns: Iterable[str]) -> AllowList:
        return cls(tuple(UrlPattern.parse(p) for p in patterns))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def allows(self, url: str) -> bool:
        """Whether the URL (as the probe will request it) matches a pattern. An invalid URL is a UsageError, and so
        is one whose path a server could resolve to another (whatever the patterns say)."""
        target = parse_target(url)
        problem = resolvable_path_problem(target.path.partition("?")[0])
        if problem is not None:
            why = "a server could resolve it to a path no --allow pattern names, so it is never probed"
            raise UsageError(f"URL {url!r}: {problem}; {why}: give the path resolved")
        return any(p.matches(target) for p in self.patterns)
