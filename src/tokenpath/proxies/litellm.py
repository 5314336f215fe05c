"""LiteLLM proxy, the Python gateway users reach for, as a load peer (bench/peers/litellm/setup installs it).

Its venv is found by a documented setting, not the checkout's layout: $TOKENPATH_LITELLM_VENV, else
$XDG_DATA_HOME/tokenpath/litellm-venv (~/.local/share/tokenpath/litellm-venv), where the setup script installs.

It needs a master key: one is made per run, kept in the private work directory (0600), given to LiteLLM by
environment variable and to the load client as its API key; it never appears on a command line or in a log.

Its stream limit is `litellm_settings.request_timeout`, "the proxy-wide default when no router or deployment
timeout is set", which on a stream "bounds each wait for the next chunk" (docs.litellm.ai/docs/proxy/timeout): an
idle limit, 6000 s by default (litellm's `request_timeout: float = 6000  # time in seconds`, its httpx clients'
timeout). Every config states it; `long_streams` writes the default out, already above any generation (a router
`timeout` or a deployment's `stream_timeout`, which it leaves unset, would lower it).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.proxies.timeouts import LIFTED_S, LONG_STREAMS, StreamTimeouts

VENV_ENV = "TOKENPATH_LITELLM_VENV"
ANTHROPIC_UPSTREAM = "anthropic_upstream"  # the variant whose upstream speaks the Anthropic Messages API
REQUEST_TIMEOUT_S = 6000.0  # litellm.request_timeout's default (docs.litellm.ai/docs/proxy/timeout)
LIFTED_TIMEOUT_S = max(LIFTED_S, REQUEST_TIMEOUT_S)  # long_streams never lowers it


def venv_dir() -> Path:
    if os.environ.get(VENV_ENV):
        return Path(os.environ[VENV_ENV])
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "tokenpath" / "litellm-venv"


def setup_command() -> str:
    """What installs it where it is looked for: two commands that work from any install of tokenpath (the
    repository's bench/peers/litellm/setup runs the same)."""
    venv = shlex.quote(str(venv_dir()))
    return f"python3 -m venv {venv} && {venv}/bin/pip install 'litellm[proxy]'"


class LiteLLM(Proxy):
    name = "litellm"
    package = "litellm[proxy] in its own venv"
    tls_unsupported = "the LiteLLM peer serves plain HTTP"
    openai_only = True
    # Importing its proxy server alone takes ~14 s of CPU on this 2-core machine (measured: `python -c "import
    # litellm.proxy.proxy_server"`), several times that while other processes share the cores.
    start_timeout_s = 90.0
    variants = (
        Variant(STOCK.name, "LiteLLM proxy, one worker, an OpenAI-compatible upstream"),
        # The same proxy with its one deployment an Anthropic model at the stub: /v1/messages then reaches the
        # stub's own Anthropic route (the shape of BerriAI/litellm#28384) instead of being translated to OpenAI's.
        Variant(ANTHROPIC_UPSTREAM, "one deployment `anthropic/<model>` at the stub's origin (Messages API upstream)"),
        Variant(
            LONG_STREAMS,
            "request_timeout stated at its default, 6000 s (no router or deployment timeout below it)",
            f"litellm_settings: request_timeout: {LIFTED_TIMEOUT_S:g}",
        ),
    )
    stock_timeouts = StreamTimeouts(idle_s=REQUEST_TIMEOUT_S)

    def binary(self) -> str | None:
        path = venv_dir() / "bin" / "litellm"
        return str(path) if path.exists() else None

    def missing_reason(self) -> str | None:
        if self.binary() is None:
            return f"not set up: {setup_command()} (a large install in its own venv; ${VENV_ENV} puts it elsewhere)"
        return None

    def version(self) -> str:
        python = venv_dir() / "bin" / "python"
        if not python.exists():
            return "not installed"
        return run_quiet([str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"])

    def api_key(self, site: Site) -> str:
        key_file = site.workdir / "master.key"
        if not key_file.exists():
            key_file.write_text("sk-" + secrets.token_urlsafe(32))  # LiteLLM refuses weak master keys
            key_file.chmod(0o600)
        return key_file.read_text()

    def write_config(self, site: Site) -> Path:
        self.api_key(site)
        config = site.workdir / "litellm.yaml"
        key = f"os.environ/{site.upstream_api_key_env}" if site.upstream_api_key_env else "unused"
        model = json.dumps(site.upstream_model)
        if site.variant.name == ANTHROPIC_UPSTREAM:
            # LiteLLM appends /v1/messages to an Anthropic api_base itself: the origin, not the OpenAI base.
            upstream, provider, kind = site.upstream_url, "anthropic/", "Anthropic Messages"
        else:
            upstream, provider, kind = site.upstream_api_base, "openai/", "OpenAI-compatible"
        config.write_text(f"""# tokenpath: LiteLLM proxy in front of one {kind} upstream
model_list:
  - model_name: {model}
    litellm_params:
      model: {json.dumps(provider + site.upstream_model)}
      api_base: {upstream}
      api_key: {key}
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
litellm_settings:
  telemetry: false
  request_timeout: {self._request_timeout(site):g}
""")
        return config

    def _request_timeout(self, site: Site) -> float:
        """Its one stream limit (an idle one): stock's, a site's own (its idle limit, else its total), or lifted."""
        limits = self.timeouts_for(site)
        if limits is None:
            return LIFTED_TIMEOUT_S
        return limits.idle_s or limits.first_byte_s or limits.total_s or LIFTED_TIMEOUT_S

    def env(self, site: Site) -> dict[str, str]:
        return {
            "LITELLM_MASTER_KEY": self.api_key(site),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost map from the network
            "LITELLM_LOG": "ERROR",
            **site.ca_env("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"),  # a private CA for an https upstream
        }

    def argv(self, site: Site, config: Path) -> list[str]:
        binary = self.require_binary()
        return [
            binary,
            "--config",
            str(config),
            "--host",
            site.listen.host,
            "--port",
            str(site.listen.port),
            "--num_workers",
            "1",
        ]
