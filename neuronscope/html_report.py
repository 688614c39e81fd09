"""``report.html``: one self-contained page per run, for people rather than terminals.

The page holds a chart of where the time went (top ops by share), the op table, the hints with
their evidence, the nested regions, the ranks of a multi-process run and, for a comparison, a
chart of the variants with their speedups. It loads nothing from anywhere: styles are inline,
there is no script, and the charts are inline SVG drawn with matplotlib (an optional extra,
imported only here, through its ``Figure`` API so that the user's pyplot backend is never
touched). Glyphs are drawn as paths, so the charts look the same without the fonts installed.
"""

from __future__ import annotations

import datetime as _dt
import html
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import NeuronscopeError
from .export import atomic_write_text, load
from .result import Comparison, Hint, OpStat, ProfileResult, RegionStat, _fmt_us

__all__ = ["OPS_IN_TABLE", "REPORT_FILE", "TOP_OPS_IN_CHART", "render_report", "write_report"]

REPORT_FILE = "report.html"
#: Bars in the "where the time went" chart; the rest become one "other" bar. Ten keeps the
#: labels readable and covers nearly all of the time in a typical capture.
TOP_OPS_IN_CHART = 10
#: Rows of the op table under the chart (the full table is in result.json and summary.txt).
OPS_IN_TABLE = 25
#: Longest op or region name drawn in a chart; longer ones (compiled graphs) are cut.
CHART_LABEL_CHARS = 48

_ACCENT = "#3b6fb6"
_GREY = "#a7adb5"
_FASTER = "#2e8b57"
_SLOWER = "#c0504d"

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
       margin: 0; background: #f5f6f8; color: #1d2330; line-height: 1.45; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 48px; }
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
footer { color: #7a8290; font-size: 0.85em; margin-top: 24px; }
"""


# ---- small helpers -----------------------------------------------------------------------------
def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


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
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text) or "_"


def _device_label(backend: str | None) -> str:
    return {"neuron": "NEURON", "cuda": "CUDA", "rocm": "HIP", "mtia": "MTIA"}.get(backend or "", "device")


def _plain(text: str) -> str:
    """Text that matplotlib draws as it is: a pair of '$' would start its mathtext."""
    return text.replace("$", r"\$")


def _chart_label(text: str) -> str:
    text = text if len(text) <= CHART_LABEL_CHARS else text[: CHART_LABEL_CHARS - 1] + "…"
    return _plain(text)


#: Steps drawn one by one in the timeline chart (the rest are in result.json).
TIMELINE_STEPS = 24


# ---- charts ------------------------------------------------------------------------------------
class _Charts:
    """Draws charts as inline SVG. One instance per page, so that every element id in every
    chart is unique on the page (inline SVGs share the document's id space)."""

    def __init__(self) -> None:
        try:
            import matplotlib
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise NeuronscopeError(
                "neuronscope report draws its charts with matplotlib, which is not installed; "
                "pip install 'neuronscope[report]'"
            ) from exc
        self._matplotlib = matplotlib
        self._figure = Figure
        self._canvas = FigureCanvasAgg
        self._count = 0

    def _svg(self, fig: Any, title: str) -> str:
        buf = io.StringIO()
        with self._matplotlib.rc_context({"svg.fonttype": "path", "svg.image_inline": True}):
            fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        self._count += 1
        return _inline_svg(buf.getvalue(), prefix=f"ns{self._count}-", title=title)

    def _bars(
        self,
        labels: list[str],
        values: list[float],
        texts: list[str],
        colors: list[str],
        title: str,
        xlabel: str,
        errors: list[float] | None = None,
    ) -> str:
        height = 0.9 + 0.34 * len(labels)
        fig = self._figure(figsize=(8.6, height), dpi=100)
        self._canvas(fig)
        ax = fig.add_subplot(1, 1, 1)
        ypos = list(range(len(labels)))
        ax.barh(
            ypos,
            values,
            color=colors,
            height=0.62,
            xerr=errors,
            error_kw={"ecolor": "#444", "capsize": 3, "elinewidth": 1},
        )
        ax.set_yticks(ypos)
        ax.set_yticklabels([_chart_label(t) for t in labels], fontsize=9)
        ax.invert_yaxis()
        top = max([v + (errors[i] if errors else 0.0) for i, v in enumerate(values)] + [0.0])
        ax.set_xlim(0, top * 1.28 if top > 0 else 1.0)
        for i, (y, v, t) in enumerate(zip(ypos, values, texts)):
            end = v + (errors[i] if errors else 0.0)  # right of the whisker, not across it
            ax.text(end + top * 0.015, y, _plain(t), va="center", fontsize=8.5, color="#1d2330")
        ax.set_title(_plain(title), fontsize=10.5, loc="left")
        ax.set_xlabel(_plain(xlabel), fontsize=9)
        ax.tick_params(axis="x", labelsize=8.5)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.grid(axis="x", color="#e3e6ea", linewidth=0.8)
        ax.set_axisbelow(True)
        return self._svg(fig, title)

    def ops(self, result: ProfileResult) -> str:
        """Top ops by share of the total op time; the rest as one grey bar."""
        ops = result.ops
        total = result.share_total_us
        if not ops or total <= 0:
            return ""
        shown = ops[:TOP_OPS_IN_CHART]
        rest = ops[TOP_OPS_IN_CHART:]
        labels = [o.name for o in shown]
        times = [o.time_us for o in shown]
        colors = [_ACCENT] * len(shown)
        if rest:
            labels.append(f"other ({len(rest)} ops)")
            times.append(sum(o.time_us for o in rest))
            colors.append(_GREY)
        shares = [100.0 * t / total for t in times]
        texts = [f"{s:.1f}%  {_fmt_us(t)}" for s, t in zip(shares, times)]
        kind = f"self {_device_label(result.platform or result.backend)} time" if result.has_device_time else "self CPU time"
        title = f"Where the time went: {result.name} (share of {_fmt_us(total)} {kind})"
        return self._bars(labels, shares, texts, colors, title, "share of total op time (%)")

    def timeline(self, bd: dict[str, Any], name: str) -> str:
        """The device's timeline: how busy each kind of work kept it, bin by bin, with the step
        starts; under it, each step's window split into busy and idle by cause."""
        chart = bd.get("chart") or {}
        lanes = [(k, chart.get(k) or []) for k in ("compute", "communication", "memory")]
        if not any(v for _, v in lanes):
            return ""
        steps = (bd.get("steps") or [])[:TIMELINE_STEPS]
        fig = self._figure(figsize=(8.6, 2.2 + 0.28 * len(steps)), dpi=100)
        self._canvas(fig)
        grid = fig.add_gridspec(2, 1, height_ratios=[1.6, 0.5 + 0.28 * len(steps)], hspace=0.55)
        ax = fig.add_subplot(grid[0])
        unit, scale = _unit(float(bd.get("window_us") or 1.0))
        width = float(chart.get("bin_us") or 0.0) / scale
        colors = {"compute": _ACCENT, "communication": "#c77c02", "memory": "#6b8e23"}
        for i, (key, vals) in enumerate(lanes):
            xs = [j * width for j in range(len(vals) + 1)]
            ys = [i + 0.85 * v for v in vals] + [i + 0.85 * (vals[-1] if vals else 0.0)]
            ax.fill_between(xs, i, ys, step="post", color=colors[key], linewidth=0)
        for start in chart.get("step_starts_us") or []:
            ax.axvline(start / scale, color=_GREY, linewidth=0.8, linestyle=":")
        ax.set_yticks([i + 0.4 for i in range(len(lanes))])
        ax.set_yticklabels([k for k, _ in lanes], fontsize=9)
        ax.set_xlim(0, width * max(len(v) for _, v in lanes))
        ax.set_xlabel(f"time from the first device event ({unit}); dotted: step starts", fontsize=9)
        ax.set_title(_plain(f"Device timeline: {name} (busy {bd.get('busy_pct', 0):.1f}%)"), fontsize=10.5, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if steps:
            bx = fig.add_subplot(grid[1])
            parts = [("busy", "busy_us", _ACCENT), ("host not launching", "idle_host_us", _SLOWER),
                     ("blocked in sync", "idle_sync_us", "#8e44ad"), ("other idle", "idle_other_us", _GREY)]
            left = [0.0] * len(steps)
            for label, key, color in parts:
                vals = [100.0 * s[key] / s["window_us"] if s["window_us"] else 0.0 for s in steps]
                bx.barh(range(len(steps)), vals, left=left, color=color, label=label, height=0.7)
                left = [a + b for a, b in zip(left, vals)]
            bx.set_yticks(list(range(len(steps))))
            bx.set_yticklabels([_chart_label(s["name"]) for s in steps], fontsize=8.5)
            bx.invert_yaxis()
            bx.set_xlim(0, 100)
            bx.set_xlabel("share of the step's device window (%)", fontsize=9)
            bx.legend(fontsize=8, ncol=4, loc="upper left", bbox_to_anchor=(0, -0.35 - 0.5 / max(len(steps), 1)), frameon=False)
            for side in ("top", "right"):
                bx.spines[side].set_visible(False)
        return self._svg(fig, f"Device timeline of {name}")

    def variants(self, cmp: Comparison) -> str:
        """Median time per call of each variant, with its spread and speedup."""
        rows = cmp.rows
        if not rows:
            return ""
        base = rows[0]
        colors = [_GREY] + [_FASTER if r.speedup >= 1.0 else _SLOWER for r in rows[1:]]
        unit, scale = _unit(max(r.time_us for r in rows))
        errors = [(r.spread_us or 0.0) / scale for r in rows]
        texts = [f"{_fmt_us(r.time_us)}   {r.speedup:.2f}x" for r in rows]
        title = f"{cmp.name}: time per call (median), speedup against {base.label!r}"
        return self._bars(
            [r.label for r in rows],
            [r.time_us / scale for r in rows],
            texts,
            colors,
            title,
            f"time per call ({unit}); whiskers: ± half the interquartile range",
            errors=errors if any(errors) else None,
        )

    def ranks(self, ranks: list[dict[str, Any]]) -> str:
        """Wall time per rank; the slowest rank stands out."""
        walls = [float(r.get("wall_time_us") or 0.0) for r in ranks]
        if not walls:
            return ""
        slowest = max(walls)
        colors = [_SLOWER if w == slowest and len(walls) > 1 else _ACCENT for w in walls]
        unit, scale = _unit(slowest)
        return self._bars(
            [f"rank {r.get('rank')}" for r in ranks],
            [w / scale for w in walls],
            [_fmt_us(w) for w in walls],
            colors,
            "Wall time per rank (the slowest in red)" if len(walls) > 1 else "Wall time per rank",
            f"wall time ({unit})",
        )


def _unit(largest_us: float) -> tuple[str, float]:
    """The axis unit for times up to ``largest_us``, and microseconds per unit."""
    if largest_us >= 1e6:
        return "s", 1e6
    if largest_us >= 1e3:
        return "ms", 1e3
    return "us", 1.0


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^")]+)')


def _inline_svg(svg: str, prefix: str, title: str) -> str:
    """Make matplotlib's SVG file fit inside an HTML page: no XML prologue, DOCTYPE or
    metadata (which carry external URLs), ids unique to this chart, and a width that follows
    the page."""
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
    svg = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = _REF.sub(lambda m: f"{m.group(1)}{prefix}{m.group(2)}", svg)
    head_end = svg.index(">")
    head = svg[:head_end]
    head = re.sub(r'\s(width|height)="[^"]*"', "", head, count=2)
    head = f'<svg class="chart" role="img" aria-label="{_e(title)}"' + head[len("<svg") :]
    return head + svg[head_end:] + "\n"


# ---- sections ----------------------------------------------------------------------------------
def _when(iso: str | None) -> str | None:
    """'2026-12-02 17:56:50' from an ISO timestamp (as stored), or the text as it is."""
    if not iso:
        return None
    try:
        return _dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _meta_line(items: list[tuple[str, Any]]) -> str:
    parts = [f"{_e(k)} <b>{_e(v)}</b>" for k, v in items if v not in (None, "")]
    return " · ".join(parts)


def _ops_table(result: ProfileResult) -> str:
    ops = result.ops
    has_device = result.has_device_time
    dev = _device_label(result.platform or result.backend)
    total = result.share_total_us
    headers = ["Op", "Calls", "Self CPU", "CPU total"]
    if has_device:
        headers += [f"Self {dev}", f"{dev} total"]
    headers += ["Share", "Input shapes"]
    rows = []
    for o in ops[:OPS_IN_TABLE]:
        row: list[Any] = [_Raw(f"<code>{_e(o.name)}</code>"), o.calls, _fmt_us(o.self_cpu_us), _fmt_us(o.cpu_total_us)]
        if has_device:
            row += [_fmt_us(o.self_device_us), _fmt_us(o.device_total_us)]
        row += [_pct(o.time_us, total), _shapes(o)]
        rows.append(row)
    numeric = list(range(1, len(headers) - 1))
    text = _table(headers, rows, numeric)
    if len(ops) > OPS_IN_TABLE:
        rest = ops[OPS_IN_TABLE:]
        text += f'<p class="note">… {len(rest)} more ops, {_e(_fmt_us(sum(o.time_us for o in rest)))} together (all of them are in result.json).</p>'
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
        saving = _fmt_us(h.est_saving_us)
        if h.verified_saving_us is not None:
            saving += f" (measured {_fmt_us(h.verified_saving_us)})"
        rows.append(
            [
                i,
                _Raw(f'<span class="pill">{_e(h.kind)}</span> <b>{_e(h.pattern)}</b>'),
                _Raw(" → ".join(f"<code>{_e(o)}</code>" for o in h.ops) or "-"),
                h.calls,
                _fmt_us(h.time_us),
                saving,
                h.suggestion,
                _Raw(f"<code>{_e(h.location)}</code>" if h.location else "-"),
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
                _Raw(f"<b>{_e(name)}</b>"),
                reg.calls,
                _fmt_us(reg.time_us),
                _fmt_us(reg.device_time_us),
                len(reg.ops),
                _Raw(f"<code>{_e(top)}</code>"),
            ]
        )
    return _table(["Region", "Calls", "Time (incl.)", "Device time", "Distinct ops", "Top op"], rows, numeric=[1, 2, 3, 4])


def _ranks_table(ranks: list[dict[str, Any]]) -> str:
    rows = [
        [r.get("rank"), _fmt_us(r.get("wall_time_us")), _fmt_us(r.get("total_op_us")), _Raw(f"<code>{_e(r.get('top_op') or '-')}</code>")]
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


def _result_sections(result: ProfileResult, charts: _Charts, heading: str = "h2", sfx: str = "") -> list[str]:
    parts: list[str] = []
    if result.error:
        parts.append(f'<section class="error"><{heading}>Error</{heading}><p><code>{_e(result.error)}</code></p></section>')
    kind = f"self {_device_label(result.platform or result.backend)} time" if result.has_device_time else "self CPU time"
    time_html = [f'<section id="time{sfx}"><{heading}>Where the time went</{heading}>']
    if result.ops:
        time_html.append(f'<p class="note">Ops ranked by {kind}, summed over the capture.</p>')
        time_html.append(charts.ops(result))
        time_html.append(_ops_table(result))
    else:
        time_html.append('<p class="note">No ops were recorded.</p>')
    if result.device_unattributed_us:
        time_html.append(f'<p class="note">Device time launched outside any op: {_e(_fmt_us(result.device_unattributed_us))}.</p>')
    time_html.append("</section>")
    parts.append("".join(time_html))
    parts.append(_timeline_section(result, charts, heading, sfx))
    parts.append(_hints_section(result.hints, heading, sfx))
    nested, repeats = _repeat_regions(result)
    if repeats:
        times = ", ".join(_fmt_us(r.device_time_us if result.has_device_time and r.device_time_us is not None else r.time_us) for r in repeats)
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


def _timeline_section(result: ProfileResult, charts: _Charts, heading: str, sfx: str) -> str:
    """The device's busy and idle time (the step breakdown), as a chart and its text."""
    bd = result.breakdown
    if not bd:
        return ""
    from .report import render_breakdown

    text = render_breakdown(bd)
    return (
        f'<section id="timeline{sfx}"><{heading}>Device busy and idle</{heading}>'
        + charts.timeline(bd, result.name)
        + f"<pre>{_e(text)}</pre></section>"
    )


def _files_section(run_dir: str | None, artifacts: dict[str, Any]) -> str:
    if not run_dir:
        return ""
    base = Path(run_dir)
    names = [p.name for p in sorted(base.iterdir()) if p.is_file() and not p.name.startswith(".")] if base.is_dir() else []
    names = [n for n in names if n != REPORT_FILE]
    if not names:
        return ""
    items = "".join(f'<li><a href="{_e(n)}"><code>{_e(n)}</code></a></li>' for n in names)
    return (
        '<section id="files"><h2>Files in this run</h2>'
        f'<p class="note">Run directory <code>{_e(run_dir)}</code>. Open the traces in Perfetto '
        "(ui.perfetto.dev) or TensorBoard; reopen the run with <code>neuronscope show</code>.</p>"
        f"<ul>{items}</ul></section>"
    )


def _page(title: str, header: str, body: list[str]) -> str:
    from . import __version__

    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + header
        + "\n".join(p for p in body if p)
        + f"\n<footer>Written by neuronscope {_e(__version__)} on {_e(now)}. This page is self-contained and opens offline.</footer>\n"
        + "</main>\n</body>\n</html>\n"
    )


def _render_result(result: ProfileResult, charts: _Charts) -> str:
    meta = _meta_line(
        [
            ("backend", result.backend),
            ("status", result.status),
            ("wall", _fmt_us(result.wall_time_us)),
            ("rank", None if result.rank is None else f"{result.rank}/{result.world_size}"),
            ("device", result.device_name),
            ("started", _when(result.started_at)),
            ("host", result.host),
            ("torch", result.torch_version),
        ]
    )
    header = f"<header><h1>neuronscope: {_e(result.name)}</h1><p class=\"meta\">{meta}</p></header>\n"
    body = _result_sections(result, charts)
    body.append(_files_section(result.run_dir, result.artifacts))
    return _page(f"neuronscope: {result.name}", header, body)


def _comparison_table(cmp: Comparison) -> str:
    rows = []
    for r in cmp.rows:
        match = "" if r.outputs_match is None else ("yes" if r.outputs_match else "NO")
        rows.append(
            [
                _Raw(f"<b>{_e(r.label)}</b>"),
                _fmt_us(r.time_us),
                "" if r.spread_us is None else f"±{_fmt_us(r.spread_us)}",
                r.repeats,
                r.op_count,
                _Raw(f"<code>{_e(r.top_op or '-')}</code>"),
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


def _render_comparison(cmp: Comparison, charts: _Charts) -> str:
    meta = _meta_line(
        [
            ("backend", cmp.backend),
            ("variants", len(cmp.rows)),
            ("started", _when(cmp.started_at)),
        ]
    )
    header = f"<header><h1>neuronscope compare: {_e(cmp.name)}</h1><p class=\"meta\">{meta}</p></header>\n"
    notes = "".join(f"<li>{_e(n)}</li>" for n in cmp.notes)
    body = [
        '<section id="comparison"><h2>Variants</h2>'
        + '<p class="note">Each variant ran on the same arguments, warmed up first (compilation is '
        "in the warm-up, not in the time); time is the median per call (device time where the "
        "backend has it), ops are those dispatched per call.</p>"
        + charts.variants(cmp)
        + _comparison_table(cmp)
        + (f'<ul class="bad">{notes}</ul>' if notes else "")
        + "</section>"
    ]
    for label, result in cmp.results.items():
        inner = "".join(_result_sections(result, charts, heading="h3", sfx=f"-{_slug(label)}"))
        body.append(
            f'<section id="variant-{_slug(label)}"><details open><summary>Variant {_e(label)}: '
            f"{_e(_fmt_us(cmp.row(label).time_us) if any(r.label == label for r in cmp.rows) else '')}</summary>"
            f"{inner}</details></section>"
        )
    body.append(_files_section(cmp.run_dir, {}))
    return _page(f"neuronscope compare: {cmp.name}", header, body)


def render_report(obj: ProfileResult | Comparison) -> str:
    """The HTML page of a result or comparison, as a string (needs matplotlib)."""
    charts = _Charts()
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
    page = render_report(obj)
    path = target / REPORT_FILE
    try:
        atomic_write_text(path, page)
    except OSError as exc:
        raise NeuronscopeError(f"{path}: cannot write the report ({exc.strerror or exc})") from exc
    return path

