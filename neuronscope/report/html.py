"""``report.html``: one self-contained page per run, for people rather than terminals.

The page holds a chart of where the time went (top ops by share), the op table, the hints with
their evidence, the nested regions, the ranks of a multi-process run and, for a comparison, a
chart of the variants with their speedups. It loads nothing from anywhere: styles are inline,
there is no script, and the charts (:mod:`neuronscope.report_charts`) are inline SVG. Every
text is escaped and bounded (:data:`MAX_TEXT_CHARS`); the only links are relative links to files
that exist in the run directory.
"""

from __future__ import annotations

import datetime as _dt
import html
import importlib.metadata
import os
import re
import stat
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuronscope.errors import NeuronscopeError
from neuronscope.export.runs import load
from neuronscope.export.safe_io import held_dir, write_text_at
from neuronscope.report.charts import Charts, device_label
from neuronscope.report.diff_page import comparison_deltas, diff_section
from neuronscope.report.pictures import DRAW_JS, code_text, pictures, plotly_js
from neuronscope.report.trace_view import read_trace_view
from neuronscope.result.comparison import Comparison
from neuronscope.result.hint import NO_FASTER_TEXT, Hint
from neuronscope.result.stats import OpStat, RegionStat
from neuronscope.result.text import render_breakdown
from neuronscope.result.types import ProfileResult
from neuronscope.units import MAX_NAME_CHARS, fmt_us, safe_text, shorten

__all__ = ["OPS_IN_TABLE", "REPORT_FILE", "render_diff_report", "render_report", "write_report"]

REPORT_FILE = "report.html"
#: Rows of the op table under the chart (the full table is in result.json and summary.txt).
OPS_IN_TABLE = 25
#: Longest text (a note, a suggestion, an error) put on the page; names are cut shorter, at
#: MAX_NAME_CHARS. A 50,000-character name made a 4.4 MB page before.
MAX_TEXT_CHARS = 4 * MAX_NAME_CHARS

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
       margin: 0; background: #f5f6f8; color: #1d2330; line-height: 1.45; }
main { max-width: 1360px; margin: 0 auto; padding: 24px 28px 48px; }
header h1 { font-size: 1.6em; margin: 0 0 4px; }
header .meta { color: #5a6372; margin: 0; font-size: 0.92em; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 8px; padding: 16px 20px;
          margin: 18px 0; }
section h2 { font-size: 1.2em; margin: 0 0 10px; }
section h3 { font-size: 1.05em; margin: 14px 0 8px; }
details > summary { cursor: pointer; font-weight: 600; font-size: 1.1em; }
table { border-collapse: collapse; width: 100%; font-size: 0.88em; margin: 8px 0; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eceef2; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.95em; }
.chart { display: block; width: 100%; max-width: 900px; height: auto; margin: 4px 0 8px; }
.note { color: #5a6372; font-size: 0.92em; }
.error { color: #9b1c1c; background: #fdecec; border-color: #f3c1c1; }
.bad { color: #9b1c1c; font-weight: 600; }
.good { color: #1e6b43; }
.pill { display: inline-block; padding: 0 8px; border-radius: 10px; background: #e8eef8; font-size: 0.85em; }
.plot { width: 100%; }
.hint { border-left: 4px solid #4e79a7; background: #f7f9fc; padding: 6px 10px; margin: 8px 0; }
/* names wrap at their <wbr> (code_text), mid-word only where one part is wider than the page */
.hint .loc { overflow-wrap: anywhere; }
td code { overflow-wrap: break-word; }
footer { color: #7a8290; font-size: 0.85em; margin-top: 24px; }
"""


# ---- small helpers -----------------------------------------------------------------------------
def _e(value: Any) -> str:
    """Bounded text made printable by the one sanitiser (:func:`~neuronscope.units.safe_text`;
    a table's line breaks stay), then escaped."""
    return "" if value is None else html.escape(safe_text(value, MAX_TEXT_CHARS, keep="\n\t"))


def _n(value: Any) -> str:
    """An escaped name, bounded at MAX_NAME_CHARS."""
    return "" if value is None else html.escape(safe_text(value, MAX_NAME_CHARS))


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    """An HTML table; cells are escaped unless given as ``_Raw``; columns in ``numeric``
    align right."""
    num = set(numeric)
    head = "".join(f'<th{" class=num" if i in num else ""}>{_e(h)}</th>' for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = "".join(
            f'<td{" class=num" if i in num else ""}>{c.html if isinstance(c, _Raw) else _e(c)}</td>'
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Raw:
    """Markup that a table cell takes as it is (already escaped)."""

    __slots__ = ("html",)

    def __init__(self, markup: str) -> None:
        self.html = markup


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text)[:64] or "_"


# ---- sections ----------------------------------------------------------------------------------
def _when(iso: str | None) -> str | None:
    """'2026-12-02 17:56:50' from an ISO timestamp (as stored), or the text as it is."""
    if not iso:
        return None
    try:
        return _dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _timeline_section(result: ProfileResult, charts: Charts, heading: str, sfx: str) -> str:
    """The device's busy and idle time (the step breakdown), as a chart and its text."""
    bd = result.breakdown
    if not bd:
        return ""
    text = render_breakdown(bd)
    return (
        f'<section id="timeline{sfx}"><{heading}>Device busy and idle</{heading}>'
        + charts.timeline(bd, result.name)
        + f"<pre>{_e(text)}</pre></section>"
    )


def _meta_line(items: list[tuple[str, Any]]) -> str:
    parts = [f"{_e(k)} <b>{_e(v)}</b>" for k, v in items if v not in (None, "")]
    return " · ".join(parts)


def _ops_table(result: ProfileResult) -> str:
    ops = result.ops
    has_device = result.has_device_time
    dev = device_label(result.platform or result.backend)
    total = result.share_total_us
    headers = ["Op", "Calls", "Self CPU", "CPU total"]
    if has_device:
        headers += [f"Self {dev}", f"{dev} total"]
    headers += ["Share", "Input shapes"]
    rows = []
    for o in ops[:OPS_IN_TABLE]:
        row: list[Any] = [_Raw(code_text(o.name, MAX_NAME_CHARS)), o.calls, fmt_us(o.self_cpu_us), fmt_us(o.cpu_total_us)]
        if has_device:
            row += [fmt_us(o.self_device_us), fmt_us(o.device_total_us)]
        row += [_pct(o.time_us, total), _shapes(o)]
        rows.append(row)
    numeric = list(range(1, len(headers) - 1))
    text = _table(headers, rows, numeric)
    if len(ops) > OPS_IN_TABLE:
        rest = ops[OPS_IN_TABLE:]
        text += f'<p class="note">… {len(rest)} more ops, {_e(fmt_us(sum(o.time_us for o in rest)))} together (all of them are in result.json).</p>'
    return text


def _shapes(op: OpStat) -> str:
    if not op.input_shapes:
        return ""
    text = str(op.input_shapes[0])
    if len(op.input_shapes) > 1:
        text += f" (+{len(op.input_shapes) - 1})"
    return text if len(text) <= 60 else text[:57] + "..."


def _hints_section(hints: list[Hint], heading: str = "h2", sfx: str = "") -> str:
    if not hints:
        return (
            f'<section id="hints{sfx}"><{heading}>Hints</{heading}><p class="note">No hints: nothing to fuse and no '
            "compile trouble was found in this capture.</p></section>"
        )
    rows = []
    for i, h in enumerate(hints, 1):
        saving = h.saving_text
        if h.verified_saving_us is not None:
            saving += f" (measured {fmt_us(h.verified_saving_us)})"
        rows.append(
            [
                i,
                _Raw(f'<span class="pill">{_e(h.kind)}</span> <b>{_n(h.pattern)}</b>'),
                _Raw(" → ".join(code_text(o, MAX_NAME_CHARS) for o in h.ops) or "-"),
                h.calls,
                fmt_us(h.time_us),
                saving,
                NO_FASTER_TEXT if h.expects_no_saving else h.suggestion,
                _Raw(code_text(h.location, MAX_TEXT_CHARS) if h.location else "-"),
            ]
        )
    table = _table(
        ["#", "Hint", "Ops", "Calls", "Time", "Est. saving", "Suggestion", "Location"], rows, numeric=[0, 3, 4, 5]
    )
    return f'<section id="hints{sfx}"><{heading}>Hints (largest saving first)</{heading}>{table}</section>'


def _regions_table(regions: dict[str, RegionStat]) -> str:
    rows = []
    for name, reg in sorted(regions.items(), key=lambda kv: kv[1].time_us, reverse=True):
        top = reg.ops[0].name if reg.ops else "-"
        rows.append(
            [
                _Raw(f"<b>{_n(name)}</b>"),
                reg.calls,
                fmt_us(reg.time_us),
                fmt_us(reg.device_time_us),
                len(reg.ops),
                _Raw(code_text(top, MAX_NAME_CHARS)),
            ]
        )
    return _table(["Region", "Calls", "Time (incl.)", "Device time", "Distinct ops", "Top op"], rows, numeric=[1, 2, 3, 4])


def _ranks_table(ranks: list[dict[str, Any]]) -> str:
    rows = [
        [r.get("rank"), fmt_us(r.get("wall_time_us")), fmt_us(r.get("total_op_us")), _Raw(code_text(r.get('top_op') or '-', MAX_NAME_CHARS))]
        for r in ranks
    ]
    return _table(["Rank", "Wall", "Op time", "Top op"], rows, numeric=[0, 1, 2])


def _repeat_regions(result: ProfileResult) -> tuple[dict[str, RegionStat], list[RegionStat]]:
    """(nested regions, compare()'s per-call ranges ``name#i`` in order)."""
    pattern = re.compile(re.escape(result.name) + r"#(\d+)$")
    nested: dict[str, RegionStat] = {}
    repeats: list[tuple[int, RegionStat]] = []
    for name, reg in result.regions.items():
        if name == result.name:
            continue
        m = pattern.match(name)
        if m:
            repeats.append((int(m.group(1)), reg))
        else:
            nested[name] = reg
    return nested, [reg for _, reg in sorted(repeats, key=lambda t: t[0])]


def _result_sections(result: ProfileResult, charts: Charts, heading: str = "h2", sfx: str = "") -> list[str]:
    parts: list[str] = []
    if result.error:
        parts.append(f'<section class="error"><{heading}>Error</{heading}><p><code>{_e(result.error)}</code></p></section>')
    kind = f"self {device_label(result.platform or result.backend)} time" if result.has_device_time else "self CPU time"
    time_html = [f'<section id="time{sfx}"><{heading}>Where the time went</{heading}>']
    if result.ops:
        time_html.append(f'<p class="note">Ops ranked by {kind}, summed over the capture.</p>')
        time_html.append(charts.ops(result))
        time_html.append(_ops_table(result))
    else:
        time_html.append('<p class="note">No ops were recorded.</p>')
    if result.device_unattributed_us:
        time_html.append(f'<p class="note">Device time launched outside any op: {_e(fmt_us(result.device_unattributed_us))}.</p>')
    time_html.append("</section>")
    parts.append("".join(time_html))
    parts.append(_timeline_section(result, charts, heading, sfx))
    parts.append(_hints_section(result.hints, heading, sfx))
    nested, repeats = _repeat_regions(result)
    if repeats:
        times = ", ".join(fmt_us(r.device_time_us if result.has_device_time and r.device_time_us is not None else r.time_us) for r in repeats)
        parts.append(f'<section id="calls{sfx}"><{heading}>Measured calls</{heading}><p>{len(repeats)} calls: {_e(times)}</p></section>')
    if nested:
        parts.append(f'<section id="regions{sfx}"><{heading}>Nested regions</{heading}>{_regions_table(nested)}</section>')
    if result.ranks:
        parts.append(
            f'<section id="ranks{sfx}"><{heading}>Ranks</{heading}>'
            + f'<p class="note">{len(result.ranks)} ranks of world size {_e(result.world_size)}.</p>'
            + charts.ranks(result.ranks)
            + _ranks_table(result.ranks)
            + "</section>"
        )
    notes = list(result.notes)
    if result.skipped_calls:
        notes.append(f"{result.skipped_calls} call(s) ran uncaptured while another capture was running")
    if notes:
        parts.append(f'<section id="notes{sfx}"><{heading}>Notes</{heading}><ul>' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul></section>")
    return parts


def _run_files(run_dir: str) -> list[str]:
    """The regular files of a run directory (no links, nothing hidden, not the report itself)."""
    try:
        entries = sorted(os.scandir(run_dir), key=lambda e: e.name)
    except OSError:
        return []
    names = []
    for entry in entries:
        try:
            regular = stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)
        except OSError:
            continue
        if regular and not entry.name.startswith(".") and entry.name != REPORT_FILE:
            names.append(entry.name)
    return names


def _file_link(name: str) -> str:
    """A relative link to a file beside the report: './' and percent-encoding keep a name such
    as 'javascript:alert(1)' a file name, never a URL scheme."""
    href = "./" + urllib.parse.quote(name, safe="")
    return f'<a href="{html.escape(href)}"><code>{_n(name)}</code></a>'


def _files_section(run_dir: str | None, artifacts: dict[str, Any]) -> str:
    if not run_dir:
        return ""
    names = _run_files(run_dir)
    if not names:
        return ""
    items = "".join(f"<li>{_file_link(n)}</li>" for n in names[:200])
    more = f"<li>… and {len(names) - 200} more</li>" if len(names) > 200 else ""
    return (
        '<section id="files"><h2>Files in this run</h2>'
        f'<p class="note">Run directory <code>{_e(run_dir)}</code>. Open the traces in Perfetto '
        "(ui.perfetto.dev) or TensorBoard; reopen the run with <code>neuronscope show</code>.</p>"
        f"<ul>{items}{more}</ul></section>"
    )


def _version() -> str:
    """neuronscope's version from the installed package's metadata (the package root, which
    defines ``__version__``, is the last stage and imports this one)."""
    try:
        return importlib.metadata.version("neuronscope")
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown: not installed)"


def _page(title: str, header: str, body: list[str]) -> str:
    scripts = ""
    if any('data-plot="' in p for p in body):
        library = plotly_js()
        if library is None:
            header += (
                '<p class="note">The pictures need plotly (<code>pip install plotly</code>), which is not '
                "installed here: the tables and charts below hold the same figures.</p>"
            )
        else:
            scripts = f"<script>{library}</script>\n<script>{DRAW_JS}</script>\n"

    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + header
        + "\n".join(p for p in body if p)
        + f"\n<footer>Written by neuronscope {_e(_version())} on {_e(now)}. This page is self-contained and opens offline.</footer>\n"
        + "</main>\n"
        + scripts
        + "</body>\n</html>\n"
    )


def _render_result(result: ProfileResult, charts: Charts) -> str:
    meta = _meta_line(
        [
            ("backend", result.backend),
            ("status", result.status),
            ("wall", fmt_us(result.wall_time_us)),
            ("rank", None if result.rank is None else f"{result.rank}/{result.world_size}"),
            ("device", result.device_name),
            ("started", _when(result.started_at)),
            ("host", result.host),
            ("torch", result.torch_version),
        ]
    )
    header = f"<header><h1>neuronscope: {_n(result.name)}</h1><p class=\"meta\">{meta}</p></header>\n"
    view = read_trace_view(result.run_dir, {m.name: m.type for m in result.modules})
    body = [pictures(result, view), *_result_sections(result, charts)]
    body.append(_files_section(result.run_dir, result.artifacts))
    return _page(f"neuronscope: {shorten(result.name, MAX_NAME_CHARS)}", header, body)


def _comparison_table(cmp: Comparison) -> str:
    rows = []
    for r in cmp.rows:
        match = "" if r.outputs_match is None else ("yes" if r.outputs_match else "NO")
        rows.append(
            [
                _Raw(f"<b>{_n(r.label)}</b>"),
                fmt_us(r.time_us),
                "" if r.spread_us is None else f"±{fmt_us(r.spread_us)}",
                r.repeats,
                r.op_count,
                _Raw(code_text(r.top_op or '-', MAX_NAME_CHARS)),
                r.speedup_text(cmp.rows[0]),
                _Raw(f'<span class="{"bad" if r.outputs_match is False else "good"}">{_e(match)}</span>'),
                r.top_hint or "",
                "" if r.warmup_s is None else f"{r.warmup_s:.2f} s",
            ]
        )
    return _table(
        ["Variant", "Time", "Spread", "Calls", "Ops per call", "Top op", "Speedup", "Outputs agree", "Top hint", "Warm-up"],
        rows,
        numeric=[1, 2, 3, 4, 6, 9],
    )


def _render_comparison(cmp: Comparison, charts: Charts) -> str:
    meta = _meta_line(
        [
            ("backend", cmp.backend),
            ("variants", len(cmp.rows)),
            ("started", _when(cmp.started_at)),
        ]
    )
    header = f"<header><h1>neuronscope compare: {_n(cmp.name)}</h1><p class=\"meta\">{meta}</p></header>\n"
    notes = "".join(f"<li>{_e(n)}</li>" for n in cmp.notes)
    body = [
        '<section id="comparison"><h2>Variants</h2>'
        + '<p class="note">Each variant ran on the same arguments, warmed up first (compilation is '
        "in the warm-up, not in the time); time is the median per call (device time where the "
        "backend has it), ops are those dispatched per call.</p>"
        + charts.variants(cmp)
        + _comparison_table(cmp)
        + (f'<ul class="bad">{notes}</ul>' if notes else "")
        + "</section>",
        comparison_deltas(cmp),
    ]
    for label, result in cmp.results.items():
        inner = "".join(_result_sections(result, charts, heading="h3", sfx=f"-{_slug(label)}"))
        body.append(
            f'<section id="variant-{_slug(label)}"><details open><summary>Variant {_n(label)}: '
            f"{_e(fmt_us(cmp.row(label).time_us) if any(r.label == label for r in cmp.rows) else '')}</summary>"
            f"{inner}</details></section>"
        )
    body.append(_files_section(cmp.run_dir, {}))
    return _page(f"neuronscope compare: {shorten(cmp.name, MAX_NAME_CHARS)}", header, body)


def render_diff_report(d: dict[str, Any]) -> str:
    """The page of a diff (:func:`~neuronscope.report.diff.diff_results`): what got slower or
    faster, modules and ops, in pictures."""
    a, b = d["a"], d["b"]
    header = (
        f"<header><h1>neuronscope diff: {_n(a['name'])} → {_n(b['name'])}</h1><p class=\"meta\">"
        f"A total {_e(fmt_us(a['total_us']))}, B total {_e(fmt_us(b['total_us']))}</p></header>\n"
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in d.get("notes") or [])
    body = ['<section id="changes"><h2>What changed, in pictures</h2>' + diff_section(d) + (f'<ul class="note">{notes}</ul>' if notes else "") + "</section>"]
    return _page(f"neuronscope diff: {shorten(a['name'], MAX_NAME_CHARS)}", header, body)


def render_report(obj: ProfileResult | Comparison) -> str:
    """The HTML page of a result or comparison, as a string (needs matplotlib)."""
    charts = Charts()
    if isinstance(obj, Comparison):
        return _render_comparison(obj, charts)
    if isinstance(obj, ProfileResult):
        return _render_result(obj, charts)
    raise NeuronscopeError(f"cannot report on a {type(obj).__name__}; pass a run directory")


def write_report(run_dir: str | Path | ProfileResult | Comparison) -> Path:
    """Write ``report.html`` into the run directory and return its path.

    ``run_dir`` is an exported run (its directory or ``result.json``), or a result object that
    was exported. Raises :class:`NeuronscopeError` for a path that is not a readable run, and
    when matplotlib is missing (``pip install 'neuronscope[report]'``).
    """
    if isinstance(run_dir, (ProfileResult, Comparison)):
        if not run_dir.run_dir:
            raise NeuronscopeError("this result was not exported (run_dir is None); nowhere to write report.html")
        obj: ProfileResult | Comparison = run_dir
        target = Path(run_dir.run_dir)
    else:
        obj = load(run_dir)
        assert obj.run_dir is not None
        target = Path(obj.run_dir)
    path = target / REPORT_FILE
    # The directory is held open from before the drawing to the rename: one swapped for
    # another (or for a link) meanwhile does not get the page.
    try:
        with held_dir(target) as fd:
            write_text_at(fd, REPORT_FILE, render_report(obj))
    except OSError as exc:
        raise NeuronscopeError(f"{path}: cannot write the report ({exc.strerror or exc})") from exc
    return path

