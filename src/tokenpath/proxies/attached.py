"""A path that is already running at host:port (`[[proxy]] name = "..." url = "http://host:port"`): tokenpath
neither starts nor configures it. Its upstream must be the stub this run starts (`[stub] listen`), and the stub's
audit is what proves it: a stream that reached another upstream has no audit entry and is excluded as such.

This is how the Docker route measures proxies running as Compose services (experiment/compose.py), and how anyone
measures a proxy on another host or one they cannot install here.

A TLS ingress is declared by its https URL (`url = "https://host:port"`, with `cacert` for a private CA): it
terminates TLS itself, so it is measured in the conditions with `tls = true` (each stream verifies its certificate
against that CA, or the system's store) and skipped, with that reason, in the plain ones."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from tokenpath.errors import ProxyError
from tokenpath.proxies.base import STOCK, Endpoint, Proxy, Site
from tokenpath.proxies.custom import RequestOptions


class AttachedProxy(Proxy):
    attached = True
    tls_unsupported = (
        "already running over http: tokenpath cannot give it TLS (declare its https URL, and its cacert, as a path)"
    )

    def __init__(
        self, name: str, url: str, version: str = "", options: RequestOptions | None = None, cacert: str | None = None
    ) -> None:
        parts = urlsplit(url)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.port is None
            or parts.path not in ("", "/")
        ):
            raise ProxyError(
                f"proxy {name!r}: url must be http://HOST:PORT or https://HOST:PORT (a path already "
                f"running), not {url!r}"
            )
        if cacert is not None and parts.scheme != "https":
            raise ProxyError(f"proxy {name!r}: cacert is for an https url")
        self.name = name
        self.url = url.rstrip("/")
        self.https = parts.scheme == "https"
        self.cacert = cacert  # the CA its certificate is checked against; None: the system's store
        self.listen = Endpoint(parts.hostname, parts.port)
        if self.https:  # it terminates TLS itself: measured where the condition is TLS, and only there
            self.tls_unsupported = ""
        self.plain_unsupported = (
            "serves https: measured in the conditions with tls = true (add them to [conditions])" if self.https else ""
        )
        self.declared_version = version
        self.variants = (STOCK,)
        self.options = options or RequestOptions()
        self.base_path = self.options.base_path

    def missing_reason(self) -> str | None:
        return None

    def binary(self) -> str | None:
        return None

    def version(self) -> str:
        return self.declared_version or 'unknown (already running; declare version = "...")'

    def request_model(self, model: str) -> str:
        return self.options.model or model

    def request_headers(self, site: Site) -> tuple[tuple[str, str], ...]:
        return self.options.headers

    def api_key(self, site: Site) -> str | None:
        env = self.options.api_key_env
        return os.environ.get(env) if env else None

    def write_config(self, site: Site) -> Path:
        raise ProxyError(f"{self.name} is already running at {self.url}: tokenpath does not configure it")
