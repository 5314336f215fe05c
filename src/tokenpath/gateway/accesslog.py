"""The gateway's access log: one JSON line per request, a warning when it or an attempt at a member failed. A
success's line is the hot one (every request, as `tokenpath gateway` runs at info): its fields are written by one
f-string, and on the gateway's loop it goes into the batched handler's batch without logging's record when nothing
else would see it (jsonlog.direct_handler)."""

from __future__ import annotations

import json
import logging
from json.encoder import encode_basestring_ascii as _quote  # json.dumps's own quoting of a str (its C function)

from tokenpath.gateway.exchange_state import ExchangeMachine
from tokenpath.gateway.pools import MemberState, Pool
from tokenpath.jsonlog import JSONObject, direct_handler
from tokenpath.serve.http import Request

log = logging.getLogger("tokenpath.gateway")


def log_request(
    request_id: str,
    request: Request,
    status: int,
    pool: Pool | None,
    members: list[MemberState],
    machine: ExchangeMachine | None,
    error: str | None,
    ms: float,
) -> None:
    """The access log's line for one request: a warning when it failed, or when an attempt at a member did."""
    failures = [str(f) for f in machine.failures] if machine else []
    warn = bool(error or failures)
    if not (warn or log.isEnabledFor(logging.INFO)):
        return  # a quiet success below the log's level: no line to build
    line = access_fields(
        request_id,
        request.method,
        request.path,
        status,
        pool.name if pool else None,
        members[-1].url if members else None,  # the one that served (or was tried last)
        machine.attempts if machine else 0,
        ms,
        failures,  # logged even when a later attempt succeeded
        error,
    )
    if warn:
        log.warning(line)
        return
    handler = direct_handler(log, logging.INFO)
    if handler is None or not handler.info_object(log.name, line):
        log.info(line)  # its one serialisation: the formatter puts it in the line as it is


def access_fields(
    request_id: str,
    method: str,
    path: str,
    status: int,
    pool: str | None,
    member: str | None,
    attempts: int,
    ms: float,
    failures: list[str],
    error: str | None,
) -> JSONObject:
    """The access line's fields, as `json.dumps` of them in this order writes them (`ms` finite, as the clock's is;
    tests/gateway/test_access_line.py holds the two equal), with one C call per string: no dict, and none of
    json.dumps's Python wrappers (~3 us of a request's ~8 us access line, warm)."""
    line = (
        f'{{"request_id": {_quote(request_id)}, "method": {_quote(method)}, "path": {_quote(path)}, '
        f'"status": {status or "null"}, "pool": {_quote_or_null(pool)}, "member": {_quote_or_null(member)}, '
        f'"attempts": {attempts}, "ms": {round(ms, 2)!r}'
    )
    if failures:
        line += f', "attempt_failures": {json.dumps(failures)}'
    if error:
        line += f', "error": {_quote(error)}'
    return JSONObject(line + "}")


def _quote_or_null(text: str | None) -> str:
    return "null" if text is None else _quote(text)
