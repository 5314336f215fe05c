"""The report page: one self-contained HTML file (inline CSS and SVG, no script, no network) built from one
results document, optionally compared with another. Everything a reader needs to trust the figures (host, versions,
effective configs, exclusion rule, certification, warnings) sits next to them."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tokenpath.axes import Condition
from tokenpath.report import charts, headline, load_table, md, tables
from tokenpath.report.compare import Comparison, Figure
from tokenpath.results.model import (
    Certification,
    LoadResults,
    MatrixResults,
    MatrixRow,
    PathSkip,
    ProxyInfo,
    Results,
    TargetInfo,
    TargetSkip,
)
from tokenpath.stats import median

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f; margin: 0 auto;
       max-width: 1180px; padding: 0 24px 48px; background: #fff; }
h1 { font-size: 24px; margin: 28px 0 4px; } h1.uncertified { color: #b00020; }
h2 { font-size: 18px; margin: 36px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
.lede { color: #444; margin: 0 0 16px; }
.banner { padding: 8px 12px; border-radius: 4px; margin: 10px 0; }
.banner.ok { background: #e6f4ea; } .banner.bad { background: #fde7e9; color: #8a0015; font-weight: 600; }
.banner.warn { background: #fff4d6; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
dl.meta dt { color: #666; } dl.meta dd { margin: 0; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f5f5f7; font-weight: 600; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.unreliable td { background: #fff8e1; } tr.failed td { background: #fde7e9; }
.note { color: #8a5a00; font-size: 12px; }
details { margin: 4px 0; } summary { cursor: pointer; color: #00598c; }
details.inline { display: inline-block; margin: 0 12px 0 0; vertical-align: top; }
table.versions td { padding: 1px 10px; border: 0; }
pre { background: #f7f7f9; padding: 8px; overflow-x: auto; font-size: 12px; }
figure { margin: 12px 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 12px; max-width: 900px; }
p.headline { font-size: 18px; font-weight: 600; background: #e8f0fe; border-left: 4px solid #2e6fba;
             padding: 10px 14px; margin: 12px 0; }
ul.words { font-size: 12px; color: #444; margin: 0 0 4px; padding-left: 18px; }
"""

TIMELINE_HELP = (
    "How to read it: every dot is one frame. Across is when the stub wrote it, up is when the client read it, both in "
    "ms after the stub's first write. Grey dots are the direct path; on the dotted diagonal nothing was added. Dots "
    "stacked vertically arrived in one read (a burst); the height above the diagonal is how late; a flat line means "
    "the proxy held the whole response and let it go at the end."
)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def page(doc: Results, comparisons: Sequence[Comparison] = (), other: Results | None = None) -> str:
    title = page_title(doc)
    body = [f'<h1 class="{"uncertified" if title.startswith("UNCERTIFIED") else ""}">{esc(title)}</h1>']
    if isinstance(doc, MatrixResults):
        body += answer_block(doc)  # the answer first: the headline, the added-TTFT chart, the verdict table
    body += header_block(doc)
    if isinstance(doc, LoadResults):
        body += load_sections(doc)
    else:
        body += matrix_sections(doc)
    if comparisons and other is not None:
        body += compare_section(comparisons, doc, other)
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>\n'
        f"<body>\n{chr(10).join(body)}\n</body></html>\n"
    )


def page_title(doc: Results) -> str:
    if isinstance(doc, LoadResults):
        loop = "open loop" if doc.open_loop else "closed loop"
        return f"tokenpath load: TTFT added per target ({loop})"
    return tables.title(doc)


def _dl(items: Iterable[tuple[str, str]]) -> str:
    return '<dl class="meta">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def header_block(doc: Results) -> list[str]:
    prov = doc.provenance
    host = prov.host
    items = [
        ("tool", esc(f"{prov.tool.name} {prov.tool.version} (results schema {prov.schema_version})")),
        ("measured", esc(prov.created)),
        ("host", esc(f"{host.hostname}, kernel {host.kernel}, {host.cpus} CPUs, {host.machine}, Python {host.python}")),
    ]
    out: list[str] = ['<h2 id="provenance">How this was measured</h2>']
    if isinstance(doc, LoadResults):
        cfg = doc.config
        levels = cfg["rates"] if cfg["loop"] == "open" else cfg["levels"]
        items += [
            (
                "workload",
                esc(
                    f"{cfg['ttft_ms']:g} ms to the first token, a token every {cfg['interval_ms']:g} ms, "
                    f"{cfg['tokens']} tokens; {cfg['loop']} loop at {', '.join(f'{x:g}' for x in levels)}"
                ),
            ),
            (
                "per level",
                esc(
                    f"{cfg['warmup_s']:g} s warm-up, {cfg['duration_s']:g} s measured, {cfg['runs']} runs "
                    f"(merged), {cfg['client_workers']} client and {cfg['stub_workers']} stub processes"
                ),
            ),
            ("floor", "the direct path (client → stub), measured at every level in the same run, interleaved"),
        ]
        if cfg.get("http_version") == "2":  # the client's protocol is a condition: said beside the workload
            items.append(
                (
                    "client",
                    esc(
                        f"HTTP/2, {cfg.get('streams_per_connection', 1)} streams per connection, "
                        f"receive windows {cfg.get('h2_window')}"
                    ),
                )
            )
        out.append(_dl(items))
        unreliable = [r for r in doc.levels if r.unreliable]
        if unreliable:
            out.append(
                f'<p class="banner warn">{len(unreliable)} of {len(doc.levels)} figures are flagged '
                "unreliable; each warning is shown in its row below, with its remedy.</p>"
            )
        out += _targets(doc.targets)
    else:
        exp = doc.experiment
        items += [
            ("experiment", esc(_workload(doc))),
            ("exclusion rule", esc(f"{exp['exclusion']['rule']} (declared before the run)")),
        ]
        out.append(_dl(items))
        out += certification_block(doc.certification)
        out += _targets(doc.proxies)
    if doc.interrupted:
        out.append('<p class="banner bad">Interrupted: rows with fewer runs than planned are partial.</p>')
    skipped: Sequence[PathSkip | TargetSkip] = doc.skipped
    if skipped:
        out.append("<h3>Not measured</h3><ul>")
        out += [f"<li>{esc(_skipped_name(s))}: {esc(s.reason)}</li>" for s in skipped]
        out.append("</ul>")
    return out


def _workload(doc: MatrixResults) -> str:
    """What the streams were. From the stub: what it was asked to send. From a real endpoint the stub's settings
    paced nothing (only certification), so what the direct path measured is shown, with what was asked of it."""
    exp = doc.experiment
    runs = f"{exp['runs']} runs per path and condition"
    upstream = exp.get("upstream")
    if not isinstance(upstream, dict):
        return f"{exp['name']}: {exp['frames']} frames per stream, {runs}, {exp['ttft_ms']:g} ms to the first frame"
    asked = (
        f"{exp['name']}: {upstream.get('origin')}, model {upstream.get('model')}, at most "
        f"{upstream.get('max_tokens')} tokens per stream, {runs}"
    )
    direct = [m for r in doc.rows if r.proxy == "direct" for run in r.raw if run.included and (m := run.metrics)]
    ttfts = [m.ttft_ms for m in direct if m.ttft_ms is not None]
    if not direct or not ttfts:
        return f"{asked}; the direct path measured nothing"
    frames = median([float(m.frames) for m in direct])
    return (
        f"{asked}; measured on the direct path: {frames:g} frames per stream and {median(ttfts):.1f} ms to "
        f"the first token (medians of {len(direct)} streams)"
    )


def _skipped_name(skip: PathSkip | TargetSkip) -> str:
    return skip.path if isinstance(skip, PathSkip) else skip.target


def certification_block(cert: Certification) -> list[str]:
    if cert.passed:
        out = [
            '<p class="banner ok">Certified: before measuring, the instrument showed it streams cleanly on the '
            "direct path and detects both controls (buffer, cork) on every link used.</p>"
        ]
    else:
        forced = " It was measured anyway (--force)." if cert.forced else ""
        out = [
            f'<p class="banner bad">UNCERTIFIED: certification failed, so no figure below can be trusted.{forced}</p>'
        ]
    for where, drift in cert.emitter_drift_ms.items():
        out.append(f"<p>Emitter drift during certification ({esc(where)}): {esc(tables.describe_drift(drift))}.</p>")
    rows = [(c.environment, c.name, "ok" if c.passed else "FAILED", c.evidence) for c in cert.checks]
    if rows:
        out.append("<details><summary>certification checks</summary>")
        out.append(
            _table(
                ("link", "check", "result", "evidence"), rows, classes=["" if r[2] == "ok" else "failed" for r in rows]
            )
        )
        out.append("</details>")
    return out


def _targets(targets: Mapping[str, ProxyInfo] | Mapping[str, TargetInfo]) -> list[str]:
    """One line per proxy: its version, and each variant's effective config folded away."""
    if not targets:
        return []
    out = ['<h3>Versions and effective configs</h3><table class="versions">']
    for name, info in targets.items():
        if isinstance(info, ProxyInfo):
            variants = {_variant_title(variant, v): v.get("config", "") for variant, v in info.variants.items()}
        else:
            variants = {info.variant: info.config or ""}
        configs = "".join(
            f'<details class="inline"><summary>{esc(variant)}</summary><pre>{esc(config)}</pre></details>'
            for variant, config in variants.items()
        )
        out.append(f"<tr><td><b>{esc(name)}</b></td><td>{esc(info.version or 'unknown')}</td><td>{configs}</td></tr>")
    out.append("</table>")
    return out


def _variant_title(variant: str, info: Mapping[str, Any]) -> str:
    """A variant's name with the config line that makes it (proxies/ Variant.line), when it has one."""
    line = info.get("line")
    return f"{variant}: {line}" if line else variant


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], classes: Sequence[str] = ()) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        cells = "".join(f'<td class="num">{esc(c)}</td>' if _numeric(c) else f"<td>{esc(c)}</td>" for c in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _numeric(cell: str) -> bool:
    return bool(cell) and cell.replace(".", "").replace("-", "").replace("/", "").replace(" ", "").isdigit()


def _figure(svg: str | None, caption: str) -> str:
    if svg is None:
        return ""
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def matrix_sections(doc: MatrixResults) -> list[str]:
    out = []
    if doc.kind == "sweep":
        inferred = doc.inferred
        out.append('<h2 id="sweep">What makes it flush</h2>')
        if inferred is not None and inferred.rule:
            out.append(f'<p class="banner warn"><b>{esc(inferred.rule)}</b></p>')
        out.append(f'<p class="lede">{esc(inferred.explanation if inferred else "")}</p>')
        chart = charts.sweep_chart(doc.points or (), inferred)
        out.append(_figure(chart, "Points above 1 frame per read, or above 0 ms, are where the proxy held frames."))
    conditions: dict[Condition, list[MatrixRow]] = {}
    for row in tables.side_by_side(doc.rows):  # a proxy's versions next to each other
        conditions.setdefault(row.condition, []).append(row)
    floors = {f.condition: f for f in doc.floors}
    out.append('<h2 id="results">Results per condition</h2>')
    out.append(f'<p class="lede">{esc(TIMELINE_HELP)}</p>')
    shares = {s.condition: s for s in doc.exclusion_shares}
    overall = shares[None]
    out.append(f'<p class="lede">Exclusions, all conditions: {esc(tables.describe_share(overall))}.</p>')
    note = tables.endpoint_note(doc)
    if note:
        out.append(f'<p class="banner warn">{esc(note)} Certification and the controls ran on the stub.</p>')
    for cond, rows in conditions.items():
        out.append(f"<h3>{esc(cond.label)}</h3>")
        share = shares.get(cond)
        if share is not None:
            out.append(f"<p>{esc(tables.describe_share(share))} under the declared rule.</p>")
        if not cond.endpoint:  # against a real endpoint there is no stub write to plot arrivals against
            out.append(
                _figure(
                    charts.arrival_timeline(rows),
                    "One typical stream per path (the kept run with the median added TTFT), the direct path in grey.",
                )
            )
        floor = floors.get(cond)
        out.append(
            _figure(
                charts.frames_per_read(rows, floor),
                "Median frames per read per path; whiskers span the "
                "kept runs; the green band is the direct path's range (noise).",
            )
        )
        columns = tables.varying_columns(doc.rows)  # the same columns in every condition's table
        headers = [h for h in tables.headers_for(doc.rows) if h != "condition"]
        out.append(
            _table(
                [*headers, "excluded because"],
                [[c for i, c in enumerate(tables.cells_for(r, columns)) if i != 1] + [_exclusions(r)] for r in rows],
                classes=["unreliable" if r.excluded else "" for r in rows],
            )
        )
    for anchor, title, found in (
        ("origin-behaviour", tables.ATTRIBUTION_TITLE, tables.attribution_lines(doc.rows)),
        ("paired", tables.PAIRING_TITLE, tables.pairing_lines(doc.rows)),
    ):
        if found:
            out.append(f'<h2 id="{anchor}">{esc(title)}</h2>')
            out.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in found) + "</ul>")
    return out


def answer_block(doc: MatrixResults) -> list[str]:
    """What a reader came for, above the fold: the headline sentence, the added-TTFT chart, the verdict per path
    with every column explained."""
    figures = headline.path_figures(doc)
    out = [f'<p class="headline" id="headline">{esc(headline.headline(doc))}</p>']
    chart = charts.added_ttft([(f.name, f.added_ms) for f in figures], headline.floor_noise_ms(doc))
    out.append(
        _figure(
            chart,
            "Dark: p50, light: p99 of each path's added TTFT over its kept runs; the green band is the direct "
            "path's own noise (nothing inside it is the path's).",
        )
    )
    out.append('<h2 id="verdicts">Verdict per path</h2>')
    rows = headline.verdict_rows(figures)
    out.append(
        _table(
            [c.header for c in headline.VERDICT_COLUMNS],
            rows,
            classes=["unreliable" if f.holds else "" for f in headline.worst_first(figures)],
        )
    )
    meanings = "".join(
        f"<li><b>{esc(c.header)}</b>: {esc(headline.meaning(c, doc))}</li>" for c in headline.VERDICT_COLUMNS
    )
    out.append(f'<ul class="words">{meanings}</ul><p class="note">Every word as {esc(headline.WORDS)} defines it.</p>')
    return out


def _exclusions(row: MatrixRow) -> str:
    return ", ".join(f"{n} x {reason}" for reason, n in row.exclusions.items()) or "-"


def load_sections(doc: LoadResults) -> list[str]:
    open_loop = doc.open_loop
    unit = "arrivals per second (open loop)" if open_loop else "concurrent streams"
    levels = doc.levels
    out = ['<h2 id="results">Added TTFT against load</h2>']
    if open_loop:
        out.append(
            '<p class="lede">Counted from each stream\'s scheduled start (corrected for coordinated '
            "omission); the uncorrected p99 and the dispatch lag are in the table.</p>"
        )
    out.append(
        _figure(
            charts.percentiles_vs_level(levels, unit),
            "Added TTFT = the client's arrival of the first "
            "token minus the stub's write of it, per stream. Hollow markers: figures flagged unreliable "
            "(see the warnings in the table).",
        )
    )
    http2 = load_table.any_http2(levels)  # the HTTP/2 columns only when some row was measured over it
    cut = load_table.any_cut(levels)  # how streams ended only when one did not end complete
    ws = load_table.any_websocket(levels)  # the upgrades only when some row was carried over WebSocket
    headers = [*load_table.headers(open_loop, http2, cut, ws), "warnings"]
    rows, classes = [], []
    for r in levels:
        warnings = "; ".join(f"{w.kind}: {w.message} (remedy: {w.remedy})" for w in r.warnings)
        rows.append([r.level_label, r.target, *load_table.figures(r, http2, cut, ws), warnings or "-"])
        classes.append("unreliable" if r.unreliable else "")
    out.append(_table(headers, rows, classes))
    lost = [r for r in levels if r.frames_lost or r.frames_out_of_order or r.errors]
    for r in lost:
        out.append(
            f'<p class="banner bad">{esc(r.target)} @ {esc(r.level_label)}: {esc(r.frames_lost)} '
            f"frames lost, {esc(r.frames_out_of_order)} out of order, {esc(r.errors)} errors</p>"
        )
    cdf = charts.added_ttft_cdf(levels, "streams/s" if open_loop else "streams")
    out.append(_figure(cdf, "Fraction of streams whose first token was delayed by at most x ms. Dashed: unreliable."))
    out.append(
        _figure(
            charts.resources_vs_level(levels, unit),
            "CPU and RSS of all the target's processes, "
            "sampled through each level (mean CPU, peak of the median RSS over runs).",
        )
    )
    return out


def compare_section(comparisons: Sequence[Comparison], doc: Results, other: Results) -> list[str]:
    a, b = doc.provenance, other.provenance
    out = ['<h2 id="compare">Compared</h2>']
    out.append(
        _dl(
            [
                ("A (this report)", esc(f"{page_title(doc)}, {a.created} on {a.host.hostname}")),
                ("B (--compare)", esc(f"{page_title(other)}, {b.created} on {b.host.hostname}")),
                (
                    "verdict rule",
                    "a difference counts only where the two runs' ranges do not overlap and it is larger than "
                    "the direct floor of either run; inside the floor it is <i>same</i>, with overlapping "
                    "ranges <i>not distinguishable</i>, whatever the medians say",
                ),
            ]
        )
    )
    rows, classes = [], []
    for c in comparisons:
        rows.append([c.key, c.metric, _fig(c.a), _fig(c.b), "-" if c.ratio is None else f"{c.ratio:.2f}", c.verdict])
        classes.append("unreliable" if c.verdict in ("B higher", "B lower") else "")
    out.append(_table(("row", "figure", "A median [range]", "B median [range]", "B / A", "verdict"), rows, classes))
    return out


def _fig(f: Figure) -> str:
    med = "-" if f.median is None else f"{f.median:.2f}"
    spread = "" if f.low is None else f" [{f.low:.2f} to {f.high:.2f}]"
    return med + spread


def markdown(doc: Results, comparisons: Sequence[Comparison] = ()) -> str:
    if isinstance(doc, LoadResults):
        text = f"# {page_title(doc)}\n\n{load_table.markdown(doc)}"
    else:
        text = tables.markdown(doc)
        if doc.kind == "sweep" and doc.inferred is not None and doc.inferred.rule:
            text += "\n" + md.cell(f"Inferred: {doc.inferred.rule} ({doc.inferred.explanation})") + "\n"
    if comparisons:
        text += "\n## Compared\n\n| row | figure | A | B | B / A | verdict |\n|---|---|---:|---:|---:|---|\n"
        for c in comparisons:
            ratio = "-" if c.ratio is None else f"{c.ratio:.2f}"
            text += md.row([c.key, c.metric, _fig(c.a), _fig(c.b), ratio, c.verdict]) + "\n"
    return text
