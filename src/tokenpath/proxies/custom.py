"""A proxy given as a command line in the experiment file, with {listen}, {listen_host}, {listen_port}, {upstream}
and {upstream_url} placeholders (CustomProxy.argv), e.g.
`socat TCP-LISTEN:{listen_port},bind={listen_host},fork,reuseaddr TCP:{upstream}`.

An AI gateway usually needs more of a request than a reverse proxy: its own model name, a header that routes the
request, an API key, a base path. Those are options of the target (`model`, `headers`, `api_key_env`,
`base_path`), so any gateway can be measured without a code change."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies.base import STOCK, Proxy, Site
from tokenpath.wire.request import check_header


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a custom target needs of each request."""

    model: str | None = None  # the model name it routes to the stub's model
    headers: tuple[tuple[str, str], ...] = ()
    api_key_env: str | None = None  # its Bearer token, read from this variable when it starts
    base_path: str = ""  # where its OpenAI API lives, e.g. /openai/v1

    @classmethod
    def parse(cls, name: str, pairs: dict[str, object]) -> RequestOptions:
        known = {"model", "headers", "api_key_env", "base_path"}
        unknown = set(pairs) - known
        if unknown:
            raise UsageError(f"proxy {name!r}: unknown request option(s) {sorted(unknown)}; known: {sorted(known)}")
        headers = pairs.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise UsageError(f"proxy {name!r}: headers must be a table of strings")
        for key in ("model", "api_key_env", "base_path"):
            if key in pairs and not isinstance(pairs[key], str):
                raise UsageError(f"proxy {name!r}: {key} must be a string")
        base = str(pairs.get("base_path") or "")
        if base and not base.startswith("/"):
            raise UsageError(f"proxy {name!r}: base_path must start with /")
        for header, value in headers.items():
            check_header(str(header), value)
        env = pairs.get("api_key_env")
        if env and not os.environ.get(str(env)):
            raise UsageError(f"proxy {name!r}: api_key_env {env}: that environment variable is not set")
        model = pairs.get("model")
        return cls(
            str(model) if model else None,
            tuple((str(k), v) for k, v in headers.items()),
            str(env) if env else None,
            base.rstrip("/"),
        )


class CustomProxy(Proxy):
    def __init__(
        self, name: str, command: str, version_command: str | None = None, options: RequestOptions | None = None
    ) -> None:
        if "{listen" not in command or "{upstream" not in command:
            raise ProxyError(
                f"proxy {name!r}: command must contain {{listen}} (or {{listen_port}}) and {{upstream}} (HOST:PORT) "
                "or {upstream_url} (scheme://HOST:PORT)"
            )
        try:
            self.words = shlex.split(command)
        except ValueError as exc:
            raise ProxyError(f"proxy {name!r}: cannot split the command: {exc}") from None
        self.name = name
        self.command = command
        self.version_command = version_command
        self.variants = (STOCK,)
        self.binaries = (self.words[0],)
        self.package = self.words[0]
        self.options = options or RequestOptions()
        self.base_path = self.options.base_path
        if "{upstream_url}" not in command:
            self.upstream_tls_unsupported = "its command takes {upstream} (HOST:PORT); give {upstream_url} for https"

    def request_model(self, model: str) -> str:
        return self.options.model or model

    def request_headers(self, site: Site) -> tuple[tuple[str, str], ...]:
        return self.options.headers

    def api_key(self, site: Site) -> str | None:
        env = self.options.api_key_env
        return os.environ.get(env) if env else None

    def binary(self) -> str | None:
        return shutil.which(self.words[0])

    def version(self) -> str:
        from tokenpath.proxies.base import run_quiet

        return run_quiet(shlex.split(self.version_command)) if self.version_command else "unknown"

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "command"
        config.write_text(" ".join(shlex.quote(w) for w in self.argv(site, Path())) + "\n")
        return config

    def argv(self, site: Site, config: Path) -> list[str]:
        values = {
            "{listen}": site.listen.hostport,
            "{listen_host}": site.listen.host,
            "{listen_port}": str(site.listen.port),
            "{upstream_url}": site.upstream_url,
            "{upstream}": site.upstream.hostport,
        }
        out = []
        for word in self.words:
            for key, value in values.items():
                word = word.replace(key, value)
            out.append(word)
        return out
