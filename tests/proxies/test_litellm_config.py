"""LiteLLM's config as written: stock routes its one model to the stub's OpenAI API; `anthropic_upstream` makes
the same model an Anthropic deployment at the stub's origin, so /v1/messages reaches the stub's Anthropic route."""

from __future__ import annotations

from pathlib import Path

from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, Site


def config(tmp_path: Path, variant: str) -> str:
    proxy = lookup("litellm")
    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, proxy.variant(variant))
    return proxy.write_config(site).read_text()


def test_stock_is_an_openai_deployment_at_the_stubs_v1(tmp_path: Path) -> None:
    text = config(tmp_path, "stock")
    assert 'model: "openai/tokenpath-stub"' in text
    assert "api_base: http://127.0.0.1:8000/v1\n" in text
    assert "anthropic" not in text


def test_anthropic_upstream_is_an_anthropic_deployment_at_the_stubs_origin(tmp_path: Path) -> None:
    text = config(tmp_path, "anthropic_upstream")
    assert 'model: "anthropic/tokenpath-stub"' in text
    # LiteLLM appends /v1/messages itself: a /v1 here would ask the stub for /v1/v1/messages.
    assert "api_base: http://127.0.0.1:8000\n" in text
    assert 'model_name: "tokenpath-stub"' in text  # clients ask for the same model name on every route
