from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor import modules


def test_a_modules_file_gives_each_module_its_request_shape(tmp_path: Path) -> None:
    path = tmp_path / "modules.toml"
    path.write_text('[modules.gpt]\nmodel = "gpt-4o-mini"\napi_key_env = "KEY"\nheaders = { "X-Synthetic" = "1" }\n'
                    'max_tokens = 8\ntotal_timeout_s = 12\ndirect_url = "{scheme}://{host}:9000/v1"\n'
                    '[modules.plain]\n[modules.claude]\napi = "anthropic"\naccept_encoding = "gzip"\n')  # fmt: skip
    loaded = modules.load(path, env={"KEY": "sk-test"})
    assert list(loaded) == ["gpt", "plain", "claude"]
    routes = loaded["gpt"].routes("http://10.0.0.5:8000/v1")
    via, direct = routes["via"], routes["direct"]
    assert (via.url, direct.url) == ("http://10.0.0.5:8000/v1", "http://10.0.0.5:9000/v1")
    assert (via.model, via.max_tokens, via.api_key, via.total_timeout_s) == ("gpt-4o-mini", 8, "sk-test", 12)
    assert via.headers == (("X-Synthetic", "1"),)
    assert list(loaded["plain"].routes("http://10.0.0.5:8000/v1")) == ["via"]
    claude = loaded["claude"].routes("http://10.0.0.5:8000/v1")["via"]
    assert (claude.api, claude.accept_encoding) == ("anthropic", "gzip")  # the request shape follows the format


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[modules.a]\nmodle = 'x'\n", "[modules.a]: unknown key(s) ['modle']"),
        ("[modules.a]\nmax_tokens = 'many'\n", "`max_tokens` must be a whole number"),
        ("[modules.a]\napi = 'soap'\n", "module 'a': `api`: unknown API format 'soap'; expected one of: openai"),
        ("[modules.a]\naccept_encoding = 1\n", "`accept_encoding` must be a string"),
        ("[modules.a]\napi_key_env = 'NOT_SET_HERE'\n", "module 'a': `api_key_env` NOT_SET_HERE: that environment"),
        ("[modules.a]\nheaders = { 'Bad Name' = 'x' }\n", "module 'a'"),
        ("[modules.a]\ntotal_timeout_s = 0\n", "module 'a': `total_timeout_s` must be a number of seconds > 0"),
        ("[modules.a]\ntotal_timeout_s = 1e300\n", "`total_timeout_s` must be a number of seconds > 0 and <= 3600"),
        ("[modules.a]\nidle_timeout_s = nan\n", "`idle_timeout_s` must be a number of seconds > 0"),
        ('[modules."a\\n"]\n', "module name 'a\\n'"),
        ("[modules.a]\ndirect_url = 'http://{hostname}:1/v1'\n", "only {scheme} {host} {port} {target}"),
        ("[modules.a]\ndirect_url = 'ftp://{host}/v1'\n", "`direct_url`: URL 'ftp://"),
        ("[modules.'a b']\n", "module name 'a b'"),
        ("[module.a]\n", "unknown key(s) ['module']"),
        ("title = 'x'\n", "unknown key(s) ['title']"),
        ("", "no [modules.NAME] table"),
        ("[modules.a\n", "modules file"),
    ],
)
def test_a_bad_modules_file_is_one_usage_error_naming_the_file_and_module(tmp_path: Path, text: str,
                                                                           says: str) -> None:  # fmt: skip
    path = tmp_path / "modules.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        modules.load(path, env={})
    assert says in str(err.value)
    assert str(path) in str(err.value)


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="No such file"):
        modules.load(tmp_path / "none.toml")


def test_the_direct_url_template_takes_only_the_targets_parts() -> None:
    fill = modules.fill_direct_url
    assert fill("http://{host}:9000/v1", "https://[::1]:8443/v1") == "http://[::1]:9000/v1"
    assert fill("{scheme}://direct.internal:{port}/v1", "https://a.example/v1") == "https://direct.internal:443/v1"
    assert fill("http://d/?of={target}", "http://a:1/v1") == "http://d/?of=http://a:1/v1"


def test_a_direct_url_that_is_the_target_itself_is_refused() -> None:
    module = modules.build("m", modules.ModuleSpec(direct_url="{target}"), {})
    with pytest.raises(UsageError, match="is the target itself"):
        module.routes("http://127.0.0.1:8000/v1")


def test_without_a_file_there_is_one_module_openai() -> None:
    default = modules.default_modules({})
    assert list(default) == ["openai"]
    assert default["openai"].spec.api == "openai"
    assert default["openai"].request.total_timeout_s == 30


def test_the_shipped_example_loads() -> None:
    example = Path(__file__).parents[2] / "examples" / "monitoring" / "modules.toml"
    loaded = modules.load(example, env={"OPENAI_API_KEY": "sk-test"})
    assert list(loaded) == ["openai", "openai_added"]
    assert list(loaded["openai_added"].routes("http://10.0.0.5:8080/v1")) == ["via", "direct"]
