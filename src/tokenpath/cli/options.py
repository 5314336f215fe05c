"""The options of the measurement axes (tokenpath.axes), one each, shared by every command that offers the axis
(probe, load, monitor, stub): the flag and the help are the axis's own, so an axis reads the same wherever it is
offered. None is "not given": the command's default, or a --stub-url stub's own pacing. An option no axis declares
yet (--http3, --h3-window) is declared here too: one place for every shared option."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tokenpath import axes
from tokenpath.errors import UsageError
from tokenpath.probe.wsfallback import (
    CODEX_ATTEMPTS,
    CODEX_RETRY_DELAY_MS,
    CODEX_UPGRADE_TIMEOUT_S,
    NO_FALLBACK,
    WsFallback,
)
from tokenpath.stub.config import Pacing
from tokenpath.wire.carrier import WEBSOCKET
from tokenpath.wire.httpversion import HttpVersion

if TYPE_CHECKING:  # the modules: Api, H2Window and H3Window here are the options
    from tokenpath.probe import h3figures
    from tokenpath.wire import apis, h2client


def _option(axis: axes.Axis[Any]) -> Any:
    assert axis.flag is not None, f"{axis.key} has no flag"
    return typer.Option(axis.flag, help=axis.help, show_default=False)


Api = Annotated[str | None, _option(axes.API)]
AcceptEncoding = Annotated[str | None, _option(axes.ACCEPT_ENCODING)]
Http2 = Annotated[bool, _option(axes.HTTP_VERSION)]
H2Window = Annotated[str | None, _option(axes.H2_WINDOW)]
Transport = Annotated[str | None, _option(axes.TRANSPORT)]
# The stub's pacing: `stub` takes them as its flags, `load` for the stub it starts (or checks against a --stub-url
# stub's), `probe` as the request's `tokenpath` member for a stub behind the path.
IntervalMs = Annotated[float | None, _option(axes.INTERVAL_MS)]
FrameBytes = Annotated[int | None, _option(axes.FRAME_BYTES)]
HeartbeatMs = Annotated[float | None, _option(axes.HEARTBEAT_MS)]
ReasoningTokens = Annotated[int | None, _option(axes.REASONING_TOKENS)]
FirstEventBytes = Annotated[int | None, _option(axes.FIRST_EVENT_BYTES)]
HeadAt = Annotated[str | None, _option(axes.HEAD_AT_AXIS)]
PauseMs = Annotated[float | None, _option(axes.PAUSE_MS)]
PauseAfter = Annotated[int | None, _option(axes.PAUSE_AFTER)]


# HTTP/3 is the probe's alone and no axis yet (the matrix has no HTTP/3 condition): declared here all the same, so an
# option is declared in one place whichever command offers it next.
Http3 = Annotated[
    bool,
    typer.Option(
        "--http3",
        help="Speak HTTP/3: QUIC over UDP to the URL's port (https only), TLS verified as over TCP; never a "
        "fallback. Reports the handshake apart from TTFT, UDP reads, DATA per read and flow-control stalls.",
    ),
]
H3Window = Annotated[
    str | None,
    typer.Option(
        "--h3-window",
        help="With --http3: the client's initial QUIC receive windows: BYTES (stream and connection), "
        "STREAM:CONNECTION, `default` (aioquic's 1 MiB) or `browser` (Chromium's 6 MiB / 15 MiB).",
    ),
]

# The WebSocket client's fallback policy (probe/wsfallback.py): probe takes them, the matrix reads `[websocket]`.
WsFallbackAttempts = Annotated[
    int | None,
    typer.Option(
        "--ws-fallback",
        metavar="N",
        help="With --transport websocket: after N failed upgrades (an answer other than 101, or none within "
        "--ws-upgrade-timeout) send the request over SSE, as coding agents do, and report what the fallback cost "
        f"(the first upgrade to the first content event) apart from the SSE TTFT. Codex: {CODEX_ATTEMPTS}. "
        "Default: no fallback (a refused upgrade is the result).",
        show_default=False,
    ),
]
WsRetryDelayMs = Annotated[
    float,
    typer.Option(
        "--ws-retry-delay-ms",
        help="With --ws-fallback: the wait after the first failed upgrade, doubled after each next (Codex's backoff).",
    ),
]
WsUpgradeTimeout = Annotated[
    float,
    typer.Option("--ws-upgrade-timeout", help="With --ws-fallback: seconds an upgrade may wait for its 101 (Codex's)."),
]

WsPingS = Annotated[
    float | None,
    typer.Option(
        "--ws-ping-s",
        help="With --transport websocket: send a ping every this many seconds while the stream runs (an agent's "
        "keep-alive: does the path's idle timer count it?); the pings sent and the pongs back are reported.",
        show_default=False,
    ),
]


def ws_fallback(attempts: int | None, retry_delay_ms: float, upgrade_timeout_s: float, transport: str) -> WsFallback:
    """The policy the options give; each refused where it would be ignored (no --ws-fallback, or no WebSocket)."""
    if attempts is None:
        if retry_delay_ms != CODEX_RETRY_DELAY_MS or upgrade_timeout_s != CODEX_UPGRADE_TIMEOUT_S:
            raise UsageError("--ws-retry-delay-ms and --ws-upgrade-timeout go with --ws-fallback N")
        return NO_FALLBACK
    if transport != WEBSOCKET:
        raise UsageError("--ws-fallback is the WebSocket client's policy: pass --transport websocket with it")
    if attempts < 1:
        raise UsageError(f"--ws-fallback {attempts}: at least 1 upgrade before the fallback")
    if attempts == 1 and retry_delay_ms != CODEX_RETRY_DELAY_MS:
        raise UsageError("--ws-retry-delay-ms with --ws-fallback 1: no upgrade is tried again, so never used")
    return WsFallback(attempts, retry_delay_ms, upgrade_timeout_s)


def pacing(params: Mapping[str, object]) -> dict[str, Any]:
    """The stub's pacing a command's parameters give (its `locals()`): each of them named as a Pacing field, and
    given (not None). A pacing option's parameter is its Pacing field, so a new one needs no line here."""
    return {k: params[k] for k in Pacing.OVERRIDABLE if params.get(k) is not None}


@dataclass(frozen=True, slots=True)
class StreamChoice:
    """What the request options every client command shares choose (--api, --http2 / --h2-window, --http3 /
    --h3-window, --transport): read and checked once, here, for probe, diagnose and timeouts alike."""

    api: apis.Api
    http_version: HttpVersion
    h2_window: h2client.H2Window
    h3_window: h3figures.H3Window
    transport: str


def stream_choice(
    api: str | None,
    http2: bool,
    h2_window: str | None = None,
    http3: bool = False,
    h3_window: str | None = None,
    transport: str | None = None,
) -> StreamChoice:
    """The shared options' values (None: not given, the default), each refused where it would be ignored."""
    from tokenpath.probe.h3figures import DEFAULT_H3_WINDOW, parse_h3_window
    from tokenpath.wire.h2client import DEFAULT_WINDOW, parse_h2_window

    if h2_window is not None and not http2:
        raise UsageError("--h2-window is HTTP/2's: pass --http2 with it")
    if h3_window is not None and not http3:
        raise UsageError("--h3-window is HTTP/3's: pass --http3 with it")
    if http2 and http3:
        raise UsageError("--http2 and --http3: pick one HTTP version")
    fmt = axes.API.read(api, "--api") if api is not None else axes.API.default
    return StreamChoice(
        api=fmt,
        http_version=HttpVersion.HTTP3 if http3 else HttpVersion.of(http2),
        h2_window=parse_h2_window(h2_window) if h2_window is not None else DEFAULT_WINDOW,
        h3_window=parse_h3_window(h3_window) if h3_window is not None else DEFAULT_H3_WINDOW,
        # a WebSocket-only API (realtime) is carried over WebSocket when no transport is named
        transport=axes.TRANSPORT.read(transport, "--transport") if transport is not None else axes.transport_for(fmt),
    )
