"""`tokenpath stub`: flags → StubConfig → stub.server.run."""

from __future__ import annotations

from typing import Annotated

import typer

from tokenpath.cli import options
from tokenpath.cli.common import announce, handles_errors
from tokenpath.errors import UsageError
from tokenpath.stub.presets import PRESETS
from tokenpath.wire.apis import api_names
from tokenpath.wire.request import parse_header_arg


@handles_errors("stub")
def stub(
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless you mean otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 8000,
    ttft_ms: Annotated[float, typer.Option(help="Delay before the first token.")] = 90.0,
    interval_ms: options.IntervalMs = None,
    tokens: Annotated[int, typer.Option(help="Tokens per response (max_tokens can only lower it).")] = 128,
    frame_bytes: options.FrameBytes = None,
    jitter: Annotated[str | None, typer.Option(help="Random offset per write: uniform:MS, normal:MS, exp:MS.")] = None,
    heartbeat_ms: options.HeartbeatMs = None,
    reasoning_tokens: options.ReasoningTokens = None,
    first_event_bytes: options.FirstEventBytes = None,
    head_at: options.HeadAt = None,
    pause_ms: options.PauseMs = None,
    pause_after: options.PauseAfter = None,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE added to responses; repeatable.")] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help=f"Answer as a real origin does besides pacing: its HTTP/1.0 framing and the headers a path acts on "
            f"({', '.join(PRESETS)}; --header and --http10-framing go on top)."
        ),
    ] = None,
    http10_framing: Annotated[
        str | None,
        typer.Option(
            help="A stream to an HTTP/1.0 request: close (delimited by the close) or chunked (as llama.cpp's)."
        ),
    ] = None,
    replay: Annotated[
        list[str] | None,
        typer.Option(
            help="A recorded shape (`tokenpath record`) every streaming request on its API's route gets; repeatable."
        ),
    ] = None,
    recording: Annotated[
        list[str] | None,
        typer.Option(help="A recorded shape replayed only to requests whose `tokenpath` member names it (`replay`)."),
    ] = None,
    api: Annotated[
        str,
        typer.Option(help=f"{api_names()}, or all (every route at once)."),
    ] = "all",
    format: Annotated[
        str, typer.Option(help="The OpenAI routes' frames: openai (chunks) or plain (bare `data: <n>` frames).")
    ] = "openai",
    model: Annotated[str, typer.Option(help="Model name listed by /v1/models.")] = "tokenpath-stub",
    workers: Annotated[int, typer.Option(help="Processes sharing the port (SO_REUSEPORT).")] = 1,
    seed: Annotated[int | None, typer.Option(help="Seed for --jitter, for repeatable schedules.")] = None,
    loop: Annotated[str, typer.Option(help="Event loop: uvloop or asyncio.")] = "uvloop",
    priority: Annotated[
        str, typer.Option(help="auto (SCHED_FIFO when permitted), realtime (required) or normal scheduling.")
    ] = "auto",
    clock_offset_ms: Annotated[float, typer.Option(hidden=True, help="Test only: report times this far ahead.")] = 0.0,
) -> None:
    """Serve a model stub that streams every API format (--api) on its route, with exact pacing and an audit log of
    every write. A request's own pacing (its body's `tokenpath` member) overrides these flags' for that request."""
    from tokenpath.stub import presets
    from tokenpath.stub.config import Jitter, Pacing, StubConfig
    from tokenpath.stub.server import run

    if seed is not None and not jitter:  # the seed only draws --jitter's offsets (no request brings its own)
        raise UsageError("--seed seeds --jitter's offsets: give it with --jitter")
    pacing = Pacing(**options.pacing(locals()))  # the flags of its pacing: --ttft-ms, --tokens ... --pause-after
    behaviour = presets.preset(preset) if preset else presets.OriginBehaviour()
    declared = dict(parse_header_arg(h) for h in header or [])
    preset_headers = [(k, v) for k, v in behaviour.headers if k.lower() not in {d.lower() for d in declared}]
    cfg = StubConfig.paced(
        pacing,
        host=host,
        port=port,
        jitter=Jitter.parse(jitter) if jitter else None,
        headers=(*preset_headers, *declared.items()),
        http10_framing=http10_framing or behaviour.http10_framing,
        replays=tuple(replay or ()),
        recordings=tuple(recording or ()),
        api=api,
        model=model,
        workers=workers,
        seed=seed,
        priority=priority,
        clock_offset_ms=clock_offset_ms,
    )
    run(cfg, announce("stub"), loop)
