"""`tokenpath matrix EXPERIMENT --emit-compose DIR`: the same experiment for people who have Docker.

Writes DIR/docker-compose.yml, DIR/Dockerfile and DIR/context (the emitter and the probe, built from a copy of
this source tree's package files only: no virtualenv, no caches, and the build does not depend on the tree after
the export) and one config directory per proxy and variant, rendered by the same catalogue code the local runner
uses, with paths moved into the container. Images are pinned, the base image to its patch release; every published
port binds 127.0.0.1; no top-level `name` (Compose v1 refuses it; the project is named after DIR). Conditions the
export cannot run (TLS, veth links) are listed in the file's header and returned, never dropped silently.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import shutil
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from tokenpath.errors import UsageError
from tokenpath.experiment.spec import Experiment
from tokenpath.proxies.base import Endpoint, Site

CONFIG_DIR = "/etc/tokenpath"  # proxy configs, mounted read-only
WORK_DIR = "/var/tmp/tokenpath"  # what a proxy writes (pid, temp files), inside its container
PROXY_PORT = 8080
STUB_PORT = 8000
FIRST_HOST_PORT = 18080
BASE_IMAGE = "python:3.11.7-slim-bookworm"  # pinned to the patch release the project is developed on
CONTEXT_FILES = ("pyproject.toml", "README.md")


SOURCE_ENV = "TOKENPATH_SOURCE"


def source_root() -> Path:
    """The tokenpath source tree the images are built from: $TOKENPATH_SOURCE, else the project an editable
    install points at (PEP 610's direct_url.json, as `pip install -e .` records it)."""
    if os.environ.get(SOURCE_ENV):
        root = Path(os.environ[SOURCE_ENV])
    else:
        try:
            raw = importlib.metadata.distribution("tokenpath").read_text("direct_url.json") or "{}"
            url = json.loads(raw).get("url", "")
        except (importlib.metadata.PackageNotFoundError, ValueError):
            url = ""
        if not url.startswith("file://"):
            raise UsageError(f"--emit-compose builds images from a source tree: set {SOURCE_ENV} to one")
        root = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    if not (root / "pyproject.toml").is_file() or not (root / "src" / "tokenpath").is_dir():
        raise UsageError(f"{root} is not a tokenpath source tree (set {SOURCE_ENV} to one)")
    return root


def emit(exp: Experiment, out_dir: Path, source_root: Path) -> tuple[Path, list[str]]:
    """The compose file, and the conditions of the experiment it cannot run (each with the reason)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _copy_context(source_root, out_dir / "context")
    services: dict[str, Any] = {
        "emitter": {
            "build": {"context": "./context", "dockerfile": "../Dockerfile"},
            "command": ["tokenpath", "stub", "--host", "0.0.0.0", "--port", str(STUB_PORT), "--priority", "normal"],
            "ports": [f"127.0.0.1:{STUB_PORT}:{STUB_PORT}"],
        }
    }
    targets = {"direct": f"http://emitter:{STUB_PORT}"}
    host_port = FIRST_HOST_PORT
    for path in exp.paths:
        if path.proxy == "direct":
            continue
        proxy = exp.proxy(path.proxy)
        if not proxy.image:
            continue  # tokenpath's own relays and custom commands have no image: run them locally
        name = f"{path.proxy}-{path.variant}".replace("_", "-")
        services[name] = _proxy_service(proxy, path.variant, out_dir / "configs" / name)
        services[name]["ports"] = [f"127.0.0.1:{host_port}:{PROXY_PORT}"]
        services[name]["depends_on"] = ["emitter"]
        targets[name] = f"http://{name}:{PROXY_PORT}"
        host_port += 1
    services["probe"] = {
        "build": dict(services["emitter"]["build"]),
        "depends_on": [n for n in services if n != "probe"],
        "command": ["sh", "-c", _probe_script(exp, targets)],
    }
    (out_dir / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nWORKDIR /src\nCOPY pyproject.toml README.md ./\nCOPY src ./src\n"
        "RUN pip install --no-cache-dir .\n"
    )
    skipped = [f"{c.label}: {_why_not(c)}" for c in exp.conditions if c.tls or c.link != "loopback"]
    compose = {"services": services}
    compose_file = out_dir / "docker-compose.yml"
    header = [f"# Written by tokenpath matrix --emit-compose for experiment {exp.name!r};",
              "# run it with `docker compose up --abort-on-container-exit`."]  # fmt: skip
    header += [f"# Not exported: {line}" for line in skipped]
    compose_file.write_text("\n".join(header) + "\n" + yaml.safe_dump(compose, sort_keys=False))
    return compose_file, skipped


def _why_not(cond: Any) -> str:
    if cond.tls:
        return "TLS conditions need the certificates the local runner makes per run (run `tokenpath matrix` here)"
    return f"link {cond.link!r} needs network namespaces the containers do not get (run `tokenpath matrix` as root)"


def _copy_context(source_root: Path, context: Path) -> None:
    """The package's build inputs only (a source tree's .venv, caches and results stay out of the image)."""
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    for name in CONTEXT_FILES:
        shutil.copy2(source_root / name, context / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(source_root / "src", context / "src", ignore=ignore)


def _proxy_service(proxy: Any, variant: str, config_dir: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="tokenpath-compose-"))
    try:
        site = Site(Endpoint("0.0.0.0", PROXY_PORT), Endpoint("emitter", STUB_PORT), workdir, proxy.variant(variant))
        config = proxy.write_config(site)
        config_dir.mkdir(parents=True, exist_ok=True)
        text = config.read_text().replace(str(workdir), WORK_DIR)
        (config_dir / config.name).write_text(text)
        service: dict[str, Any] = {"image": proxy.image}
        mounted = f"./{config_dir.relative_to(config_dir.parents[1])}"
        if proxy.container_config:
            service["volumes"] = [f"{mounted}/{config.name}:{proxy.container_config}:ro"]
            return service
        argv = [Path(proxy.argv(site, config)[0]).name, *proxy.argv(site, config)[1:]]
        argv = [a.replace(str(config), f"{CONFIG_DIR}/{config.name}").replace(str(workdir), WORK_DIR) for a in argv]
        service["volumes"] = [f"{mounted}:{CONFIG_DIR}:ro"]
        service["command"] = ["sh", "-c", f"mkdir -p {WORK_DIR}/tmp && exec {shlex.join(argv)}"]
        return service
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _probe_script(exp: Experiment, targets: dict[str, str]) -> str:
    lines = ["set -e", "sleep 3"]
    for cond in exp.conditions:
        if cond.tls or cond.link != "loopback":
            continue
        pacing = {"tokenpath": {"interval_ms": cond.interval_ms, "frame_bytes": cond.frame_bytes,
                                "tokens": exp.frames, "ttft_ms": exp.ttft_ms, "format": "plain"}}  # fmt: skip
        body = shlex.quote(json.dumps(pacing, separators=(",", ":")))
        for name, url in targets.items():
            lines.append(f"echo '== {name}: {cond.label}'")
            lines.append(f"tokenpath probe {url} --runs {exp.runs} --body-json {body}")
    return "\n".join(lines)
