"""The clock every timestamp in tokenpath comes from.

CLOCK_MONOTONIC is shared by all processes on one host, so the stub's write times and the client's read times
are directly comparable. Core code takes a `clock` argument instead of calling `time` itself, so tests can
drive it.
"""

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""Returns nanoseconds on the host-wide monotonic clock."""

monotonic_ns: Clock = time.monotonic_ns

NS_PER_MS = 1_000_000


def ns_to_ms(ns: float) -> float:
    return ns / NS_PER_MS
