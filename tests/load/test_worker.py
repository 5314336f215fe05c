from __future__ import annotations

import asyncio
import time

from tokenpath.load.worker import loop_lag
from tokenpath.serve.loops import new_event_loop


def test_loop_lag_counts_the_measured_window_only() -> None:
    """A loop blocked for 1 s during warm-up (every user connecting at once) is not a saturated client."""

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        lags: list[float] = []
        loop.call_later(0.1, time.sleep, 1.0)  # warm-up stall
        await loop_lag(start + 1.5, start + 2.0, lags)
        return lags

    loop = new_event_loop("uvloop")
    try:
        lags = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert lags, "the measured window was sampled"
    assert max(lags) < 500  # the 1,000 ms warm-up stall is not in it
