"""The gateway's access line (gateway/accesslog.py: log_request, access_fields): its fields are the JSON `json.dumps`
writes of them, whatever the strings hold; a success in the gateway's own logging is batched without a LogRecord,
and a failure goes through logging as a warning."""

from __future__ import annotations

import io
import json
import logging
from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import FlushScheduler
from tokenpath.gateway.accesslog import access_fields, log_request
from tokenpath.jsonlog import batch_log_lines
from tokenpath.serve.http import Request

from .loopcounts import _production_logging

TEXT = st.text(st.characters(exclude_categories=()), max_size=40)  # quotes, backslashes, controls, surrogates, ...
MAYBE_TEXT = st.none() | TEXT


FIELDS = st.fixed_dictionaries(  # access_fields' arguments, by name
    {
        "request_id": TEXT,
        "method": TEXT,
        "path": TEXT,
        "status": st.integers(0, 999),
        "pool": MAYBE_TEXT,
        "member": MAYBE_TEXT,
        "attempts": st.integers(0, 20),
        "ms": st.floats(0, 1e9, allow_nan=False) | st.sampled_from([0.0, 1e-7, 12.0, 0.005, 1e16]),
        "failures": st.lists(TEXT, max_size=3),
        "error": MAYBE_TEXT,
    }
)


@given(FIELDS)
def test_the_fields_are_what_json_dumps_writes_of_them(fields: dict[str, Any]) -> None:
    order = ("request_id", "method", "path", "status", "pool", "member", "attempts", "ms")  # the line's
    record = {name: fields[name] for name in order}
    record["status"], record["ms"] = fields["status"] or None, round(fields["ms"], 2)  # as log_request had them
    failures, error = fields["failures"], fields["error"]
    if failures:
        record["attempt_failures"] = failures
    if error:
        record["error"] = error
    assert access_fields(**fields) == json.dumps(record)


def _log(error: str | None = None, failures: tuple[str, ...] = ()) -> None:
    request = Request("POST", "/v1/chat/completions", "/v1/chat/completions", "", "1.1", True)
    pool = cast(Any, SimpleNamespace(name="p"))
    members = cast(Any, [SimpleNamespace(url="http://127.0.0.1:9")])
    machine = cast(Any, SimpleNamespace(failures=list(failures), attempts=1 + len(failures)))
    log_request("r-1", request, 200 if error is None else 502, pool, members, machine, error, 12.345)


def test_a_success_waits_in_the_batch_with_no_record_and_a_failure_is_logging_s_warning(
    log_records: list[logging.LogRecord],
) -> None:
    lines = io.StringIO()
    with _production_logging(lines):  # as `tokenpath gateway` sets it up: the batched handler alone
        scheduler = FlushScheduler()
        batch_log_lines(scheduler)
        try:
            _log()
            assert log_records == []  # taken by the handler directly
            assert lines.getvalue() == ""  # waiting for its batch's flush
            assert len(scheduler.asked) == 1
            _log(error="member http://127.0.0.1:9 refused", failures=("connect refused",))
            assert len(log_records) == 1  # a warning goes through logging, and out at once after what waits
            assert log_records[0].levelno == logging.WARNING
        finally:
            batch_log_lines(None)
    success, failure = (json.loads(line) for line in lines.getvalue().splitlines())
    assert list(success)[:3] == ["ts", "level", "logger"]
    assert success["level"] == "info"
    assert success["logger"] == "tokenpath.gateway"
    assert {k: success[k] for k in ("request_id", "path", "status", "pool", "member", "attempts", "ms")} == {
        "request_id": "r-1",
        "path": "/v1/chat/completions",
        "status": 200,
        "pool": "p",
        "member": "http://127.0.0.1:9",
        "attempts": 1,
        "ms": 12.35,
    }
    assert failure["level"] == "warning"
    assert failure["attempt_failures"] == ["connect refused"]
    assert failure["error"] == "member http://127.0.0.1:9 refused"


def test_a_success_goes_through_logging_when_another_handler_would_see_it(log_records: list[logging.LogRecord]) -> None:
    lines = io.StringIO()
    with _production_logging(lines):
        batch_log_lines(FlushScheduler())
        seen = logging.Handler()
        seen.emit = lambda record: None  # type: ignore[method-assign]
        gateway = logging.getLogger("tokenpath.gateway")
        gateway.addHandler(seen)
        try:
            _log()
        finally:
            gateway.removeHandler(seen)
            batch_log_lines(None)
    assert len(log_records) == 1  # through logging: the other handler saw it
    assert json.loads(lines.getvalue())["request_id"] == "r-1"


def test_a_success_goes_through_logging_at_once_when_the_lines_are_not_batched(
    log_records: list[logging.LogRecord],
) -> None:
    lines = io.StringIO()
    with _production_logging(lines):  # no schedule handed to the handler: info_object declines
        _log()
    assert len(log_records) == 1
    assert json.loads(lines.getvalue())["request_id"] == "r-1"


def test_a_success_after_failed_attempts_is_a_warning_with_them(log_records: list[logging.LogRecord]) -> None:
    lines = io.StringIO()
    with _production_logging(lines):
        batch_log_lines(FlushScheduler())
        try:
            _log(failures=("connect refused",))  # served by the second member, after the first refused
        finally:
            batch_log_lines(None)
    (record,) = log_records
    assert record.levelno == logging.WARNING
    line = json.loads(lines.getvalue())
    assert line["attempt_failures"] == ["connect refused"]
    assert line["status"] == 200
    assert "error" not in line
