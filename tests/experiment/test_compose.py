from __future__ import annotations

from pathlib import Path

import yaml

from tokenpath.experiment.compose import emit
from tokenpath.experiment.spec import load

ROOT = Path(__file__).parents[2]


def test_compose_export_is_valid_and_safe(tmp_path: Path) -> None:
    path, skipped = emit(load(ROOT / "examples" / "article.toml"), tmp_path, ROOT)
    text = path.read_text()
    assert "&id" not in text  # no YAML anchors: plain for any reader
    doc = yaml.safe_load(text)
    services = doc["services"]
    expected = {"emitter", "probe", "nginx-stock", "nginx-proxy-buffering-off", "nginx-http-1-1", "haproxy-stock",
                "haproxy-http-no-delay", "caddy-stock", "traefik-stock"}  # fmt: skip
    assert set(services) == expected
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
        if "image" in service:
            tag = service["image"].rsplit(":", 1)
            assert len(tag) == 2, service["image"]
            assert tag[1] not in ("", "latest"), service["image"]
    assert "tokenpath probe http://haproxy-stock:8080" in services["probe"]["command"][2]
    assert '"frame_bytes":1100' in services["probe"]["command"][2]
    for config in (tmp_path / "configs").rglob("*"):
        if config.is_file():
            assert "/tmp/tokenpath-" not in config.read_text(), config
    nginx = (tmp_path / "configs" / "nginx-stock" / "nginx.conf").read_text()
    assert "server emitter:8000;" in nginx
    assert "/var/tmp/tokenpath/tmp/proxy" in nginx
    assert services["traefik-stock"]["volumes"] == ["./configs/traefik-stock/traefik.yml:/etc/traefik/traefik.yml:ro"]
    base = (tmp_path / "Dockerfile").read_text().splitlines()[0]
    assert base.startswith("FROM python:3.11."), base  # pinned to a patch release
    assert base.count(".") >= 2, base
    assert "name" not in doc  # Compose v1 refuses a top-level name
    context = tmp_path / "context"
    assert services["emitter"]["build"] == {"context": "./context", "dockerfile": "../Dockerfile"}
    assert (context / "pyproject.toml").is_file()
    assert (context / "src" / "tokenpath" / "__init__.py").is_file()
    assert not list(context.rglob("__pycache__"))
    assert not (context / ".venv").exists()  # only the package's build inputs go into the image
    assert all(line in text for line in (f"# Not exported: {s}" for s in skipped))


def test_conditions_the_export_cannot_run_are_named(tmp_path: Path) -> None:
    from tokenpath.experiment.spec import parse

    exp = parse({"conditions": {"interval_ms": [50], "frame_bytes": [60], "link": ["loopback", "veth"],
                                "tls": [False, True]}, "proxy": [{"name": "nginx"}]})  # fmt: skip
    _, skipped = emit(exp, tmp_path, ROOT)
    assert len(skipped) == 3  # veth, TLS, veth + TLS
    assert any("TLS" in line for line in skipped)
    assert any("veth" in line for line in skipped)
