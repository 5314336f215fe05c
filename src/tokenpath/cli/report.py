"""`tokenpath report`: results.json → report.html, table.md, results.csv (and a screenshot)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokenpath.cli.common import console, handles_errors
from tokenpath.errors import UsageError


@handles_errors("report")
def report(
    results: Annotated[str, typer.Argument(help="A results directory (or its results.json).")],
    compare: Annotated[str | None, typer.Option(help="Another results directory to show side by side.")] = None,
    format: Annotated[list[str] | None, typer.Option(help="html, md or csv; repeatable. Default: all three.")] = None,
    out: Annotated[str | None, typer.Option(help="Directory to write to (default: beside results.json).")] = None,
    screenshot: Annotated[
        str | None, typer.Option(help="Also save a PNG of the page rendered by headless Chromium.")
    ] = None,
) -> None:
    """Render results.json as one self-contained HTML page (inline SVG charts), Markdown and CSV."""
    from tokenpath.progress import escaped
    from tokenpath.report import browser
    from tokenpath.report.render import FORMATS, write_report

    if screenshot is not None:  # '' was dropped in silence; a directory "succeeded" with no PNG written
        if not screenshot:
            raise UsageError("--screenshot '': name the PNG file to write")
        if Path(screenshot).is_dir():
            raise UsageError(f"--screenshot {screenshot}: a directory; name the PNG file to write")
    written = write_report(
        Path(results), Path(compare) if compare else None, format or FORMATS, Path(out) if out else None
    )
    for fmt, path in written.items():
        console.print(f"{fmt}: {escaped(path)}")  # a directory's name, as typed
    if screenshot:
        if "html" not in written:
            raise UsageError("--screenshot needs the html format")
        console.print(f"screenshot: {escaped(browser.screenshot(written['html'], Path(screenshot)))}")
