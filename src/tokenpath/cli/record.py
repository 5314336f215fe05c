"""`tokenpath record URL`: flags → RecordRequest → origins.record → a recording the stub replays."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokenpath.cli import options
from tokenpath.cli.common import api_key, console, err_console, handles_errors, writable_file
from tokenpath.wire.request import parse_header_arg


@handles_errors("record")
def record(
    url: Annotated[str, typer.Argument(help="The server, direct (base URL or the format's route), on this host.")],
    out: Annotated[str, typer.Option(help="The recording's file (JSON).")] = "recording.json",
    name: Annotated[
        str | None, typer.Option(help="Its name, for the stub's `replay` \\[default: the file's stem].")
    ] = None,
    api: options.Api = None,
    model: Annotated[str, typer.Option(help="The model to ask for.")] = "default",
    prompt: Annotated[str | None, typer.Option(help="The prompt \\[default: count to one hundred].")] = None,
    max_tokens: Annotated[int, typer.Option(help="The answer's length in tokens.")] = 32,
    seed: Annotated[int, typer.Option(help="Sampling seed (temperature 0 too): the token count repeats.")] = 1,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE sent with the request; repeatable.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Env var holding the server's key.")] = None,
    keep_text: Annotated[
        bool, typer.Option(help="Keep the model's words (default: filler of the same bytes).")
    ] = False,
) -> None:
    """Record a real server's response shape: its headers, how it frames a stream for HTTP/1.0, each event's bytes
    and kind, grouped as it wrote them, and when (`tokenpath stub --replay FILE` plays it back, audited)."""
    from tokenpath import axes
    from tokenpath.origins.process import PROMPT
    from tokenpath.origins.record import RecordRequest
    from tokenpath.origins.record import record as run
    from tokenpath.probe.client import ProbeConfig

    path = Path(out)
    writable_file(path, "out")  # before the server is asked: not found out after the recording
    probe = ProbeConfig(
        url=url,
        model=model,
        prompt=prompt or PROMPT,
        max_tokens=max_tokens,
        headers=tuple(parse_header_arg(h) for h in header or []),
        api_key=api_key(api_key_env),
        api=axes.API.read(api, "--api") if api is not None else axes.API.default,  # a clear refusal, no traceback
    )
    recording = run(RecordRequest(probe, name or path.stem, seed=seed, redact=not keep_text))
    for dropped in recording.source.get("dropped_headers", []):  # a header the stub cannot send: named, not replayed
        err_console.print(f"tokenpath record: dropped {dropped}", markup=False, highlight=False, soft_wrap=True)
    unredacted = recording.source.get("unredacted_events", 0)
    if unredacted:  # counted in the file only, the text kept without a word
        err_console.print(
            f"tokenpath record: {unredacted} events keep text that could not be hidden (spelled another way than "
            "JSON's usual escapes): read the file before you share it",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    path.write_text(recording.dumps())
    console.print(f"recorded {recording.describe()} into {path}", markup=False, highlight=False)
