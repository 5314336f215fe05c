"""The Docker route without Docker: what `--emit-compose` writes is run as Compose would run it, one network
namespace per service on one bridge, each service's name resolving to its namespace (`ip netns exec` mounts
/etc/netns/NS/hosts over /etc/hosts, as Compose's DNS would answer). The proxy services run their generated
commands and configs (paths the containers would mount moved to folders here), and the `matrix` service runs its
generated experiment: certified, audited, every proxy measured as a path already running at its service name."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenpath.experiment.compose import CONFIG_DIR, EXPERIMENT_DIR, RESULTS_DIR, RUNNER, WORK_DIR, emit
from tokenpath.experiment.spec import parse
from tokenpath.links import netns
from tokenpath.proxies import lookup

ROOT = Path(__file__).parents[2]

pytestmark = [
    pytest.mark.skipif(netns.available() is not None, reason=str(netns.available())),
    pytest.mark.skipif(any(lookup(n).binary() is None for n in ("nginx", "haproxy")), reason="nginx, haproxy"),
]


@contextlib.contextmanager
def hosts_files(star: netns.Star, names: list[str]) -> Iterator[None]:
    """Every namespace resolves every service name, as a Compose network does."""
    lines = ["127.0.0.1 localhost", *(f"{star.addr(i)} {name}" for i, name in enumerate(names))]
    folders = [Path("/etc/netns") / ns for ns in star.names]
    try:
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text("\n".join(lines) + "\n")
        yield
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def service_command(service: dict[str, Any], name: str, compose_dir: Path, work: Path) -> str:
    """The service's own `sh -c` command, with what its container would mount moved to folders here."""
    assert service["command"][:2] == ["sh", "-c"], service
    configs = work / name / "configs"
    shutil.copytree(compose_dir / "configs" / name, configs)
    scratch = work / name / "scratch"
    for config in configs.iterdir():
        config.write_text(config.read_text().replace(WORK_DIR, str(scratch)))
    return str(service["command"][2]).replace(CONFIG_DIR, str(configs)).replace(WORK_DIR, str(scratch))


def _moved(arg: str, mounts: dict[str, Path]) -> str:
    for inside, here in mounts.items():
        if arg == inside or arg.startswith(inside + "/"):
            return str(here) + arg[len(inside) :]
    return arg


def test_the_emitted_services_run_the_certified_matrix(tmp_path: Path) -> None:
    exp = parse({
        "name": "compose", "frames": 10, "runs": 2, "conditions": {"interval_ms": [50], "tls": [False, True]},
        "proxy": [{"name": "nginx", "variants": ["stock", "proxy_buffering_off"]}, {"name": "haproxy"}],
    })  # fmt: skip
    compose_dir = tmp_path / "compose"
    compose_file, skipped = emit(exp, compose_dir, ROOT)
    assert any("TLS" in line for line in skipped)  # the TLS condition is named, not run
    services: dict[str, Any] = yaml.safe_load(compose_file.read_text())["services"]
    names = [RUNNER, *(n for n in services if n != RUNNER)]  # the matrix on the bridge's hub
    results = tmp_path / "results"
    results.mkdir()
    started: list[subprocess.Popen[bytes]] = []
    with netns.Star(len(names), tag=f"c{os.getpid() % 10000}") as star, hosts_files(star, names):
        try:
            for i, name in enumerate(names[1:], 1):
                command = service_command(services[name], name, compose_dir, tmp_path / "services")
                with (tmp_path / f"{name}.log").open("wb") as log:
                    started.append(subprocess.Popen(star.wrap(i, ["sh", "-c", command]), stdout=log,
                                                    stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
            mounts = {EXPERIMENT_DIR: compose_dir / "experiment", RESULTS_DIR: results}  # what the service mounts
            argv = [sys.executable, "-m", *(_moved(a, mounts) for a in services[RUNNER]["command"])]
            done = subprocess.run(star.wrap(0, argv), capture_output=True, text=True, timeout=240)
        finally:
            for proc in started:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    logs = "\n".join(f"{p.name}: {p.read_text(errors='replace')[-500:]}" for p in tmp_path.glob("*.log"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    doc = json.loads((results / "results.json").read_text())
    assert doc["certification"]["passed"], doc["certification"]
    assert (results / "report.html").read_text().startswith("<!doctype html>")
    rows = {r["proxy"]: r for r in doc["rows"]}
    assert set(rows) == {"direct", "nginx-stock", "nginx-proxy-buffering-off", "haproxy-stock"}
    for name, row in rows.items():
        assert row["excluded"] <= 1, (name, row["exclusions"])  # reached this run's stub: audited, kept
    assert rows["nginx-stock"]["arrivals_median"] == 1  # HTTP/1.0 upstream: held in its buffers, as in §1
    assert rows["nginx-proxy-buffering-off"]["fpr_median"] < 1.2
    assert rows["haproxy-stock"]["fpr_median"] >= 3  # the ~200 ms hold, across the bridge as on loopback
    assert doc["proxies"]["haproxy-stock"]["version"] == "haproxy:2.6.12-alpine (image)"
