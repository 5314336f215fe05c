"""Scheduling for the instrument's own processes: the stub (the reference clock) and the control relays (what
certification compares every proxy against). Proxies under test are never given it: they are measured as they run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Literal

from tokenpath.errors import UsageError

Priority = Literal["auto", "realtime", "normal"]
REALTIME_PRIORITY = 10  # SCHED_FIFO level: above every normal task, far below the kernel's own RT threads
PR_SET_TIMERSLACK = 29  # from <linux/prctl.h>


def raise_priority(wanted: Priority) -> str:
    """The emitter's schedule is the experiment's reference clock. Under CPU contention (a proxy and a client on
    the same cores) a normal-priority stub is preempted for several ms at a time, and at hundreds of streams
    one such stall fails dozens of streams' audits. Measured here, two stubs side by side at 500 streams, 15
    alternating rounds: 166 of 7,500 streams failed at SCHED_FIFO against 464 at normal priority (bench/RESULTS.md).
    The kernel's RT throttling keeps a runaway stub to 95 % of a core, and an overloaded stub fails its own
    audit. `auto` uses it when the OS permits."""
    if wanted == "normal":
        return "normal"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (OSError, AttributeError) as exc:
        if wanted == "realtime":
            raise UsageError(
                f"`priority` realtime: the OS refused SCHED_FIFO ({exc}); run as root or use auto"
            ) from None
        return "normal"
    return f"realtime (SCHED_FIFO {REALTIME_PRIORITY})"


def tighten_timer_slack() -> None:
    """Linux lets a sleep overshoot by up to 50 us (timer slack) to batch wake-ups; the pacer's short precise
    waits then land ~90 us late at the median (measured here), ~40 us with 1 us of slack. Best effort."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)
