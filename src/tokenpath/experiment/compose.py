"""`tokenpath matrix EXPERIMENT --emit-compose DIR`: the same certified experiment for people who have Docker.

Writes DIR/docker-compose.yml, DIR/Dockerfile, DIR/context (tokenpath, from a copy of this source tree's package
files only, or from the installed package: no virtualenv, no caches, and the build does not depend on the tree
after the export), DIR/experiment/experiment.toml (what the `matrix` service runs) and one config directory per
proxy and variant, rendered by the same catalogue code the local runner uses, with paths moved into the container.
The `matrix` service runs `tokenpath matrix` itself (stub, controls, certification, audits, exclusions) against
the proxies as paths already running at their service names (proxies/attached.py), and writes results.json and
report.html to DIR/results. Images are pinned, the base image to its patch release; nothing is published on the
host; no top-level `name` (Compose v1 refuses it). What the export cannot run (TLS and veth conditions, paths
without an image) is listed in the file's header and returned, never dropped silently.
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

import tokenpath
from tokenpath.axes import FRAME_BYTES, Condition
from tokenpath.errors import UsageError
from tokenpath.experiment.spec import Experiment, falls_back, grid_axes
from tokenpath.probe.wsfallback import WsFallback
from tokenpath.proxies.base import Endpoint, Proxy, Site

CONFIG_DIR = "/etc/tokenpath"  # proxy configs, mounted read-only
WORK_DIR = "/var/tmp/tokenpath"  # what a proxy writes (pid, temp files), inside its container
PROXY_PORT = 8080
STUB_PORT = 8000
RUNNER = "matrix"  # the service that runs `tokenpath matrix` (and its stub, the proxies' upstream)
EXPERIMENT_DIR = "/experiment"
RESULTS_DIR = "/results"
BASE_IMAGE = "python:3.11.7-slim-bookworm"  # pinned to the patch release the project is developed on
CONTEXT_FILES = ("pyproject.toml", "README.md")


SOURCE_ENV = "TOKENPATH_SOURCE"


def source_root() -> Path | None:
    """The tokenpath source tree the images are built from: $TOKENPATH_SOURCE, else the project an install from a
    directory points at (PEP 610's direct_url.json), else None: the installed package itself (a wheel install)."""
    if os.environ.get(SOURCE_ENV):
        root = Path(os.environ[SOURCE_ENV])
        if not _is_source_tree(root):
            raise UsageError(f"{SOURCE_ENV}={root} is not a tokenpath source tree")
        return root
    try:
        raw = importlib.metadata.distribution("tokenpath").read_text("direct_url.json") or "{}"
        url = json.loads(raw).get("url", "")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        url = ""
    if url.startswith("file://"):
        root = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
        if _is_source_tree(root):
            return root
    return None


def _is_source_tree(root: Path) -> bool:
    return (root / "pyproject.toml").is_file() and (root / "src" / "tokenpath").is_dir()


def emit(exp: Experiment, out_dir: Path, source_root: Path | None) -> tuple[Path, list[str]]:
    """The compose file, and what of the experiment it cannot run (each with the reason).

    Services: each proxy and variant from its pinned image, configured by the catalogue's own code with the `matrix`
    service's stub as its upstream; and `matrix`, which runs the same certified `tokenpath matrix` as here (stub,
    controls, certification, audited interleaved rounds, exclusions, results.json and report.html in ./results)
    with every proxy as a path already running at its service name. `source_root` None: the image is built from
    the installed package (a non-editable install)."""
    if exp.endpoint is not None:
        raise UsageError(
            "`emit_compose` with [upstream]: the containers would need the endpoint's name, CA and key; "
            "run `tokenpath matrix` here"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    _copy_context(source_root, out_dir / "context")
    runnable = [c for c in exp.conditions if not c.tls and c.link == "loopback"]
    skipped = [f"{c.label}: {_why_not(c)}" for c in exp.conditions if c not in runnable]
    if not runnable:
        raise UsageError("`emit_compose`: every condition needs TLS or a veth link, which the export cannot run")
    services: dict[str, Any] = {}
    attached: list[tuple[str, str, str]] = []  # (service, url, version)
    for path in exp.paths:
        if path.proxy == "direct":
            continue
        proxy = exp.proxy(path.proxy)
        if not proxy.image:  # tokenpath's own relays and custom commands have no image
            skipped.append(f"{path.label}: no container image (run `tokenpath matrix` here)")
            continue
        name = service_name(path.proxy, path.variant)
        services[name] = _proxy_service(proxy, path.variant, out_dir / "configs" / name)
        services[name]["depends_on"] = [RUNNER]  # started after it, so that its name resolves for them
        attached.append((name, f"http://{name}:{PROXY_PORT}", f"{proxy.image} (image)"))
    services[RUNNER] = {
        "build": {"context": "./context", "dockerfile": "../Dockerfile"},
        "command": ["tokenpath", "matrix", f"{EXPERIMENT_DIR}/experiment.toml", "--out", RESULTS_DIR],
        "volumes": [f"./experiment:{EXPERIMENT_DIR}:ro", f"./results:{RESULTS_DIR}"],
    }
    (out_dir / "experiment").mkdir(exist_ok=True)
    (out_dir / "experiment" / "experiment.toml").write_text(experiment_toml(exp, runnable, attached))
    (out_dir / "results").mkdir(exist_ok=True)
    (out_dir / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nWORKDIR /src\nCOPY pyproject.toml README.md ./\nCOPY src ./src\n"
        "RUN pip install --no-cache-dir .\n"
    )
    compose_file = out_dir / "docker-compose.yml"
    header = [
        f"# Written by tokenpath matrix --emit-compose for experiment {exp.name!r}. Run it with",
        f"#   docker compose up --build --abort-on-container-exit --exit-code-from {RUNNER}",
        "# results.json, table.md and report.html land in ./results. The matrix certifies itself in its container",
        "# first; `direct` is loopback inside that container, each proxy is reached over the Compose network.",
    ]
    header += [f"# Not exported: {line}" for line in skipped]
    compose_file.write_text("\n".join(header) + "\n" + yaml.safe_dump({"services": services}, sort_keys=False))
    return compose_file, skipped


def service_name(proxy: str, variant: str) -> str:
    """A Compose service name (letters, digits, `-`) for a path: `traefik@3.3.2` (compress) -> traefik-3-3-2-compress.
    Its image is pinned to the release itself (the entry's `image`: traefik:v3.3.2)."""
    return f"{proxy}-{variant}".replace("@", "-").replace("_", "-").replace(".", "-")


def run_hint(path: Path) -> str:
    """What to run once the export is written."""
    return (
        f"wrote {path}; run it with: docker compose -f {path} up --build --abort-on-container-exit "
        f"--exit-code-from {RUNNER} (results in {path.parent / 'results'})"
    )


def experiment_toml(exp: Experiment, conditions: list[Condition], attached: list[tuple[str, str, str]]) -> str:
    """The experiment the `matrix` service runs: the same pacing, runs and rule, the runnable conditions, and each
    proxy as a path already running at its service. (TOML by hand: tomllib reads only, and the shape is fixed.)"""
    lines = [
        f"# From {exp.name!r} by tokenpath matrix --emit-compose: the proxies run as Compose services.",
        f"name = {_toml(exp.name)}",
        f"frames = {exp.frames}",
        f"runs = {exp.runs}",
        f"ttft_ms = {exp.ttft_ms!r}",
        "",
        "[stub]",
        f'listen = "0.0.0.0:{STUB_PORT}"  # the proxy services reach it as {RUNNER}:{STUB_PORT}',
    ]
    if exp.exclusion.tolerance_ms is not None:
        lines += ["", "[exclusion]", f"tolerance_ms = {exp.exclusion.tolerance_ms!r}"]
    if any(falls_back(c) for c in conditions):  # the fallback policy, only where a condition uses it
        lines += ["", "[websocket]", *_websocket_lines(exp.ws_fallback)]
    for name, url, version in attached:
        lines += ["", "[[proxy]]", f"name = {_toml(name)}", f"url = {_toml(url)}", f"version = {_toml(version)}"]
    lines += ["", "[conditions]", *_condition_lines(conditions)]
    return "\n".join(lines) + "\n"


def _websocket_lines(policy: WsFallback) -> list[str]:
    """The policy as the file would say it: a key only where the policy uses it ([websocket] refuses the rest)."""
    lines = [f"fallback = {policy.attempts}"]
    if policy.attempts > 1:
        lines.append(f"retry_delay_ms = {policy.retry_delay_ms!r}")
    if policy.enabled:
        lines.append(f"upgrade_timeout_s = {policy.upgrade_timeout_s!r}")
    return lines


def _condition_lines(conditions: list[Condition]) -> list[str]:
    """Each axis's values as they occur (the grid puts them back in the same order): every axis that is always
    declared, and any other some condition moves off its default; an axis that needs another, only from the
    conditions where it applies. 0 is another format's own frame size, what an undeclared frame_bytes gives it: the
    same file leaves it out."""
    lines = []
    for axis in grid_axes():
        values = list(dict.fromkeys(getattr(c, axis.field) for c in conditions if axis.applies(c)))
        if not values or (not axis.always and values == [axis.default]):
            continue
        if axis is FRAME_BYTES and 0 in values:
            continue
        lines.append(f"{axis.key} = [{', '.join(axis.to_toml(v) for v in values)}]")
    return lines


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def _why_not(cond: Any) -> str:
    if cond.tls:
        return "TLS conditions need the certificates the local runner makes per run (run `tokenpath matrix` here)"
    return f"link {cond.link!r} needs network namespaces the containers do not get (run `tokenpath matrix` as root)"


def _copy_context(source_root: Path | None, context: Path) -> None:
    """The package's build inputs only (a source tree's .venv, caches and results stay out of the image); without
    a source tree, the installed package and a pyproject.toml written from its own metadata."""
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    if source_root is not None:
        for name in CONTEXT_FILES:
            shutil.copy2(source_root / name, context / name)
        shutil.copytree(source_root / "src", context / "src", ignore=ignore)
        return
    package = Path(tokenpath.__file__).parent
    shutil.copytree(package, context / "src" / "tokenpath", ignore=ignore)
    (context / "README.md").write_text("tokenpath, built from an installed package by --emit-compose\n")
    (context / "pyproject.toml").write_text(installed_pyproject(context / "src" / "tokenpath"))


def installed_pyproject(package: Path) -> str:
    """A pyproject.toml for the installed distribution: its version, its run-time requirements (not the extras),
    its entry point, and every data file the package carries (the Node peers, the TensorZero launcher)."""
    dist = importlib.metadata.distribution("tokenpath")
    requires = [r for r in dist.requires or [] if "extra ==" not in r]
    data: dict[str, list[str]] = {}
    for path in package.rglob("*"):
        if path.is_file() and path.suffix not in (".py", ".pyc"):
            folder = path.parent.relative_to(package.parent)
            data.setdefault(".".join(folder.parts), []).append(path.name)
    package_data = "\n".join(f"{_toml(k)} = {json.dumps(sorted(v))}" for k, v in sorted(data.items()))
    return (
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "tokenpath"\nversion = {_toml(dist.version)}\nreadme = "README.md"\n'
        f'requires-python = ">=3.11"\ndependencies = {json.dumps(requires)}\n\n'
        '[project.scripts]\ntokenpath = "tokenpath.cli:main"\n\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n\n'
        f"[tool.setuptools.package-data]\n{package_data}\n"
    )


def _proxy_service(proxy: Proxy, variant: str, config_dir: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="tokenpath-compose-"))
    try:
        site = Site(Endpoint("0.0.0.0", PROXY_PORT), Endpoint(RUNNER, STUB_PORT), workdir, proxy.variant(variant))
        config = proxy.write_config(site)
        config_dir.mkdir(parents=True, exist_ok=True)
        text = config.read_text().replace(str(workdir), WORK_DIR)
        (config_dir / config.name).write_text(text)
        service: dict[str, Any] = {"image": proxy.image}
        mounted = f"./{config_dir.relative_to(config_dir.parents[1])}"
        if proxy.container_config:
            service["volumes"] = [f"{mounted}/{config.name}:{proxy.container_config}:ro"]
            return service
        argv = proxy.image_argv(site, config)  # the image's executable: nothing needs to be installed here
        argv = [a.replace(str(config), f"{CONFIG_DIR}/{config.name}").replace(str(workdir), WORK_DIR) for a in argv]
        service["volumes"] = [f"{mounted}:{CONFIG_DIR}:ro"]
        service["command"] = ["sh", "-c", f"mkdir -p {WORK_DIR}/tmp && exec {shlex.join(argv)}"]
        return service
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
