"""What a stub the user started (`load --stub-url`) was started with, and which streams it served.

The load client checks every body against the frames the stub renders for the token count it expects, so a stub
started with `--tokens 60` against load's 128 would look like a path that loses 68 frames a stream. The stub
reports its pacing on `/_tokenpath/health`; load adopts it, or refuses a flag the user gave that says otherwise.
"""

from __future__ import annotations

import json
import re
from dataclasses import Field, replace
from typing import Any, ClassVar, Protocol, TypeVar

from tokenpath.audit import completion_id
from tokenpath.errors import BadRequest, ProtocolError, ServiceError, UsageError
from tokenpath.probe.transport import parse_target
from tokenpath.stub.config import Pacing
from tokenpath.stub.control import MAX_HEALTH_BYTES, exchange

HEALTH_PATH = "/_tokenpath/health"
HEALTH_TIMEOUT_S = 10.0
# A tokenpath stub's chunk id (audit.py's completion_id): a stream carrying one was served by some stub.
STUB_CHUNK_ID = re.compile(rf"cmpl-[0-9a-f]{{{len(completion_id('')) - len('cmpl-')}}}")


def fetch_pacing(stub_url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> dict[str, Any] | None:
    """The stub's default pacing from its health answer; None from a stub too old to report it."""
    pacing = fetch_health(stub_url, timeout_s).get("pacing")
    return pacing if isinstance(pacing, dict) else None


def check_serves(stub_url: str, api: str, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
    """Refuse, before any stream, a format the stub at `stub_url` does not serve (its health lists them; a stub
    too old to list them serves OpenAI chat only)."""
    apis = fetch_health(stub_url, timeout_s).get("apis", ["openai"])
    if isinstance(apis, list) and api not in apis:
        raise UsageError(
            f"`api` {api}: the stub at {stub_url} serves {', '.join(map(str, apis))}; start it with --api {api} "
            "or --api all"
        )


def fetch_health(stub_url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> dict[str, Any]:
    """The stub's health answer; ServiceError when it does not answer, UsageError when it is not a stub's."""
    where = f"{parse_target(stub_url).origin}{HEALTH_PATH}"
    try:
        status, body = exchange(stub_url, "GET", HEALTH_PATH, timeout_s=timeout_s, max_bytes=MAX_HEALTH_BYTES)
    except (OSError, ProtocolError) as exc:
        raise ServiceError(f"`stub_url` {stub_url}: no answer on {HEALTH_PATH} ({exc}); is the stub running?") from None
    try:
        doc = json.loads(body) if status == 200 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("status") != "ok":
        raise UsageError(f"`stub_url` {stub_url} is not a tokenpath stub: {where} did not answer its health")
    return doc


class PacedConfig(Protocol):
    """What with_stub_pacing needs of a config (load's LoadConfig, which this module must not import: load/runner.py
    imports it): a dataclass with the stub's pacing and the names of the pacing options the user set."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def pacing(self) -> Pacing: ...

    @property
    def pacing_given(self) -> tuple[str, ...]: ...


Config = TypeVar("Config", bound=PacedConfig)


def with_stub_pacing(cfg: Config, stub_url: str, pacing: dict[str, Any] | None) -> Config:
    """`cfg` with the stub's pacing (its health's, read by Pacing: an option it does not list is off, as in an older
    stub, which has none of them); a flag the user gave that disagrees is refused."""
    if pacing is None:
        return cfg
    if pacing.get("format", "openai") != "openai" or pacing.get("frame_bytes") is not None:
        raise UsageError(
            f"the stub at {stub_url} sends {pacing.get('format')} frames"
            f"{' padded to ' + str(pacing['frame_bytes']) + ' bytes' if pacing.get('frame_bytes') else ''}: load "
            "checks OpenAI chunks byte for byte; start it without --frame-bytes and with --format openai"
        )
    try:
        theirs = Pacing.from_json({k: v for k, v in pacing.items() if k in Pacing.OVERRIDABLE})
    except BadRequest as exc:
        raise UsageError(f"`stub_url` {stub_url}: its health reports a pacing load cannot read: {exc}") from None
    changes: dict[str, Any] = {}
    for key in Pacing.OVERRIDABLE:
        ours = getattr(cfg.pacing, key)
        if getattr(theirs, key) == ours:
            continue
        if key in cfg.pacing_given:
            raise _disagrees(key, ours, getattr(theirs, key), stub_url)
        changes[key] = getattr(theirs, key)
    return replace(cfg, pacing=replace(cfg.pacing, **changes)) if changes else cfg


def _disagrees(key: str, ours: object, theirs: object, stub_url: str) -> UsageError:
    def show(value: object) -> str:
        if value is None:
            return "off"
        return f"{value:g}" if isinstance(value, int | float) else str(value)

    return UsageError(
        f"`{key}` {show(ours)} but the stub at {stub_url} was started with `{key}` {show(theirs)}: drop `{key}` "
        "(load reads the stub's own) or start the stub with the same value"
    )


def served_by_a_stub(chunk_id: str) -> bool:
    """Whether a stream's first content chunk carries a tokenpath stub's completion id."""
    return STUB_CHUNK_ID.fullmatch(chunk_id) is not None
