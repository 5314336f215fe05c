"""Files found by a documented setting, not by the checkout's layout: each setting is applied, and a wrong one says
so rather than being silently replaced by a default."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment.compose import SOURCE_ENV, source_root
from tokenpath.proxies import litellm
from tokenpath.proxies.node import SCRIPT

ROOT = Path(__file__).resolve().parents[1]


def test_the_litellm_venv_is_the_setting_then_the_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(litellm.VENV_ENV, str(tmp_path / "venv"))
    assert litellm.venv_dir() == tmp_path / "venv"
    assert litellm.LiteLLM().binary() is None  # nothing installed there: the target is skipped with its reason
    assert str(tmp_path / "venv") in (litellm.LiteLLM().missing_reason() or "")
    monkeypatch.delenv(litellm.VENV_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert litellm.venv_dir() == tmp_path / "data" / "tokenpath" / "litellm-venv"


def test_the_compose_source_is_the_setting_and_must_be_a_source_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SOURCE_ENV, str(ROOT))
    assert source_root() == ROOT
    monkeypatch.setenv(SOURCE_ENV, str(tmp_path))
    with pytest.raises(UsageError, match="not a tokenpath source tree"):
        source_root()


def test_the_node_peer_ships_inside_the_package() -> None:
    assert SCRIPT.is_file()
    assert "src/tokenpath/" in SCRIPT.as_posix() or "site-packages/tokenpath/" in SCRIPT.as_posix()
