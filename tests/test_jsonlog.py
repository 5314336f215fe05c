"""jsonlog.py: a message that is one JSON object already (JSONObject, the gateway's access log line) goes into the
line as it is, never parsed back, and the line is the same JSON the parsing path makes; anything else as before.
BatchedHandler (the gateway's): lines below WARNING wait for the scheduled flush, one write per batch, in order."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import FlushScheduler
from tokenpath import jsonlog
from tokenpath.jsonlog import JSONFormatter, JSONObject, batch_log_lines, configure_logging


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


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[str] = []  # each write's text

    @property
    def writes(self) -> int:
        return len(self.pieces)

    def write(self, s: str) -> int:
        self.pieces.append(s)
        return super().write(s)


@pytest.fixture
def batched(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[logging.Logger, CountingStream]]:
    """configure_logging(batched=True) on a logger of its own, its stderr a counting stream. A batch never ages
    here (a test about age sets it): a stalled test process must not write a batch a test expects to wait."""
    monkeypatch.setattr(jsonlog, "BATCH_MAX_AGE_S", float("inf"))
    stream = CountingStream()
    flags = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")  # configure_logging sets them
    saved_flags = {name: getattr(logging, name) for name in flags}
    saved = sys.stderr
    sys.stderr = stream
    try:
        configure_logging("info", "tokenpath.test_batched", batched=True)
    finally:
        sys.stderr = saved
    logger = logging.getLogger("tokenpath.test_batched")
    try:
        yield logger, stream
    finally:
        for handler in logger.handlers:
            handler.close()
        logger.handlers.clear()
        for name, value in saved_flags.items():
            setattr(logging, name, value)


def batching() -> FlushScheduler:
    """The test logger's lines batched on a Scheduler of their own (as the gateway's start does on its wheel)."""
    scheduler = FlushScheduler()
    batch_log_lines(scheduler, "tokenpath.test_batched")
    return scheduler


def access_line(request_id: str) -> JSONObject:
    """An access line's fields (the gateway's JSONObject message), its request id `request_id`."""
    return JSONObject(json.dumps({**FIELDS, "request_id": request_id}))


def access(logger: logging.Logger, n: int) -> None:
    logger.info(access_line(f"r-{n}"))


def ids(stream: CountingStream) -> list[object]:
    return [
        json.loads(line).get("request_id", json.loads(line).get("event")) for line in stream.getvalue().splitlines()
    ]


def test_without_a_schedule_every_line_is_written_at_once(batched: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batched
    access(logger, 1)
    access(logger, 2)
    assert ids(stream) == ["r-1", "r-2"]
    assert stream.writes == 2


def test_lines_wait_for_the_scheduled_flush_and_go_out_in_one_write(
    batched: tuple[logging.Logger, CountingStream],
) -> None:
    logger, stream = batched
    scheduler = batching()
    for n in range(5):
        access(logger, n)
    assert stream.getvalue() == ""  # waiting
    assert len(scheduler.asked) == 1  # one flush asked for per batch, not one per line
    scheduler.run()
    assert ids(stream) == [f"r-{n}" for n in range(5)]
    assert stream.writes == 1
    access(logger, 5)  # the next batch asks again
    assert len(scheduler.asked) == 1
    scheduler.run()
    assert ids(stream)[-1] == "r-5"
    assert stream.writes == 2


def test_a_batched_line_is_the_plain_handlers_line(batched: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batched
    batching()
    record = logging.LogRecord(
        "tokenpath.gateway", logging.INFO, __file__, 1, JSONObject(json.dumps(FIELDS)), None, None
    )
    plain = logging.StreamHandler(io.StringIO())
    plain.setFormatter(JSONFormatter())
    plain.emit(record)
    handler = logger.handlers[0]
    handler.handle(record)
    handler.flush()
    assert stream.getvalue() == plain.stream.getvalue()


def test_a_warning_goes_out_at_once_after_the_lines_that_wait(batched: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batched
    batching()
    access(logger, 1)
    access(logger, 2)
    logger.warning(json.dumps({"event": "member_ejected"}))
    assert ids(stream) == ["r-1", "r-2", "member_ejected"]  # the order they were logged in
    assert stream.writes == 1


def test_a_full_batch_is_written_without_waiting(
    batched: tuple[logging.Logger, CountingStream], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = batched
    batching()
    monkeypatch.setattr(jsonlog, "BATCH_BYTES", 300)  # two lines of ~150 bytes
    access(logger, 1)
    assert stream.writes == 0
    access(logger, 2)
    assert stream.writes == 1
    assert ids(stream) == ["r-1", "r-2"]


def test_taking_the_schedule_back_writes_what_waits_and_lines_go_at_once_again(
    batched: tuple[logging.Logger, CountingStream],
) -> None:
    logger, stream = batched
    scheduler = batching()
    access(logger, 1)
    batch_log_lines(None, "tokenpath.test_batched")  # the gateway's close
    assert ids(stream) == ["r-1"]
    access(logger, 2)
    assert ids(stream) == ["r-1", "r-2"]
    scheduler.run()  # a flush asked for before: nothing left to write
    assert stream.writes == 2


def test_closing_or_replacing_the_handler_writes_what_waits(batched: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batched
    batching()
    access(logger, 1)
    logger.handlers[0].close()  # logging.shutdown at exit, or a handler removed
    assert ids(stream) == ["r-1"]
    access(logger, 2)  # closed: no schedule left, so at once
    assert ids(stream) == ["r-1", "r-2"]
    batching()
    access(logger, 3)  # waits: replacing the handler writes it first
    saved = sys.stderr
    sys.stderr = io.StringIO()
    try:
        configure_logging("info", "tokenpath.test_batched", batched=True)
    finally:
        sys.stderr = saved
    assert ids(stream) == ["r-1", "r-2", "r-3"]


def test_a_broken_stream_loses_the_batch_but_never_raises(
    batched: tuple[logging.Logger, CountingStream], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = batched
    batching()
    access(logger, 1)
    monkeypatch.setattr(logging, "raiseExceptions", False)  # logging's rule in production: report nothing, go on

    def broken(_: str) -> int:
        raise OSError("EPIPE")

    monkeypatch.setattr(stream, "write", broken)
    logger.handlers[0].flush()  # the wheel's call: it must not raise
    monkeypatch.undo()
    access(logger, 2)
    logger.handlers[0].flush()
    assert ids(stream) == ["r-2"]


def test_another_threads_line_goes_at_once_after_what_waits(batched: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batched
    scheduler = FlushScheduler()
    batch_log_lines(scheduler, "tokenpath.test_batched")  # this thread's (the loop's)
    access(logger, 1)
    worker = threading.Thread(target=access, args=(logger, 2))  # a JWKS fetch, a metrics thread
    worker.start()
    worker.join()
    assert ids(stream) == ["r-1", "r-2"]
    assert len(scheduler.asked) == 1  # the other thread never touched the schedule


def test_a_schedule_that_fails_turns_batching_off_and_loses_no_line(
    batched: tuple[logging.Logger, CountingStream],
) -> None:
    logger, stream = batched

    def loop_gone(_: Callable[[], None]) -> None:
        raise RuntimeError("no running event loop")  # a line logged after the loop stopped, before the close

    batch_log_lines(loop_gone, "tokenpath.test_batched")
    access(logger, 1)
    access(logger, 2)
    assert ids(stream) == ["r-1", "r-2"]
    handler = logger.handlers[0]
    assert isinstance(handler, jsonlog.BatchedHandler)
    assert handler.schedule is None


def test_a_batch_whose_flush_never_comes_goes_out_with_a_line_logged_after_its_age(
    batched: tuple[logging.Logger, CountingStream], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = batched
    batch_log_lines(FlushScheduler(), "tokenpath.test_batched")  # its flushes never run: a wheel that stopped ticking
    access(logger, 1)
    access(logger, 2)
    assert stream.writes == 0  # young: waiting for the flush asked for
    monkeypatch.setattr(jsonlog, "BATCH_MAX_AGE_S", 0.0)  # now the oldest is too old
    access(logger, 3)
    assert ids(stream) == ["r-1", "r-2", "r-3"]
    assert stream.writes == 1


def test_a_batch_is_written_in_whole_lines_of_at_most_a_pipes_atomic_write(
    batched: tuple[logging.Logger, CountingStream], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = batched
    scheduler = batching()
    monkeypatch.setattr(jsonlog, "WRITE_BYTES", 400)  # two of these ~150-byte lines
    for n in range(5):
        access(logger, n)
    logger.info(JSONObject(json.dumps({**FIELDS, "request_id": "long", "path": "/" + "x" * 500})))
    access(logger, 5)
    scheduler.run()
    assert ids(stream) == ["r-0", "r-1", "r-2", "r-3", "r-4", "long", "r-5"]
    assert [piece.count("\n") for piece in stream.pieces] == [2, 2, 1, 1, 1]  # the long line alone
    assert all(piece.endswith("\n") for piece in stream.pieces)
    assert all(len(piece) <= 400 for piece in stream.pieces if "long" not in piece)
    assert jsonlog.WRITE_BYTES <= 4096  # the real bound is PIPE_BUF's


def test_a_new_schedule_writes_what_waited_for_the_old_one(batched: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batched
    old = FlushScheduler()
    batch_log_lines(old, "tokenpath.test_batched")  # a gateway whose loop ended without its close
    access(logger, 1)
    new = FlushScheduler()
    batch_log_lines(new, "tokenpath.test_batched")  # the next one in this process
    assert ids(stream) == ["r-1"]
    access(logger, 2)
    assert len(new.asked) == 1  # the new batch asks the new schedule
    new.run()
    assert ids(stream) == ["r-1", "r-2"]


# --- an INFO line batched without logging's record (BatchedHandler.info_object, direct_handler) ------------------


def alone(logger: logging.Logger) -> jsonlog.BatchedHandler:
    """The logger's batched handler, made its only one: pytest attaches its capture handlers to every logger that
    does not propagate (the test logger, once configured), and a record they would see is never taken directly."""
    logger.handlers[:] = [h for h in logger.handlers if isinstance(h, jsonlog.BatchedHandler)]
    (handler,) = logger.handlers
    assert isinstance(handler, jsonlog.BatchedHandler)
    return handler


def test_an_info_object_taken_directly_is_the_line_logging_batches(
    batched: tuple[logging.Logger, CountingStream], log_records: list[logging.LogRecord]
) -> None:
    logger, stream = batched
    scheduler = batching()
    child = logging.getLogger("tokenpath.test_batched.access")  # propagates to the batched handler alone
    handler = alone(logger)
    assert jsonlog.direct_handler(child, logging.INFO) is handler
    assert handler.info_object(child.name, JSONObject(json.dumps(FIELDS)))
    assert log_records == []  # no record made
    assert stream.getvalue() == ""  # it waits with the batch, as a logged line does
    child.info(JSONObject(json.dumps(FIELDS)))
    assert len(log_records) == 1
    scheduler.run()
    direct, logged = (json.loads(line) for line in stream.getvalue().splitlines())
    assert abs(direct.pop("ts") - logged.pop("ts")) < 60
    assert direct == logged == {"level": "info", "logger": child.name, **FIELDS}
    assert stream.writes == 1  # one batch: the scheduled flush wrote both


def test_an_info_object_follows_the_batchs_bounds(
    batched: tuple[logging.Logger, CountingStream], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = batched
    scheduler = batching()
    handler = alone(logger)
    monkeypatch.setattr(jsonlog, "BATCH_BYTES", 300)  # two lines of ~150 bytes
    assert handler.info_object(logger.name, access_line("r-1"))
    assert len(scheduler.asked) == 1  # the batch's first line asked for its flush
    assert stream.writes == 0
    assert handler.info_object(logger.name, access_line("r-2"))
    assert ids(stream) == ["r-1", "r-2"]
    assert stream.writes == 1


def test_an_info_object_is_declined_when_the_threads_lines_are_not_batched(
    batched: tuple[logging.Logger, CountingStream],
) -> None:
    logger, stream = batched
    handler = alone(logger)
    line = JSONObject(json.dumps(FIELDS))
    assert not handler.info_object(logger.name, line)  # no schedule: logging writes it at once
    batching()
    taken: list[bool] = []
    other = threading.Thread(target=lambda: taken.append(handler.info_object(logger.name, line)))
    other.start()
    other.join()
    assert taken == [False]  # another thread's line is logging's (written at once, after what waits)
    handler.setFormatter(logging.Formatter())
    assert not handler.info_object(logger.name, line)  # not the JSON line this would write
    assert stream.getvalue() == ""


def _filter(record: logging.LogRecord) -> bool:
    return True


DETOURS: dict[str, Callable[[logging.Logger, logging.Logger], object]] = {
    "a filter on the logger": lambda child, parent: child.addFilter(_filter),
    "a Logger subclass": lambda child, parent: setattr(child, "__class__", type("Sub", (logging.Logger,), {})),
    "a filter on the handler": lambda child, parent: parent.handlers[0].addFilter(_filter),
    "a second handler": lambda child, parent: child.addHandler(logging.NullHandler()),
    "a second batched handler": lambda child, parent: child.addHandler(jsonlog.BatchedHandler(io.StringIO())),
    "the handler's level above": lambda child, parent: parent.handlers[0].setLevel(logging.WARNING),
    "the logger's level above": lambda child, parent: child.setLevel(logging.WARNING),
    "the logger disabled": lambda child, parent: setattr(child, "disabled", True),
    "logging disabled": lambda child, parent: logging.disable(logging.INFO),
    "propagated past the handler": lambda child, parent: setattr(parent, "propagate", True),
    "not a batched handler": lambda child, parent: parent.handlers.__setitem__(0, logging.StreamHandler(io.StringIO())),
}


def test_a_parents_filter_leaves_the_way_direct_as_logging_never_applies_it_to_a_childs_record(
    batched: tuple[logging.Logger, CountingStream], log_records: list[logging.LogRecord]
) -> None:
    parent, stream = batched
    child = logging.getLogger("tokenpath.test_batched.parent_filter")
    handler = alone(parent)
    parent.addFilter(lambda record: False)  # would drop every record logged on the parent itself
    try:
        assert jsonlog.direct_handler(child, logging.INFO) is handler
        child.info(JSONObject(json.dumps(FIELDS)))  # through logging: written, the parent's filter not asked
        assert len(log_records) == 1
        assert json.loads(stream.getvalue())["request_id"] == "r-1"
    finally:
        parent.filters.clear()


def test_an_info_object_has_logging_s_name_for_the_level_and_declines_an_empty_object(
    batched: tuple[logging.Logger, CountingStream],
) -> None:
    logger, stream = batched
    handler = alone(logger)
    scheduler = batching()
    logging.addLevelName(logging.INFO, "NOTICE")
    try:
        assert handler.info_object(logger.name, JSONObject(json.dumps(FIELDS)))
        logger.info(JSONObject(json.dumps(FIELDS)))
    finally:
        logging.addLevelName(logging.INFO, "INFO")
    assert not handler.info_object(logger.name, JSONObject("{}"))  # logging's way writes it (no fields to follow)
    scheduler.run()
    assert [json.loads(line)["level"] for line in stream.getvalue().splitlines()] == ["notice", "notice"]


@pytest.mark.parametrize("detour", list(DETOURS))
def test_no_direct_handler_when_logging_would_do_anything_else(
    batched: tuple[logging.Logger, CountingStream], detour: str
) -> None:
    parent, _ = batched
    child = logging.getLogger(f"tokenpath.test_batched.{detour.replace(' ', '_')}")
    handler = alone(parent)
    assert jsonlog.direct_handler(child, logging.INFO) is handler
    root_handlers = logging.getLogger().handlers[:]
    logging.getLogger().addHandler(logging.NullHandler())  # what a propagated record would reach past it
    try:
        DETOURS[detour](child, parent)
        assert jsonlog.direct_handler(child, logging.INFO) is None
    finally:
        logging.disable(logging.NOTSET)
        logging.getLogger().handlers[:] = root_handlers
        parent.propagate = False
        parent.filters.clear()
        parent.handlers[:] = [handler]
        handler.filters.clear()
        handler.setLevel(logging.NOTSET)
        logging.Logger.manager.loggerDict.pop(child.name, None)
