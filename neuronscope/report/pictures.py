"""The report's first screen: pictures of where the time and memory went, drawn by plotly.js.

An icicle of the module tree (click a module to zoom into it, hover for its figures), a
timeline of the capture (threads, device streams, module levels, regions and steps; ops
coloured by the module they ran in), memory over time with its peak and what held it, and the
hints on the modules whose code they are about, their locations in full.

plotly.js is inlined from the ``plotly`` Python package (its ``package_data``), so the page
opens offline; where plotly is not installed the report keeps its tables and static charts
and says how to get the pictures. Every text handed to plotly is HTML-escaped (plotly renders
a few tags in labels; escaped, a hostile name shows as text), and the figures' JSON sits in
``<script type="application/json">`` blocks with ``<``, ``>`` and ``&`` written as escapes, so
nothing in a name can end the block.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from neuronscope.report.trace_view import TraceView
from neuronscope.units import MAX_NAME_CHARS, fmt_us, safe_text

if TYPE_CHECKING:
    from neuronscope.result.types import ProfileResult

__all__ = ["code_text", "hints_on_modules", "page_text", "pictures", "plot_block", "plot_layout", "plotly_js"]

#: Colours of the timeline's module classes, costliest first (Tableau 10, then 10 more).
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6", "#8cd17d", "#b6992d", "#499894", "#d37295", "#a0cbe8", "#ffbe7d",
    "#d4a6c8", "#fabfd2", "#79706e", "#bab0ac",
)
FIXED_COLOURS = MappingProxyType({"outside modules": "#c7cbd1", "region": "#cdb4db", "device": "#f4a259"})
#: Right margin of a figure whose modebar stands upright in it: its buttons are 24 px wide.
MODEBAR_MARGIN = 36
#: Longest text put in a label or a hover box.
MAX_LABEL = 160


def plotly_js() -> str | None:
    """plotly.js from the installed ``plotly`` package, or None where it is not installed."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        return None
    return str(get_plotlyjs()).replace("</script", "<\\/script")


def page_text(value: Any, limit: int = MAX_LABEL) -> str:
    """A text for plotly or the page: bounded and made printable by the one sanitiser
    (:func:`~neuronscope.units.safe_text`), then HTML-escaped."""
    return html.escape(safe_text(value, limit))


#: Where a name may wrap: after a namespace's ``::``, an ``_``, a ``.`` or a ``/`` (an escaped
#: text has none of these inside its entities).
_WRAP_AFTER = re.compile(r"(::|[_./])(?=.)")


def code_text(value: Any, limit: int = MAX_LABEL) -> str:
    """:func:`page_text` in ``<code>``, wrapping only between the parts of a name (after
    ``aten::``, a path's folders), never inside a word as ``ate n::mul_`` did."""
    return "<code>" + _WRAP_AFTER.sub(r"\1<wbr>", page_text(value, limit)) + "</code>"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def plot_block(pid: str, figure: dict[str, Any], height: int) -> str:
    """A figure's place on the page and its JSON (drawn by :data:`DRAW_JS`), escaped so that no
    text in it can end the script block."""
    return (
        f'<div class="plot" id="{pid}" style="height:{height}px"></div>'
        f'<script type="application/json" data-plot="{pid}">{_json(figure)}</script>'
    )


#: Draws every figure of the page once plotly.js has loaded.
DRAW_JS = """
document.querySelectorAll('script[data-plot]').forEach(function (s) {
  var f = JSON.parse(s.textContent);
  Plotly.newPlot(s.getAttribute('data-plot'), f.data, f.layout,
                 {responsive: true, displaylogo: false});
});
"""

def plot_layout(**more: Any) -> dict[str, Any]:
    """A figure's layout: the page's font and margins, and ``more``."""
    return {"margin": {"l": 10, "r": 10, "t": 10, "b": 30}, "font": {"size": 12}, "paper_bgcolor": "#fff", **more}


def _icicle(result: ProfileResult, colours: dict[str, str]) -> str:
    mods = result.modules
    device = mods[0].device_total_us is not None
    ids, labels, parents, values, hover = [], [], [], [], []
    for m in mods:
        ids.append(page_text(m.name, 10_000))
        parents.append("" if m.parent is None else page_text(m.parent, 10_000))
        flag = f" ⚑{','.join(str(h + 1) for h in m.hints)}" if m.hints else ""
        labels.append(page_text(_short(m)) + flag)
        own = (m.self_device_us if device else m.self_cpu_us) or 0.0
        own_bwd = (m.self_backward_device_us if device else m.self_backward_cpu_us) or 0.0
        values.append(max(own, 0.0) + max(own_bwd, 0.0))
        bwd = "" if m.backward_us is None else f"<br>forward {fmt_us(m.time_us)}, backward {fmt_us(m.backward_us)}"
        tops = "<br>".join(
            f"  {page_text(op[0], 60)}: {fmt_us(op[2] if device and op[2] is not None else op[1])}" for op in m.top_ops[:3]
        )
        hint_text = f"<br>hints: {', '.join('#' + str(h + 1) for h in m.hints)}" if m.hints else ""
        hover.append(
            f"<b>{page_text(m.name)}</b> ({page_text(m.type or '?')})<br>{m.calls} call(s), total {fmt_us(m.time_us)}, "
            f"self {fmt_us((m.self_device_us if device else m.self_cpu_us) or 0.0)}, {100 * m.share:.1f}% of the capture"
            + bwd
            + (f"<br>top ops:<br>{tops}" if tops else "")
            + hint_text
        )
    figure = {
        "data": [{
            "type": "icicle", "ids": ids, "labels": labels, "parents": parents, "values": values,
            "branchvalues": "remainder", "hovertext": hover, "hoverinfo": "text",
            "tiling": {"orientation": "v"}, "maxdepth": 6, "textinfo": "label+percent root",
            "marker": {"colors": [colours.get(m.type, "#c7cbd1") for m in mods], "line": {"color": "#fff", "width": 1}},
        }],
        "layout": plot_layout(margin={"l": 4, "r": 4, "t": 24, "b": 4}),
    }
    kind = "device" if device else "CPU"
    has_backward = any(m.backward_us is not None for m in mods)
    kind += " time, forward and backward" if has_backward else " time"
    # Said only where there is backward time: a forward-only capture has none to place.
    backward = "; backward counts for the module whose forward made it" if has_backward else ""
    return (
        f'<h3>Modules ({kind})</h3><p class="note">Each box is a module, as wide as its time '
        f"(its children below it{backward}). Click a box to zoom into it, the top bar to go back; hover for "
        "calls, times and top ops. ⚑n: hint n is about this module's code.</p>" + plot_block("ns-icicle", figure, 420)
    )


def _short(m: Any) -> str:
    """A module's label in the icicle: its last part, with the container for a numbered one
    (``layers.3``, not ``3``)."""
    parts = m.name.split(".")
    if m.parent is not None and len(parts) > 1 and parts[-1].isdigit():
        return ".".join(parts[-2:])
    return str(m.short_name)


def _colours(bars: list[dict[str, Any]], result: ProfileResult) -> dict[str, str]:
    """One colour per module class (the timeline's ops and the icicle's boxes agree), the
    classes with the most time first."""
    weight: dict[str, float] = defaultdict(float)
    for b in bars:
        weight[b["color"]] += b["dur"]
    for m in result.modules:
        weight[m.type] += 1e-9 * m.time_us  # classes the timeline has no bar of come last
    keys = [k for k in sorted(weight, key=lambda k: -weight[k]) if k not in FIXED_COLOURS]
    out = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}
    out.update(FIXED_COLOURS)
    return out


def _timeline(view: TraceView, colours: dict[str, str]) -> str:
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in view.bars:
        by_key[b["color"]].append(b)
    traces = []
    for key in sorted(by_key, key=lambda k: list(colours).index(k)):
        bars = by_key[key]
        traces.append({
            "type": "bar", "orientation": "h", "name": page_text(key, 60),
            "y": [page_text(b["lane"]) for b in bars], "base": [b["start"] / 1e3 for b in bars],
            "x": [max(b["dur"], 0.05) / 1e3 for b in bars],
            "marker": {"color": colours[key], "line": {"width": 0}},
            "hovertext": [
                f"<b>{page_text(b['name'])}</b><br>{fmt_us(b['dur'])} at {b['start'] / 1e3:.3f} ms"
                + (f"<br>{'backward of' if b.get('backward') else 'in'} {page_text(b['module'])}" if b["module"] else "")
                for b in bars
            ],
            "hoverinfo": "text",
        })
    steps = [b for b in view.bars if b["lane"] == "regions and steps" and b["name"].startswith("ProfilerStep#")]
    shapes = [
        {"type": "line", "x0": b["start"] / 1e3, "x1": b["start"] / 1e3, "yref": "paper", "y0": 0, "y1": 1,
         "line": {"color": "#7a8290", "width": 1, "dash": "dot"}}
        for b in steps
    ]
    figure = {
        "data": traces,
        "layout": plot_layout(
            barmode="overlay", bargap=0.25, shapes=shapes,
            # plotly's tool bar (the modebar, kept for pan and zoom) stands upright in the right
            # margin: across the top it covered the legend's last entries (T5Attention).
            margin={"l": 170, "r": MODEBAR_MARGIN, "t": 70, "b": 40},
            modebar={"orientation": "v"},
            xaxis={"title": {"text": "ms from the capture's start"}, "zeroline": False},
            yaxis={"categoryorder": "array", "categoryarray": [page_text(lane) for lane in view.lanes], "autorange": "reversed"},
            legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        ),
    }
    left = f" The {view.left_out:,} shortest bars are left out (Perfetto shows all)." if view.left_out else ""
    backward = ", backward ops by the module whose forward made them" if any(b.get("backward") for b in view.bars) else ""
    height = 180 + 34 * len(view.lanes)
    return (
        '<h3>Timeline</h3><p class="note">Threads and device streams, the module calls by level, '
        "regions and steps (dotted lines: step starts). Ops are coloured by the class of the module "
        f"they ran in{backward}."
        f" Drag to zoom, double-click to reset.{left}</p>" + plot_block("ns-timeline", figure, height)
    )


def _memory(view: TraceView) -> str:
    traces = [
        {"type": "scatter", "mode": "lines", "name": page_text(dev), "line": {"shape": "hv"},
         "x": [t / 1e3 for t, _ in points], "y": [b / 2**20 for _, b in points]}
        for dev, points in view.memory.items()
    ]
    peak = view.peak or {}
    annotations = []
    if peak:
        annotations.append({"x": peak["t"] / 1e3, "y": peak["bytes"] / 2**20, "text": f"peak {peak['bytes'] / 2**20:.2f} MB",
                            "showarrow": True, "arrowhead": 2})
    figure = {"data": traces, "layout": plot_layout(annotations=annotations, margin={"l": 60, "r": MODEBAR_MARGIN, "t": 10, "b": 40},
                                                modebar={"orientation": "v"},  # not over the line (t is 10 px)
                                                xaxis={"title": {"text": "ms from the capture's start"}},
                                                yaxis={"title": {"text": "allocated (MB)"}})}
    holders = "".join(
        f"<tr><td>{code_text(where)}</td><td class=num>{size / 2**20:.3f} MB</td></tr>"
        for where, size in peak.get("holders", [])
    )
    table = (
        f'<p class="note">Held at the peak ({page_text(peak.get("device", ""))}), by where it was allocated '
        f"(module / op):</p><table><thead><tr><th>Allocated in</th><th class=num>Live at the peak</th></tr></thead>"
        f"<tbody>{holders}</tbody></table>"
        if holders else ""
    )
    return "<h3>Memory</h3>" + plot_block("ns-memory", figure, 260) + table


def fmt_bytes(n: float) -> str:
    """``n`` bytes for people: B, KB, MB or GB (powers of 1024)."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _not_allocated(result: ProfileResult) -> str:
    """The fusion hints' intermediates: what each fused form would not allocate, per call
    (the first occurrence's shapes) and over the capture's calls."""
    rows = []
    for i, h in enumerate(result.hints):
        inner = h.details.get("intermediates") or []
        if not inner:
            continue
        per_call = sum(int(t.get("bytes", 0)) for t in inner)
        tensors = ", ".join(
            f"<code>{page_text(t.get('op'), 60)}</code> {page_text(t.get('shape'), 60)} {page_text(t.get('dtype'), 20)}: {fmt_bytes(int(t.get('bytes', 0)))}"
            for t in inner[:8]
        )
        rows.append(
            f"<tr><td>#{i + 1} {page_text(h.pattern)}</td><td class=num>{fmt_bytes(per_call)}</td>"
            f"<td class=num>{fmt_bytes(per_call * h.calls)}</td><td>{tensors}</td></tr>"
        )
    if not rows:
        return ""
    return (
        '<p class="note">What each fusion would stop allocating: the tensors its ops make only for '
        "each other (an output also read elsewhere is left out), at the first call's shapes.</p>"
        "<table><thead><tr><th>Hint</th><th class=num>Per call</th><th class=num>All calls</th>"
        f"<th>Intermediates (made by, shape, dtype, size)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def hints_on_modules(result: ProfileResult) -> dict[int, list[str]]:
    """Each hint's modules (by index), repeated layers written once (``model.layers.*.mlp``)."""
    out: dict[int, list[str]] = defaultdict(list)
    for m in result.modules:
        for h in m.hints:
            name = re.sub(r"\.\d+(?=\.|$)", ".*", m.name)
            if name not in out[h]:
                out[h].append(name)
    return out


def _hint_cards(result: ProfileResult) -> str:
    if not result.hints:
        return ""
    placed = hints_on_modules(result)
    cards = []
    for i, h in enumerate(result.hints):
        where = ", ".join(f"<code>{page_text(n)}</code>" for n in placed.get(i, [])[:4]) or "code outside the module tree"
        saving = "no saving expected" if h.expects_no_saving else f"save {page_text(h.saving_text)}"
        inner = h.details.get("intermediates") or []
        if inner:
            saving += f"; would not allocate {len(inner)} intermediate(s), {fmt_bytes(sum(int(t.get('bytes', 0)) for t in inner))} a call"
        cards.append(
            f'<div class="hint"><div><b>#{i + 1} {page_text(h.kind)}:{page_text(h.pattern)}</b> in {where}</div>'
            f'<div class="loc"><code>{page_text(h.location or "location unknown", 4 * MAX_NAME_CHARS)}</code></div>'
            f"<div>{' → '.join(page_text(o) for o in h.ops[:8])} ×{h.calls}: costs {fmt_us(h.time_us)}, {saving}</div>"
            f'<div class="note">{page_text(h.suggestion if not h.expects_no_saving else "", 4 * MAX_NAME_CHARS)}</div></div>'
        )
    return "<h3>Hints, on the modules they are about</h3>" + "".join(cards)


def pictures(result: ProfileResult, view: TraceView | None) -> str:
    """The pictures section (empty where there is nothing to draw)."""
    parts = []
    colours = _colours(view.bars if view is not None else [], result)
    if result.modules:
        parts.append(_icicle(result, colours))
    if view is not None and view.bars:
        parts.append(_timeline(view, colours))
    not_allocated = _not_allocated(result)
    if view is not None and view.memory:
        parts.append(_memory(view) + not_allocated)
    elif not_allocated:
        parts.append("<h3>Memory</h3>" + not_allocated)
    if view is not None and view.note:
        parts.append(f'<p class="note">{page_text(view.note, 4 * MAX_NAME_CHARS)}</p>')
    parts.append(_hint_cards(result))
    body = "".join(p for p in parts if p)
    return f'<section id="pictures"><h2>Where the time went, in pictures</h2>{body}</section>' if body else ""
