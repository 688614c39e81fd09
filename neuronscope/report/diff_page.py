"""The pictures of a change: which modules got slower or faster, and which ops.

A diverging bar chart of the modules' change in time (B minus A, inclusive, forward and
backward), slower to the right in red, faster to the left in green, the largest changes on
top; the same for the ops. Drawn by plotly.js like the run's pictures
(:mod:`neuronscope.report.pictures`), with every name escaped the same way. Used by the diff
page (``neuronscope diff A B --html PAGE``) and by a comparison's report, one chart per variant
against the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neuronscope.report.diff import diff_results
from neuronscope.report.pictures import page_text, plot_block, plot_layout
from neuronscope.result.comparison import Comparison
from neuronscope.units import fmt_us

__all__ = ["comparison_deltas", "delta_chart", "diff_section"]

#: Bars in one chart: the largest changes (a deep tree has hundreds of modules).
BARS = 20
SLOWER, FASTER = "#c0504d", "#59a14f"


def delta_chart(
    rows: Sequence[dict[str, Any]], key: str, pid: str, what: str, label_a: str = "A", label_b: str = "B", by: str = "delta_us"
) -> str:
    """A diverging bar chart of ``rows`` (:func:`~neuronscope.report.diff.diff_results`'
    ``modules`` or ``ops``; ``key`` names the name field) by their change ``by``, largest on
    top, or "" where nothing changed."""
    changed = sorted((r for r in rows if r.get(by)), key=lambda r: -abs(r[by]))
    shown = [{**r, "bar_us": r[by]} for r in changed[:BARS]]
    if not shown:
        return ""
    shown = shown[::-1]  # plotly draws the first bar at the bottom: the largest on top
    scale, unit = (1e3, "ms") if max(abs(r["bar_us"]) for r in shown) >= 1e3 else (1.0, "us")
    names = [page_text(r[key], 70) for r in shown]
    # Two bars of one name would be drawn as one: a duplicate label (two names cut alike) gets a mark.
    seen: dict[str, int] = {}
    for i, n in enumerate(names):
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            names[i] = f"{n} ({seen[n]})"
    hover = [
        f"<b>{page_text(r[key])}</b> ({page_text(r.get('status', ''))})<br>{page_text(label_a, 60)}: {fmt_us(r['time_a_us'])}<br>"
        f"{page_text(label_b, 60)}: {fmt_us(r['time_b_us'])}<br>change: {'+' if r['delta_us'] >= 0 else '-'}{fmt_us(abs(r['delta_us']))}"
        + (f" ({r['ratio']:.2f}x)" if r.get("ratio") else "")
        + (f"<br>own time (children's left out): {'+' if r['bar_us'] >= 0 else '-'}{fmt_us(abs(r['bar_us']))}" if by != "delta_us" else "")
        for r in shown
    ]
    figure = {
        "data": [{
            "type": "bar", "orientation": "h", "y": names, "x": [r["bar_us"] / scale for r in shown],
            "marker": {"color": [SLOWER if r["bar_us"] > 0 else FASTER for r in shown]},
            "hovertext": hover, "hoverinfo": "text",
            "text": [_number(r["bar_us"] / scale) for r in shown],
            "textposition": "outside", "cliponaxis": False,
        }],
        "layout": plot_layout(
            margin={"l": 10, "r": 50, "t": 34, "b": 40},  # the top clear of plotly's buttons
            xaxis={"title": {"text": f"change in time ({unit}): {page_text(label_b, 40)} minus {page_text(label_a, 40)}"}, "zeroline": True,
                   "zerolinecolor": "#1d2330", "zerolinewidth": 1},
            yaxis={"automargin": True, "type": "category"},
            bargap=0.25,
        ),
    }
    more = f" The {BARS} largest of {len(changed)} changes." if len(changed) > BARS else ""
    return (
        f'<p class="note">{what}: red to the right took longer in {page_text(label_b, 60)}, green to the left '
        f"less; hover for both times.{more}</p>" + plot_block(pid, figure, 60 + 26 * len(shown))
    )


def _number(v: float) -> str:
    """A bar's value label: signed, thousands grouped, three figures below 100."""
    sign = "+" if v > 0 else "-" if v < 0 else ""
    return sign + (f"{abs(v):,.0f}" if abs(v) >= 100 else f"{abs(v):.3g}")


def diff_section(d: dict[str, Any], label_a: str = "A", label_b: str = "B", sfx: str = "") -> str:
    """The pictures of one diff: modules (where the runs have a module tree), then ops."""
    parts = []
    if d.get("modules"):
        parts.append(
            "<h3>Modules, largest change first</h3>"
            + delta_chart(
                d["modules"], "module", f"ns-dmod{sfx}",
                "Each module's own time, forward and backward (its children's left out, so the module that changed "
                "stands out, not every module around it; hover for the inclusive times)",
                label_a, label_b, by="self_delta_us",
            )
        )
    parts.append("<h3>Ops, largest change first</h3>" + delta_chart(d["ops"], "op", f"ns-dops{sfx}", "Each op's time", label_a, label_b))
    return "".join(p for p in parts if not p.endswith("</h3>"))


def comparison_deltas(cmp: Comparison) -> str:
    """For each variant after the first, a diff section against the first (the baseline)."""
    labels = list(cmp.results)
    if len(labels) < 2:
        return ""
    base = cmp.results[labels[0]]
    out = []
    for k, label in enumerate(labels[1:], start=1):
        section = diff_section(diff_results(base, cmp.results[label]), labels[0], label, sfx=f"-{k}")
        if section:
            out.append(f"<h3>{page_text(label)} against {page_text(labels[0])}</h3>{section}")
    if not out:
        return ""
    return '<section id="changes"><h2>What changed, in pictures</h2>' + "".join(out) + "</section>"
