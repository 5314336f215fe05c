"""The client policy coding agents follow where a path does not carry WebSocket: try the upgrade; after N failed
upgrades (an answer other than 101, or none within the upgrade timeout) send the same request over SSE. What it
costs a user is the time from the first upgrade attempt to the first content event over SSE: probe/stream.py runs
the policy, WsFigures carries the cost apart from the SSE stream's own TTFT.

The defaults are OpenAI Codex's (codex-rs), as its users and issues describe it:
- openai/codex#19821: a Responses WebSocket connect failure is retried like a stream failure, through the whole
  `stream_max_retries` budget ("Reconnecting... 1/5" to "5/5"), before "falling back to HTTP"; `stream_max_retries`
  defaults to 5 (also vybestack/llxprt-code#3047, which read codex-rs: only an HTTP 426 falls back at once), so 6
  failed upgrades in all;
- codex-rs `backoff(attempt)`: 200 ms x 2^(attempt - 1) with +/-10 % jitter between attempts (no jitter here: the
  delays are a stated condition);
- `websocket_connect_timeout_ms` 15 s (vybestack/llxprt-code#3047, anomalyco/opencode#50031: "Codex default").
200 + 400 + 800 + 1,600 + 3,200 ms = 6.2 s of waiting before the SSE request: the "~8 s per session" of issue 38
(diegosouzapw/OmniRoute#998) once the round trips and the SSE TTFT are added.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokenpath.errors import UsageError

__all__ = [
    "BACKOFF_FACTOR",
    "CODEX_ATTEMPTS",
    "CODEX_RETRY_DELAY_MS",
    "CODEX_UPGRADE_TIMEOUT_S",
    "MAX_ATTEMPTS",
    "NO_FALLBACK",
    "WsFallback",
]

CODEX_ATTEMPTS = 6  # the first upgrade and Codex's stream_max_retries (5) retries
CODEX_RETRY_DELAY_MS = 200.0  # codex-rs INITIAL_DELAY_MS
BACKOFF_FACTOR = 2.0  # codex-rs BACKOFF_FACTOR: each wait doubles
CODEX_UPGRADE_TIMEOUT_S = 15.0  # codex-rs websocket_connect_timeout_ms
MAX_ATTEMPTS = 20  # past it the doubling wait alone is days: a typo, not a policy


@dataclass(frozen=True, slots=True)
class WsFallback:
    """`attempts` failed upgrades, then SSE; 0: never fall back (a refused upgrade is the probe's result)."""

    attempts: int = 0
    retry_delay_ms: float = CODEX_RETRY_DELAY_MS  # the wait after the first failure; it doubles after each next
    upgrade_timeout_s: float = CODEX_UPGRADE_TIMEOUT_S  # no 101 within it: a failed upgrade

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 0:
            raise UsageError(f"`ws_fallback` must be a whole number of upgrades >= 0, not {self.attempts!r}")
        if self.attempts > MAX_ATTEMPTS:
            raise UsageError(f"`ws_fallback` {self.attempts}: at most {MAX_ATTEMPTS} upgrades")
        if not (isinstance(self.retry_delay_ms, int | float) and 0 <= self.retry_delay_ms < math.inf):
            raise UsageError(f"`ws_retry_delay_ms` must be a number of ms >= 0, not {self.retry_delay_ms!r}")
        if not (isinstance(self.upgrade_timeout_s, int | float) and 0 < self.upgrade_timeout_s < math.inf):
            raise UsageError(f"`ws_upgrade_timeout` must be a number of seconds > 0, not {self.upgrade_timeout_s!r}")

    @property
    def enabled(self) -> bool:
        return self.attempts > 0

    def delay_s(self, retry: int) -> float:
        """The wait before retry `retry` (1: the second upgrade): the delay, doubled after each failure."""
        return self.retry_delay_ms * BACKOFF_FACTOR ** (retry - 1) / 1000

    @property
    def waits_s(self) -> float:
        """What the policy waits between its attempts, in all, when every upgrade fails."""
        return sum(self.delay_s(k) for k in range(1, self.attempts))

    def to_json(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "retry_delay_ms": self.retry_delay_ms,
            "upgrade_timeout_s": self.upgrade_timeout_s,
        }

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> WsFallback:
        """An experiment's `[websocket]` table: `fallback` (upgrades, default Codex's 6), `retry_delay_ms`,
        `upgrade_timeout_s`; unknown keys named."""
        unknown = sorted(set(table) - {"fallback", "retry_delay_ms", "upgrade_timeout_s"})
        if unknown:
            raise UsageError(
                f"{where}: unknown key(s) {', '.join(unknown)} (fallback, retry_delay_ms, upgrade_timeout_s)"
            )
        try:
            policy = cls(
                attempts=table.get("fallback", CODEX_ATTEMPTS),
                retry_delay_ms=table.get("retry_delay_ms", CODEX_RETRY_DELAY_MS),
                upgrade_timeout_s=table.get("upgrade_timeout_s", CODEX_UPGRADE_TIMEOUT_S),
            )
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        # As the flags are: a key the policy would never use is refused, not kept and ignored.
        unread = [k for k in ("retry_delay_ms", "upgrade_timeout_s") if k in table and not policy.enabled]
        if "retry_delay_ms" in table and policy.attempts == 1:
            unread.append("retry_delay_ms")
        if unread:
            raise UsageError(
                f"{where}: {', '.join(unread)} with fallback = {policy.attempts}: "
                f"{'no upgrade is tried again' if policy.attempts == 1 else 'nothing falls back'}, so never used"
            )
        return policy


NO_FALLBACK = WsFallback()
