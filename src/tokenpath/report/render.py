"""Write a report next to its results.json: report.html, table.md, results.csv (any subset)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenpath.errors import UsageError
from tokenpath.report import compare, load_table, page, tables
from tokenpath.results import model
from tokenpath.results.model import LoadResults

FORMATS = ("html", "md", "csv")
FILE_NAMES = {"html": "report.html", "md": "table.md", "csv": "results.csv"}


def write_report(
    result_dir: Path, compare_dir: Path | None = None, formats: Iterable[str] = FORMATS, out_dir: Path | None = None
) -> dict[str, Path]:
    """Reads only results.json (schema checked), writes the chosen renderings, returns their paths by format."""
    wanted = list(dict.fromkeys(formats))
    for fmt in wanted:
        if fmt not in FORMATS:
            raise UsageError(f"`format` {fmt!r}: expected one of {', '.join(FORMATS)}")
    doc = model.read(result_dir)
    other = model.read(compare_dir) if compare_dir is not None else None
    comparisons = compare.compare(doc, other) if other is not None else []
    target = out_dir or (result_dir if result_dir.is_dir() else result_dir.parent)
    target.mkdir(parents=True, exist_ok=True)
    written = {}
    for fmt in wanted:
        path = target / FILE_NAMES[fmt]
        if fmt == "html":
            text = page.page(doc, comparisons, other)
        elif fmt == "md":
            text = page.markdown(doc, comparisons)
        else:
            text = load_table.csv_text(doc) if isinstance(doc, LoadResults) else tables.csv_text(doc)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        written[fmt] = path
    return written
