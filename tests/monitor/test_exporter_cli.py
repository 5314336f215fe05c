"""`tokenpath monitor`'s new flags reach the library: the CLI builds the configs, serving is replaced by a recorder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.monitor import exporter, service


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    configs: list[Any] = []
    monkeypatch.setattr(exporter, "serve", lambda cfg, announce: configs.append(cfg))
    monkeypatch.setattr(service, "serve", lambda cfg, announce: configs.append(cfg))
    return configs


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["monitor", *args], env={"COLUMNS": "200"})


def test_the_exporter_flags_become_its_config(tmp_path: Path, served: list[Any]) -> None:
    modules = tmp_path / "modules.toml"
    modules.write_text('[modules.gpt]\nmodel = "gpt-4o-mini"\n')
    out = run("--exporter", "--modules", str(modules), "--allow", "http://10.0.0.*:*", "--allow", "https://a.example",
              "--max-concurrency", "3", "--metric-names", "otel", "--metrics-listen", "127.0.0.1:9999")  # fmt: skip
    assert out.exit_code == 0, out.output
    cfg = served[0]
    assert isinstance(cfg, exporter.ExporterConfig)
    assert list(cfg.modules) == ["gpt"]
    assert [p.text for p in cfg.allow.patterns] == ["http://10.0.0.*:*", "https://a.example"]
    assert (cfg.max_concurrency, cfg.metric_names, cfg.listen) == (3, "otel", "127.0.0.1:9999")


def test_the_monitor_takes_metric_names_and_max_concurrency_from_flags(served: list[Any]) -> None:
    out = run("--url", "http://127.0.0.1:9/v1", "--metric-names", "otel", "--max-concurrency", "2")
    assert out.exit_code == 0, out.output
    assert (served[0].settings.metric_names, served[0].settings.max_concurrency) == ("otel", 2)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--exporter", "--url", "http://127.0.0.1:9"], "--exporter takes its targets from Prometheus"),
        (["--url", "http://127.0.0.1:9", "--allow", "http://*"], "--modules and --allow go with --exporter"),
        (["--exporter", "--allow", "10.0.0.1"], "--allow pattern '10.0.0.1': expected SCHEME://HOST"),
        (["--exporter", "--metric-names", "prom"], "--metric-names must be one of tokenpath, otel"),
        (["--exporter", "--max-concurrency", "0"], "--max-concurrency must be between 1 and 256"),
        (["--url", "http://127.0.0.1:9", "--metric-names", "prom"], "--metric-names must be one of"),
    ],
)
def test_bad_flags_are_one_line_exit_2(args: list[str], says: str, served: list[Any]) -> None:
    out = run(*args)
    assert out.exit_code == 2, out.output
    assert says in out.output
    assert served == []


def test_a_modules_file_error_names_its_keys_as_the_file_spells_them(tmp_path: Path, served: list[Any]) -> None:
    modules = tmp_path / "modules.toml"
    modules.write_text('[modules.gpt]\napi_key_env = "TOKENPATH_TEST_UNSET_KEY"\n')
    out = run("--exporter", "--modules", str(modules))
    assert out.exit_code == 2
    assert "`api_key_env` TOKENPATH_TEST_UNSET_KEY" in out.output  # not --api-key-env: a key of the file
