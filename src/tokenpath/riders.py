"""A value riding on an exception: what a reader knew when it raised (how the stream ended, the trace so far),
carried to whoever catches the error, with no exception class of its own and no wrapper around the error.

    STREAM_END = Rider("stream_end", StreamEnd)   # declared once, beside the type it carries (wire/ending.py)
    raise STREAM_END.attach(exc, end)             # `exc` carrying `end` (nothing when it is None), returned
    STREAM_END.of(exc)                            # what it carries, or None
    raise handed_on(exc, NetworkError(...))       # another error in its place, carrying all that `exc` carried

One rider per kind of value (each a typed attribute on the exception); an error may carry several.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


class Rider(Generic[T]):
    """One kind of value an exception may carry."""

    every: ClassVar[list[Rider[Any]]] = []  # what handed_on carries over
    __slots__ = ("_attribute", "_kind")

    def __init__(self, name: str, kind: type[T]) -> None:
        self._attribute = f"tokenpath_{name}"
        self._kind = kind
        Rider.every.append(self)

    def attach(self, exc: E, value: T | None) -> E:
        """`exc` carrying `value` (replacing what it carried); None attaches nothing. Returned, so
        `raise RIDER.attach(exc, value)` reads as one step."""
        if value is not None:
            setattr(exc, self._attribute, value)
        return exc

    def of(self, exc: BaseException) -> T | None:
        """The value `exc` carries, or None."""
        value = getattr(exc, self._attribute, None)
        return value if isinstance(value, self._kind) else None


def handed_on(source: BaseException, exc: E) -> E:
    """`exc` carrying every value `source` carried: an error raised in another's place loses nothing."""
    for rider in Rider.every:
        rider.attach(exc, rider.of(source))
    return exc
