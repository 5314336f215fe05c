"""Write a report next to its results.json: report.html, table.md, results.csv (any subset)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenpath.errors import UsageError
from tokenpath.report import compare, load_table, page, tables
from tokenpath.results import model
from tokenpath.results.model import LoadResults
from tokenpath.userfiles import write_temporary

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
    try:  # all rendered before any is written
        texts = {fmt: _render(fmt, doc, comparisons, other) for fmt in wanted}
    except KeyError as exc:  # an echoed experiment or configuration without a key the page reads (model checks types)
        raise UsageError(f"{result_dir}: not a tokenpath results document: {exc.args[0]} missing") from None
    return write_all(target, {target / FILE_NAMES[fmt]: text for fmt, text in texts.items()}, list(texts))


def _render(fmt: str, doc: model.Results, comparisons: list[compare.Comparison], other: model.Results | None) -> str:
    if fmt == "html":
        return page.page(doc, comparisons, other)
    if fmt == "md":
        return page.markdown(doc, comparisons)
    return load_table.csv_text(doc) if isinstance(doc, LoadResults) else tables.csv_text(doc)


def write_all(target: Path, texts: dict[Path, str], names: list[str]) -> dict[str, Path]:
    """Every file or none: each is written to a temporary beside it, then all are renamed into place, so no report
    sits beside another run's table; on a failure the temporaries are removed and one line says why."""
    _directory(target)
    for path in texts:
        if path.is_dir():
            raise UsageError(f"cannot write {path}: it is a directory")
    temps: list[Path] = []
    try:
        for path, text in texts.items():  # UTF-8 as the page's meta says, whatever the locale
            temps.append(write_temporary(path, text))  # a fresh name: never a planted `table.md.tmp` link
        for tmp, path in zip(temps, texts, strict=True):
            tmp.replace(path)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or target}: {exc.strerror}") from None
    finally:
        for tmp in temps:  # a temporary already renamed is gone; one left by a failure is removed
            tmp.unlink(missing_ok=True)
    return dict(zip(names, texts, strict=True))


def _directory(target: Path) -> None:
    """The output directory, made when missing; a file in its place, or a path that cannot be made, is refused."""
    if target.exists() and not target.is_dir():
        raise UsageError(f"cannot write to {target}: it is not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write to {target}: {exc.strerror}") from None
