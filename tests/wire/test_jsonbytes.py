"""wire/jsonbytes.loads is json.loads: the same value or the same error class for any bytes, in every encoding RFC 8259
allows (json.loads detects UTF-16 and UTF-32 by zero bytes and BOMs: those must still reach it)."""

from __future__ import annotations

import codecs
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpath.wire import jsonbytes


def _outcome(parse: Any, data: bytes | bytearray) -> tuple[str, Any]:
    try:
        return "value", parse(data)
    except Exception as exc:  # the class is what callers catch (ValueError, RecursionError)
        return "error", type(exc).__mro__[:-1]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]


@given(json_values, st.sampled_from(ENCODINGS))
def test_any_json_in_any_allowed_encoding_parses_as_json_loads_does(value: Any, encoding: str) -> None:
    data = json.dumps(value, ensure_ascii=False).encode(encoding, "surrogatepass")
    assert _outcome(jsonbytes.loads, data) == _outcome(json.loads, data)


@given(st.binary(max_size=40))
def test_any_bytes_give_what_json_loads_gives(data: bytes) -> None:
    assert _outcome(jsonbytes.loads, data) == _outcome(json.loads, data)
    assert _outcome(jsonbytes.loads, bytearray(data)) == _outcome(json.loads, bytearray(data))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"1",
        b"{}",
        b'{"a":1} x',
        b'{"a":"\xff"}',  # not UTF-8
        b'"\xed\xa0\x80"',  # a lone surrogate, which json.loads's surrogatepass lets through
        '{"a":1}'.encode("utf-16-le"),  # '{', then a zero byte: UTF-16, detected
        '{"a":1}'.encode("utf-32-le"),
        codecs.BOM_UTF8 + b'{"a":1}',
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser goes
    ],
)
def test_edge_bytes_give_what_json_loads_gives(data: bytes) -> None:
    assert _outcome(jsonbytes.loads, data) == _outcome(json.loads, data)


def test_plain_utf8_skips_the_encoding_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the module: a UTF-8 frame is parsed without json.loads's detection (else it is only a wrapper)."""
    monkeypatch.setattr(json, "detect_encoding", lambda b: pytest.fail("detected"))
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads called"))
    assert jsonbytes.loads(b'{"choices":[{"delta":{"content":"x"}}]}') == {"choices": [{"delta": {"content": "x"}}]}
