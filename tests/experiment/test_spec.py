from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment.spec import load, parse

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_examples_load() -> None:
    for path in EXAMPLES.glob("*.toml"):
        exp = load(path)
        assert exp.paths[0].proxy == "direct"
        assert exp.conditions


def test_conditions_are_the_cross_product() -> None:
    conditions = {"interval_ms": [14, 50], "frame_bytes": [60, 1100], "link": ["loopback", "veth"], "tls": [False]}
    exp = parse({"conditions": conditions, "proxy": [{"name": "haproxy", "variants": ["stock", "http_no_delay"]}]})
    assert len(exp.conditions) == 8
    assert [p.label for p in exp.paths] == ["direct", "haproxy", "haproxy (http_no_delay)"]
    assert exp.runs == 10
    assert "max(2 ms, 20 % of the interval)" in exp.exclusion.describe()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"speed": 1}, "unknown keys"),
        ({"proxy": [{"name": "nginx", "variants": ["turbo"]}]}, "no variant 'turbo'"),
        ({"proxy": [{"name": "nosuchproxy"}]}, "no proxy 'nosuchproxy'"),
        ({"proxy": [{"name": "x", "command": "socat -"}]}, "{listen}"),
        ({"conditions": {"link": ["wifi"]}}, "link"),
        ({"conditions": {"frame_bytes": [2]}}, "frame_bytes"),
        ({"conditions": {"interval_ms": []}}, "must not be empty"),
        ({"runs": 0}, "runs"),
        ({"exclusion": {"tolerance_ms": -1}}, "tolerance_ms"),
    ],
)
def test_bad_experiments_say_what_is_wrong(data: dict[str, object], message: str) -> None:
    with pytest.raises(Exception, match=message) as info:
        parse(data)
    assert isinstance(info.value, UsageError | Exception)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("runs = [")
    with pytest.raises(UsageError, match=r"bad\.toml: not valid TOML"):
        load(bad)
    with pytest.raises(UsageError, match="cannot read"):
        load(tmp_path / "missing.toml")


def test_custom_proxy_command_placeholders() -> None:
    exp = parse(
        {"proxy": [{"name": "socat", "command": "socat TCP-LISTEN:{listen_port},bind={listen_host} TCP:{upstream}"}]}
    )
    assert exp.paths[1].proxy == "socat"
    from tokenpath.proxies.base import Endpoint, Site

    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), Path("/tmp"))
    assert exp.proxy("socat").argv(site, Path()) == ["socat", "TCP-LISTEN:9001,bind=127.0.0.1", "TCP:127.0.0.1:8000"]
