"""tokenpath's own gateway as a catalogue entry, so `load` and `matrix` measure it beside nginx, Node and LiteLLM.

Variants: `stock` (no auth, one worker: the relay alone), `jwt` (HS256 bearer tokens checked on every request:
the secret is made per run, kept in the private work directory and given by environment variable; the load
client gets a signed token as its API key), `workers2` (two SO_REUSEPORT workers), `long_streams` (its own stream
limits lifted).

Its stream limits are its `[limits]` defaults (gateway/config.py Limits, each justified there and in the README:
first byte 60 s, idle 300 s, total 900 s), written into every config but long_streams' as a user's file would state
them; tests/proxies/test_timeouts_configs.py holds the two to the same values (the catalogue sits below the gateway
and cannot import them)."""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

import jwt

from tokenpath import __version__
from tokenpath.proxies.base import Proxy, Site, Variant
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts

SECRET_ENV = "TOKENPATH_GATEWAY_JWT_SECRET"
TOKEN_LIFETIME_S = 24 * 3600
KEEPALIVE_S = 15.0  # Limits.keepalive_interval_s's default
# gateway/config.py Limits' defaults: first_byte_timeout_s, idle_timeout_s, total_timeout_s
STOCK_TIMEOUTS = StreamTimeouts(idle_s=300.0, first_byte_s=60.0, total_s=900.0)
LONG_STREAMS_LINE = (
    f"[limits] first_byte_timeout_s = {LIFTED_S:g}, idle_timeout_s = {LIFTED_S:g}, total_timeout_s = {LIFTED_S:g}"
)


class Gateway(Proxy):
    name = "gateway"
    package = "tokenpath"
    tls_unsupported = "the gateway serves plain HTTP (terminate TLS in front of it)"
    variants = (
        Variant("stock", "tokenpath gateway, no auth, one worker"),
        Variant("jwt", "HS256 JWT checked on every request"),
        Variant("workers2", "two SO_REUSEPORT workers, no auth"),
        Variant(
            LONG_STREAMS, "its first-byte, idle and total limits an hour (stock: 60 s, 300 s, 900 s)", LONG_STREAMS_LINE
        ),
    )
    stock_timeouts = STOCK_TIMEOUTS

    def client_http_unsupported(self, variant: Variant, tls: bool, http: str) -> str:
        # Its listener speaks HTTP/1.1 and h2c (prior knowledge) on one clear-text port.
        return self.tls_unsupported if tls else ""

    def binary(self) -> str | None:
        return sys.executable

    def version(self) -> str:
        return f"tokenpath {__version__}"

    def _secret(self, site: Site) -> str:
        path = site.workdir / "jwt.secret"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text()

    def api_key(self, site: Site) -> str | None:
        if site.variant.name != "jwt":
            return None
        now = int(time.time())
        claims = {"sub": "tokenpath-load", "iat": now, "exp": now + TOKEN_LIFETIME_S}
        return jwt.encode(claims, self._secret(site), algorithm="HS256")

    def env(self, site: Site) -> dict[str, str]:
        return {SECRET_ENV: self._secret(site)} if site.variant.name == "jwt" else {}

    def write_config(self, site: Site) -> Path:
        auth = f'[auth]\nsecret_env = "{SECRET_ENV}"\nalgorithms = ["HS256"]\n'
        config = site.workdir / "gateway.toml"
        config.write_text(
            "# tokenpath: the gateway in front of one upstream\n"
            f'listen = "{site.listen.hostport}"\n'
            f"workers = {2 if site.variant.name == 'workers2' else 1}\n"
            + (auth if site.variant.name == "jwt" else '[auth]\nmode = "none"\n')
            + self._limits(site)
            + '[[pool]]\nname = "default"\n'
            + _pool_endpoint(site)
            + f'[[pool.member]]\nurl = "{site.upstream_url}"\n'
        )
        return config

    def _limits(self, site: Site) -> str:
        """The stream limits as `[limits]` keys: stock's (its defaults, stated), a site's own, or lifted. A site's
        limit that is None is lifted too; its idle limit is also the first-byte one unless it names one."""
        limits = self.timeouts_for(site) or StreamTimeouts(LIFTED_S, LIFTED_S, LIFTED_S)
        first_byte = limits.first_byte_s or limits.idle_s or LIFTED_S
        idle, total = limits.idle_s or LIFTED_S, limits.total_s or LIFTED_S
        lines = [f"first_byte_timeout_s = {first_byte:g}", f"idle_timeout_s = {idle:g}", f"total_timeout_s = {total:g}"]
        if idle <= KEEPALIVE_S:  # its idle limit ends a silence before the first keep-alive: off, and said so
            lines.append("keepalive_interval_s = 0")
        return "[limits]\n" + "".join(line + "\n" for line in lines)

    def argv(self, site: Site, config: Path) -> list[str]:
        return [sys.executable, "-m", "tokenpath", "gateway", "--config", str(config), "--log-level", "warning"]


def _pool_endpoint(site: Site) -> str:
    """A real endpoint: the gateway sends its own key upstream (never the client's token), and trusts its CA."""
    lines = [f'api_key_env = "{site.upstream_api_key_env}"'] if site.upstream_api_key_env else []
    if site.upstream_tls and site.upstream_tls.cacert:
        lines.append(f'ca_file = "{site.upstream_tls.cacert}"')
    return "".join(line + "\n" for line in lines)
