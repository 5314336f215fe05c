"""jsonlog.py: a message that is one JSON object already (JSONObject, the gateway's access log line) goes into the
line as it is, never parsed back, and the line is the same JSON the parsing path makes; anything else as before."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from tokenpath.jsonlog import JSONFormatter, JSONObject


def record(msg: object, level: int = logging.INFO, exc_info: bool = False) -> logging.LogRecord:
    info = None
    if exc_info:
        try:
            raise RuntimeError("planted")
        except RuntimeError:
            info = sys.exc_info()
    return logging.LogRecord("tokenpath.gateway", level, __file__, 1, msg, None, info)


FIELDS = {"request_id": "r-1", "method": "POST", "path": "/v1/chat/completions", "status": 200, "ms": 1.25}


def test_a_json_object_message_is_put_in_the_line_without_parsing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed_path = JSONFormatter().format(record(json.dumps(FIELDS)))  # a plain str: parsed and merged
    spliced = record(JSONObject(json.dumps(FIELDS)))
    spliced.created = 1733420000.1234
    formatter = JSONFormatter()

    def no_parsing(*_: object, **__: object) -> object:
        raise AssertionError("the message was parsed back")

    monkeypatch.setattr(json, "loads", no_parsing)  # the module jsonlog parses with
    line = formatter.format(spliced)
    assert line == formatter.format(spliced)  # the logger's fields are cached per logger and level: the same line
    monkeypatch.undo()
    got, want = json.loads(line), json.loads(parsed_path)
    assert got == {**want, "ts": 1733420000.123}
    assert list(got)[:3] == ["ts", "level", "logger"]
    assert got["level"] == "info"
    assert json.loads(formatter.format(record(JSONObject(json.dumps(FIELDS)), logging.WARNING)))["level"] == "warning"


def test_other_messages_are_formatted_as_before() -> None:
    formatter = JSONFormatter()
    assert json.loads(formatter.format(record("not json {")))["message"] == "not json {"
    assert json.loads(formatter.format(record("{not json")))["message"] == "{not json"
    assert json.loads(formatter.format(record(JSONObject("{}"))))["logger"] == "tokenpath.gateway"
    with_traceback = json.loads(formatter.format(record(JSONObject(json.dumps(FIELDS)), exc_info=True)))
    assert with_traceback["status"] == 200
    assert "planted" in with_traceback["exception"]
