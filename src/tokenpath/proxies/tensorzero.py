"""TensorZero, an AI gateway users pick instead of a plain proxy: the gateway inside its PyPI wheel
(`pip install tensorzero`, into the tools folder by scripts/install-proxies --all), started by a small launcher
(proxies/peers/tensorzero_gateway.py) with a config that routes its one model to the stub.

What it does to a stream, which the rows say: it speaks OpenAI at `/openai/v1` with its own model names
(`tensorzero::model_name::<model>`), re-serialises every chunk (its own ids), and drops the stream header and the
body's `user`; the load client puts the stream id in the prompt so the stub can still file the stream. Its
pseudonymous usage analytics are switched off (this machine reaches no host but the package registries).
"""

from __future__ import annotations

import json
import sys
from importlib.resources import files
from pathlib import Path

from tokenpath.proxies.base import STOCK, Proxy, Site, Variant, run_quiet
from tokenpath.tools import INSTALL_HINT, tools_dir

LAUNCHER = Path(str(files("tokenpath.proxies") / "peers" / "tensorzero_gateway.py"))  # installed with the package
MODEL_PREFIX = "tensorzero::model_name::"


def site_packages() -> Path:
    return tools_dir() / "tensorzero"


class TensorZero(Proxy):
    name = "tensorzero"
    package = "tensorzero (PyPI)"
    tls_unsupported = "the TensorZero peer serves plain HTTP"
    openai_only = True
    announces_url = True
    base_path = "/openai/v1"
    drops_stream_id = True
    variants = (
        Variant(STOCK.name, "the wheel's embedded HTTP gateway, one model routed to an OpenAI-compatible upstream"),
    )

    def binary(self) -> str | None:
        return sys.executable if (site_packages() / "tensorzero" / "__init__.py").exists() else None

    def missing_reason(self) -> str | None:
        return None if self.binary() else f"not installed ({INSTALL_HINT})"

    def version(self) -> str:
        if self.binary() is None:
            return "not installed"
        return run_quiet(
            [sys.executable, "-c", "import importlib.metadata as m; print(m.version('tensorzero'))"],
            env={"PYTHONPATH": str(site_packages())},
        )

    def request_model(self, model: str) -> str:
        return MODEL_PREFIX + model

    def write_config(self, site: Site) -> Path:
        config = site.workdir / "tensorzero.toml"
        model = json.dumps(site.upstream_model)  # a quoted key: model names carry "/" and ":"
        key = f'"env::{site.upstream_api_key_env}"' if site.upstream_api_key_env else '"none"'
        config.write_text(f"""# tokenpath: TensorZero in front of one OpenAI-compatible upstream (one model)
[gateway.observability]
enabled = false

[models.{model}]
routing = ["upstream"]

[models.{model}.providers.upstream]
type = "openai"
model_name = {model}
api_base = "{site.upstream_api_base}/"
api_key_location = {key}
""")
        return config

    def env(self, site: Site) -> dict[str, str]:
        return {
            "PYTHONPATH": str(site_packages()),
            "TENSORZERO_DISABLE_PSEUDONYMOUS_USAGE_ANALYTICS": "1",
            "RUST_LOG": "error",
            **site.ca_env("SSL_CERT_FILE"),
        }

    def argv(self, site: Site, config: Path) -> list[str]:
        return [sys.executable, str(LAUNCHER), "--config", str(config)]
