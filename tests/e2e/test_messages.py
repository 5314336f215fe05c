"""Issue 21: messages name what the user wrote where they wrote it (a config file's key as the file spells it), and
point at nothing a wheel install does not have."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tokenpath.proxies import litellm
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOKENPATH_TEST_UNSET_KEY"}
    return subprocess.run(tokenpath_argv(*args), capture_output=True, text=True, timeout=60, env=env)


def test_a_monitor_config_error_names_the_toml_key_and_a_flag_error_the_flag(tmp_path: Path) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text('[[target]]\nname = "a"\nurl = "http://127.0.0.1:9"\napi_key_env = "TOKENPATH_TEST_UNSET_KEY"\n')
    out = run("monitor", str(config), "--once")
    assert out.returncode == 2, out.stderr
    assert "`api_key_env` TOKENPATH_TEST_UNSET_KEY: that environment variable is not set" in out.stderr
    assert "--api-key-env" not in out.stderr  # the file has no flags
    flags = run("monitor", "--url", "http://127.0.0.1:9", "--api-key-env", "TOKENPATH_TEST_UNSET_KEY", "--once")
    assert flags.returncode == 2, flags.stderr
    assert "--api-key-env TOKENPATH_TEST_UNSET_KEY: that environment variable is not set" in flags.stderr


def test_litellm_not_set_up_says_how_to_set_it_up_from_any_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(litellm.VENV_ENV, str(tmp_path / "litellm venv"))
    reason = litellm.LiteLLM().missing_reason() or ""
    assert "bench/" not in reason  # a wheel install has no bench/ folder
    assert f"python3 -m venv '{tmp_path / 'litellm venv'}'" in reason
    assert f"'{tmp_path / 'litellm venv'}'/bin/pip install 'litellm[proxy]'" in reason


def test_the_load_plan_points_at_the_source_repository_not_a_local_file() -> None:
    out = run("load", "--plan", "--concurrency", "50")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "in tokenpath's source repository" in text
    assert "measure yours with bench/client_scaling.py" not in text
