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


@dataclass(frozen=True, slots=True)
class UpgradeTried:
    """What the series' upgrade check measured: the first upgrade (no fallback), and, when it was refused, the same
    request under the client's fallback policy (its WsFigures: the attempts and the cost), or why that failed."""

    first: WsFigures
    policy: WsFallback
    fallback: WsFigures | None = None
    fallback_error: str | None = None


def try_upgrade(template: ProbeConfig, run: Run, probe: Probe, policy: WsFallback) -> UpgradeTried:
    """Before a series over WebSocket: one upgrade with `run`'s request, given the policy's upgrade timeout (a path
    that holds an upgrade unanswered refuses it, as a client sees it, rather than failing the diagnosis; the request
    then goes out over SSE once). Refused, the same request again under the client's fallback `policy` (its failed
    upgrades, its waits, then SSE), for what it costs; a failure of that stream is said, not raised (the refusal is
    the finding)."""
    once = WsFallback(1, policy.retry_delay_ms, policy.upgrade_timeout_s) if policy.enabled else NO_FALLBACK
    cfg = dataclasses.replace(config_for(template, run), transport=WEBSOCKET, ws_fallback=once)
    first = probe(cfg).ws
    assert first is not None, "a WebSocket probe's trace carries its WsFigures"
    if first.upgraded or not policy.enabled:
        return UpgradeTried(first, policy)
    try:
        fell_back = probe(dataclasses.replace(cfg, ws_fallback=policy)).ws
    except TokenpathError as exc:
        return UpgradeTried(first, policy, fallback_error=str(exc))
    return UpgradeTried(first, policy, fell_back)


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
            out.append(
                f"fallback: {self.fallback_attempts} failed upgrades ({waits:g} s of waits), then SSE: "
                f"{self.fallback_ms:,.0f} ms to the first content event"
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
        fallback_ms=fallback.fallback_ms if fallback is not None else None,
        fallback_attempts=fallback.attempts if fallback is not None else None,
        fallback_error=error,
    )
