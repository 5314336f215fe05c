"""What a handler decides about a request on its head (Admitted / Refusal), and the request body bytes a worker holds
(BodyBudget): the part of the handler interface that serve/http.py and serve/h2.py share.

The body budget counts bytes actually held, as they arrive: an HTTP/1.1 body what was read of it, an HTTP/2 body what
its stream's window let in. A head that announces a large body and never sends it costs nothing but its slot (the
header timer ends it), and a body is given back as soon as the handler no longer needs it (the gateway: once the
client has the response head, as no failover can resend it then), not when its stream ends. nginx reads bodies as
they arrive and has no worker-wide budget; this one exists because the gateway holds bodies in memory for failover,
and it refuses only the request whose own bytes would cross it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenpath.wire.apis import Api


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused on its head, before its body is read; `api` picks the error body's shape (None: OpenAI's)."""

    status: int
    message: str
    code: str
    headers: tuple[tuple[str, str], ...] = ()
    api: Api | None = None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request accepted on its head; `context` is handed to the handler as `response.context`. `release` is
    called once when the connection is done with the request: its response ended, or it never reached the handler
    (the client left, the header timer fired, its body broke a limit)."""

    context: Any = None
    release: Callable[[], None] | None = None


Admission = Refusal | Admitted


class BodyBudget:
    """Request body bytes held by one worker, across its connections and streams, up to `limit`. `refusal` is the
    answer to a request whose body would take the worker past it (its own bytes, counted as they arrive)."""

    __slots__ = ("held", "limit", "on_refused", "refusal")

    def __init__(self, limit: int, refusal: Refusal, on_refused: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.refusal = refusal
        self.on_refused = on_refused  # the handler's count of refusals (a metric)
        self.held = 0

    def room(self) -> int:
        return self.limit - self.held

    def charge(self) -> BodyCharge:
        return BodyCharge(self)


class BodyCharge:
    """The bytes one request's body holds against a BodyBudget: taken as they arrive, given back once, all at once."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, size: int) -> bool:
        """Hold `size` more bytes; False (nothing taken) when the worker's budget has no room for them."""
        budget = self.budget
        if budget.held + size > budget.limit:
            if budget.on_refused is not None:
                budget.on_refused()
            return False
        budget.held += size
        self.held += size
        return True

    def release(self) -> None:
        held, self.held = self.held, 0
        self.budget.held -= held
