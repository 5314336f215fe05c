"""The sweep's default grid, in a module light enough for the CLI to import for its help text."""

from __future__ import annotations

DEFAULT_SIZES = (60, 200, 360, 500, 700, 1000, 1400, 2000)  # bytes per frame: a token to a tool-call delta
DEFAULT_INTERVALS = (10.0, 25.0, 50.0, 100.0)  # ms between frames: fast decoding to a slow reasoning model


def as_list(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}" for v in values)
