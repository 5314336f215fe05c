"""The controls over HTTP/3 (issue 38): the stub and the relays speak no QUIC, so a matrix that measures rows over
HTTP/3 certifies the instrument through Caddy 2.11's clean TLS+h3 site (its stock config, which streams: findings
§13). `h3-direct` (Caddy in front of the stub) is the HTTP/3 direct path and its floor; `h3-buffer` (Caddy's
catalogue variant with `response_buffers`) and `h3-cork` (Caddy in front of a clear-text cork relay) must be seen
held over h3, as the buffer and cork relays are over HTTP/1.1 and HTTP/2. What cannot be run over HTTP/3 is said in
the certificate, with why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenpath.proxies.base import Endpoint, Proxy, RunningProxy, Site, new_workdir
from tokenpath.proxies.relays import BASE_CONTROLS, ControlProxy
from tokenpath.results.model import Check
from tokenpath.serve.tlscert import TLSFiles

H3_FRONT = "caddy-2.11"  # the catalogue entry that fronts the controls: stock, TLS, h1 h2 h3 on one port
H3_DIRECT = "h3-direct"


@dataclass(frozen=True, slots=True)
class H3Control:
    """Caddy 2.11's stock TLS site in front of the stub (`behind` None) or of a clear-text relay (its mode)."""

    name: str
    behind: str | None
    description: str
    variant: str = "stock"  # Caddy's catalogue variant


H3_CONTROLS = (
    H3Control(H3_DIRECT, None, "Caddy 2.11's stock TLS site (h3) in front of the stub: HTTP/3's direct path"),
    # Caddy's own buffering line, not the buffer relay behind it: that relay holds to the upstream's EOF, which
    # Caddy's keep-alive connection to it never sends (measured: no byte within 5 s, over h2 and h3).
    H3Control(
        "h3-buffer",
        None,
        "Caddy 2.11 with response_buffers 1m (h3): holds the stream, must be seen held",
        "response_buffers",
    ),
    H3Control("h3-cork", "cork", "Caddy 2.11 (h3) in front of the cork relay: must be seen in bursts over HTTP/3"),
)
# Each control certification cannot run over HTTP/3 itself, and why: stated in the certificate, never silently.
NOT_OVER_H3 = {
    "direct": "the stub speaks no QUIC: h3-direct (Caddy 2.11's stock TLS+h3 site in front of it) is the direct path "
    "and the floor of every HTTP/3 row",
    "pass": "the relays speak no QUIC; what the pass relay adds is certified over HTTP/1.1 in the same run, and "
    "h3-direct is the clean HTTP/3 path",
}


def start_h3_control(
    control: H3Control,
    front: Proxy,
    stub: Endpoint,
    listen: Endpoint,
    relay_listen: Endpoint,
    tls: TLSFiles,
    launch: Callable[[Proxy, Site], RunningProxy],
) -> list[RunningProxy]:
    """The processes of one control, started by `launch` (the relay first, clear text, then Caddy in front of it
    with the run's certificate), in the order they must be stopped in reverse. `launch` owns each one's stop (the
    matrix's registers it before a stop signal can land, and stops one that does not start); its ProxyError when
    one does not start."""
    started: list[RunningProxy] = []
    upstream = stub
    if control.behind is not None:
        relay = _relay(control.behind)
        started.append(launch(relay, Site(relay_listen, stub, new_workdir(control.name), relay.variant("stock"))))
        upstream = relay_listen
    site = Site(listen, upstream, new_workdir(control.name), front.variant(control.variant), tls)
    started.append(launch(front, site))
    return started


def not_run_checks() -> list[Check]:
    """The certificate's word for each control that cannot speak HTTP/3 (passed: a stated reason, not a test)."""
    return [Check(f"{name} over HTTP/3: not run", True, reason) for name, reason in NOT_OVER_H3.items()]


def _relay(mode: str) -> ControlProxy:
    return next(c for c in BASE_CONTROLS if c.mode == mode)
