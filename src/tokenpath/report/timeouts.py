"""The timeouts survey as an HTML section and a self-contained page (`tokenpath timeouts --html FILE`): the table
of each path's limits, then each cut named with its fix. The page's CSS and escaping are the report page's."""

from __future__ import annotations

from collections.abc import Mapping

from tokenpath.diagnose.cuts import cut_lines
from tokenpath.diagnose.limits import PathLimits, SurveyConfig, table_rows
from tokenpath.report.page import CSS, esc

TITLE = "What each path cuts: its stream limits"


def timeouts_section(results: list[PathLimits], cfg: SurveyConfig, labels: Mapping[str, str]) -> str:
    header, rows = table_rows(results, cfg, labels)
    head = "".join(f"<th>{esc(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    bounds = f"bisection between {cfg.min_s:g} s and {cfg.max_s:g} s, to {cfg.resolution_s:g} s"
    cuts = "".join(f"<li>{esc(line)}</li>" for line in cut_lines(results, labels))
    return (
        f'<section id="timeouts"><h2>{esc(TITLE)}</h2><p>{esc(bounds)}</p>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        + (f"<h3>Cuts and their fixes</h3><ul>{cuts}</ul>" if cuts else "")
        + "</section>"
    )


def timeouts_page(results: list[PathLimits], cfg: SurveyConfig, labels: Mapping[str, str]) -> str:
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(TITLE)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>\n'
        f"<body>\n{timeouts_section(results, cfg, labels)}\n</body></html>\n"
    )
