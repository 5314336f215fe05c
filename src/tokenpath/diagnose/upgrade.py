"""diagnose --transport websocket: whether the path carries the Responses WebSocket mode's upgrade, the line that
makes the recognised proxy carry it, and what the client's fallback costs where it does not. Pure: built from the
probe's WsFigures (probe/wsfigures.py); the one exchange, try_upgrade, through the series' injected probe.

The lines are the catalogue's own `websocket` variants (proxies/nginx.py, envoy.py, apache2.py, varnish.py, h2o.py,
lighttpd.py, squid.py: measured carrying the upgrade in tests/e2e/test_catalogue_websocket.py and
test_matrix_websocket_paths.py), never a copy of them; a proxy without one, or a path that names no proxy, gets what
changes it in any proxy with nginx's, Envoy's and Apache's lines as examples.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenpath.diagnose.fixes import variant_line
from tokenpath.diagnose.measure import Probe, config_for
from tokenpath.diagnose.series import Run
from tokenpath.errors import TokenpathError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.wsfallback import NO_FALLBACK, WsFallback
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.proxies.catalogue import catalogue, parse_ref
from tokenpath.wire.carrier import WEBSOCKET

WEBSOCKET_VARIANT = "websocket"  # the catalogue variant that carries an upgrade on a proxy that does not by default
EXAMPLES = ("nginx", "envoy", "apache2")  # the entries whose stock config refuses it (STOCK_ANSWERS in the e2e)
# The most the upgrade check waits on upgrades (the first, then the policy's), unless --total-timeout is lower: Codex's
# policy on a path that leaves every upgrade unanswered is 6 x 15 s of waits for a 101 and 6.2 s of backoff.
UPGRADE_CHECK_S = 30.0


@dataclass(frozen=True, slots=True)
class UpgradeTried:
    """What the series' upgrade check measured: the first upgrade (no fallback), and, when it was refused, the same
    request under the client's fallback policy (its WsFigures: the attempts and the cost), or why that failed.
    `measured`: the policy as measured when the check's bound cut it short (fewer upgrades, each waited on at most
    the bound), None when it was measured whole."""

    first: WsFigures
    policy: WsFallback
    fallback: WsFigures | None = None
    fallback_error: str | None = None
    measured: WsFallback | None = None

    @property
    def fallback_ms(self) -> float | None:
        """What the policy costs (its first upgrade -> the first content event over SSE); cut short, the least it
        costs: the cost measured with fewer upgrades, plus the policy's waits before the upgrades not tried (each
        of those takes at least no time)."""
        if self.fallback is None or self.fallback.fallback_ms is None:
            return None
        if self.measured is None:
            return self.fallback.fallback_ms
        skipped = range(self.measured.attempts, self.policy.attempts)
        return self.fallback.fallback_ms + 1000 * sum(self.policy.delay_s(k) for k in skipped)


def upgrade_bound_s(template: ProbeConfig) -> float:
    """How long the upgrade check may wait on upgrades: --total-timeout, at most UPGRADE_CHECK_S."""
    return min(template.total_timeout_s, UPGRADE_CHECK_S)


def waiting_words(policy: WsFallback, bound_s: float) -> str:
    """What the upgrade check may take, said before it starts (the policy's worst case: every upgrade unanswered)."""
    if not policy.enabled:
        return f"the WebSocket upgrade: waiting up to {min(policy.upgrade_timeout_s, bound_s):g} s for its 101"
    worst = policy.attempts * policy.upgrade_timeout_s + policy.waits_s
    said = (
        f"the WebSocket upgrade: waiting up to {min(policy.upgrade_timeout_s, bound_s):g} s for its 101; refused, "
        f"the client's fallback ({policy.attempts} upgrades of up to {policy.upgrade_timeout_s:g} s each, "
        f"{policy.waits_s:g} s of waits between them, then SSE: up to {worst:g} s before its SSE request)"
    )
    if worst + policy.upgrade_timeout_s <= bound_s:
        return f"{said} is measured whole"
    return f"{said}: the check waits at most {bound_s:g} s on upgrades in all, a cost past that is said as 'at least'"


def try_upgrade(
    template: ProbeConfig,
    run: Run,
    probe: Probe,
    policy: WsFallback,
    bound_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> UpgradeTried:
    """Before a series over WebSocket: one upgrade with `run`'s request, given the policy's upgrade timeout (a path
    that holds an upgrade unanswered refuses it, as a client sees it, rather than failing the diagnosis; the request
    then goes out over SSE once). Refused, the same request again under the client's fallback `policy` (its failed
    upgrades, its waits, then SSE), for what it costs; a failure of that stream is said, not raised (the refusal is
    the finding). The upgrades are waited on for at most `bound_s` in all (default upgrade_bound_s): a policy that
    would take longer (each upgrade as slow as the first) is measured with the upgrades that fit, at least one, and
    its cost is then a least cost (UpgradeTried.fallback_ms)."""
    bound = upgrade_bound_s(template) if bound_s is None else bound_s
    started = clock()
    wait_s = min(policy.upgrade_timeout_s, bound)
    once = WsFallback(1, policy.retry_delay_ms, wait_s) if policy.enabled else NO_FALLBACK
    cfg = dataclasses.replace(config_for(template, run), transport=WEBSOCKET, ws_fallback=once)
    first = probe(cfg).ws
    assert first is not None, "a WebSocket probe's trace carries its WsFigures"
    if first.upgraded or not policy.enabled:
        return UpgradeTried(first, policy)
    measured = _fitted(policy, first, wait_s, bound - (clock() - started))
    cut = measured if measured != policy else None
    try:
        fell_back = probe(dataclasses.replace(cfg, ws_fallback=measured)).ws
    except TokenpathError as exc:
        return UpgradeTried(first, policy, fallback_error=str(exc), measured=cut)
    return UpgradeTried(first, policy, fell_back, measured=cut)


def _fitted(policy: WsFallback, first: WsFigures, wait_s: float, left_s: float) -> WsFallback:
    """The policy with as many of its upgrades as fit in `left_s` (at least one), each taking as long as the first
    did (the whole wait when it was unanswered), each waited on for at most `wait_s`."""
    each = wait_s if first.upgrade_status == 0 else min(first.upgrade_ms / 1000, wait_s)
    attempts = policy.attempts
    while attempts > 1 and attempts * each + dataclasses.replace(policy, attempts=attempts).waits_s > left_s:
        attempts -= 1
    return dataclasses.replace(policy, attempts=attempts, upgrade_timeout_s=wait_s)


@dataclass(frozen=True, slots=True)
class UpgradeFinding:
    carried: bool
    status: int  # 101, or what the path answered instead
    upgrade_ms: float
    refusal: str  # what came instead of 101 ("" when carried)
    proxy: str | None  # the catalogue entry whose line `fix` is
    fix: str | None  # that entry's `websocket` variant line
    generic: str | None  # what carries it in any proxy, when no entry's line is printed
    policy: WsFallback
    fallback_ms: float | None = None  # the first upgrade -> the first content event over SSE
    fallback_attempts: int | None = None
    fallback_error: str | None = None
    # The bound cut the policy's measurement short: fallback_ms is the least it costs, measured with this many upgrades.
    measured_attempts: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "carried": self.carried,
            "upgrade_status": self.status,
            "upgrade_ms": round(self.upgrade_ms, 1),
            "refusal": self.refusal or None,
            "fix": None if self.fix is None else {"proxy": self.proxy, "line": self.fix},
            "generic_fix": self.generic,
            "fallback": None
            if self.carried
            else {
                "policy": self.policy.to_json(),
                "attempts": self.fallback_attempts,
                "cost_ms": None if self.fallback_ms is None else round(self.fallback_ms, 1),
                "cost_at_least": self.measured_attempts is not None,
                "measured_attempts": self.measured_attempts or self.fallback_attempts,
                "error": self.fallback_error,
            },
        }

    def lines(self) -> list[str]:
        if self.carried:
            return [f"websocket: carried (101 in {self.upgrade_ms:,.0f} ms); the runs below are over WebSocket"]
        out = [f"websocket: not carried: {self.refusal}"]
        if self.fix is not None:
            out.append(f"fix: {self.fix}  ({self.proxy}'s way to carry a WebSocket upgrade)")
        elif self.generic:
            out.append(f"in any proxy: {self.generic}")
        if self.fallback_error is not None:
            out.append(f"fallback: not measured: {self.fallback_error}")
        elif self.fallback_ms is not None:
            waits = self.policy.waits_s
            if self.measured_attempts is None:
                out.append(
                    f"fallback: {self.fallback_attempts} failed upgrades ({waits:g} s of waits), then SSE: "
                    f"{self.fallback_ms:,.0f} ms to the first content event"
                )
            else:
                out.append(
                    f"fallback: {self.policy.attempts} failed upgrades ({waits:g} s of waits), then SSE: at least "
                    f"{self.fallback_ms:,.0f} ms to the first content event (measured with {self.measured_attempts} "
                    "of its upgrades: the upgrade check is bounded by --total-timeout, at most "
                    f"{UPGRADE_CHECK_S:g} s)"
                )
        else:
            out.append("fallback: the SSE stream carried no content event")
        out.append("the runs below are over SSE, the stream the client falls back to")
        return out


def upgrade_fix(proxy: str | None) -> str | None:
    """The recognised proxy's catalogue line that carries an upgrade, or None (it has none: it carries upgrades
    stock, or no one measured a line for it)."""
    if proxy is None:
        return None
    entry = catalogue().get(parse_ref(proxy).name)
    if entry is None or not any(v.name == WEBSOCKET_VARIANT for v in entry.variants):
        return None
    return variant_line(entry.name, WEBSOCKET_VARIANT)


def generic_upgrade_fix() -> str:
    examples = "; ".join(f"{name}: {variant_line(name, WEBSOCKET_VARIANT)}" for name in EXAMPLES)
    return (
        f"forward the client's Upgrade and Connection headers to the upstream over HTTP/1.1 on this route ({examples})"
    )


def finding(tried: UpgradeTried, proxy: str | None) -> UpgradeFinding:
    first = tried.first
    if first.upgraded:
        return UpgradeFinding(True, first.upgrade_status, first.upgrade_ms, "", None, None, None, tried.policy)
    fix = upgrade_fix(proxy)
    fallback, error = tried.fallback, tried.fallback_error
    if fallback is not None and fallback.upgraded:  # carried on a later try: the path refuses it only sometimes
        error = f"upgrade {fallback.attempts} of the policy's was carried: the path refuses it at times"
        fallback = None
    return UpgradeFinding(
        carried=False,
        status=first.upgrade_status,
        upgrade_ms=first.upgrade_ms,
        refusal=dataclasses.replace(first, fell_back=False).note,  # the refusal alone: the cost is said apart
        proxy=parse_ref(proxy).name if fix is not None and proxy is not None else None,
        fix=fix,
        generic=None if fix is not None else generic_upgrade_fix(),
        policy=tried.policy,
        fallback_ms=tried.fallback_ms if fallback is not None else None,
        fallback_attempts=fallback.attempts if fallback is not None else None,
        fallback_error=error,
        measured_attempts=tried.measured.attempts if tried.measured is not None and fallback is not None else None,
    )
