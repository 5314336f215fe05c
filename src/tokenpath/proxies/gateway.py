"""tokenpath's own gateway as a catalogue entry, so `load` and `matrix` measure it beside nginx, Node and LiteLLM.

Variants: `stock` (no auth, one worker: the relay alone), `jwt` (HS256 bearer tokens checked on every request:
the secret is made per run, kept in the private work directory and given by environment variable; the load
client gets a signed token as its API key), `workers2` (two SO_REUSEPORT workers)."""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

import jwt

from tokenpath import __version__
from tokenpath.proxies.base import Proxy, Site, Variant

SECRET_ENV = "TOKENPATH_GATEWAY_JWT_SECRET"
TOKEN_LIFETIME_S = 24 * 3600


class Gateway(Proxy):
    name = "gateway"
    package = "tokenpath"
    tls_unsupported = "the gateway serves plain HTTP (terminate TLS in front of it)"
    variants = (
        Variant("stock", "tokenpath gateway, no auth, one worker"),
        Variant("jwt", "HS256 JWT checked on every request"),
        Variant("workers2", "two SO_REUSEPORT workers, no auth"),
    )

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
            + '[[pool]]\nname = "default"\n'
            + _pool_endpoint(site)
            + f'[[pool.member]]\nurl = "{site.upstream_url}"\n'
        )
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        return [sys.executable, "-m", "tokenpath", "gateway", "--config", str(config), "--log-level", "warning"]


def _pool_endpoint(site: Site) -> str:
    """A real endpoint: the gateway sends its own key upstream (never the client's token), and trusts its CA."""
    lines = [f'api_key_env = "{site.upstream_api_key_env}"'] if site.upstream_api_key_env else []
    if site.upstream_tls and site.upstream_tls.cacert:
        lines.append(f'ca_file = "{site.upstream_tls.cacert}"')
    return "".join(line + "\n" for line in lines)
