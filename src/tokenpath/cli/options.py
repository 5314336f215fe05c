"""The options of the measurement axes (tokenpath.axes), one each, shared by every command that offers the axis
(probe, load, monitor, stub): the flag and the help are the axis's own, so an axis reads the same wherever it is
offered. None is "not given": the command's default, or a --stub-url stub's own pacing. An option no axis declares
yet (--http3, --h3-window) is declared here too: one place for every shared option."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from tokenpath import axes
from tokenpath.stub.config import Pacing


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


def pacing(params: Mapping[str, object]) -> dict[str, Any]:
    """The stub's pacing a command's parameters give (its `locals()`): each of them named as a Pacing field, and
    given (not None). A pacing option's parameter is its Pacing field, so a new one needs no line here."""
    return {k: params[k] for k in Pacing.OVERRIDABLE if params.get(k) is not None}
