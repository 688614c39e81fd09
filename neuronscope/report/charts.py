"""The charts of ``report.html``: horizontal bars drawn as inline SVG with matplotlib.

matplotlib is imported only here, through its ``Figure`` API, so the user's pyplot backend is
never touched. Glyphs are drawn as paths, so the charts look the same without the fonts
installed. Values that are not finite (a corrupt or hand-edited result.json) are drawn as 0 and
never reach an axis limit; a share axis ends at 100%.
"""

from __future__ import annotations

import html
import io
import math
import re
from typing import TYPE_CHECKING, Any

from neuronscope.errors import NeuronscopeError
from neuronscope.units import MAX_NAME_CHARS, fmt_us, safe_text, shorten

if TYPE_CHECKING:
    from neuronscope.result.comparison import Comparison
    from neuronscope.result.types import ProfileResult

__all__ = ["CHART_LABEL_CHARS", "TOP_OPS_IN_CHART", "Charts", "device_label"]

#: Bars in the "where the time went" chart; the rest become one "other" bar. Ten keeps the
#: labels readable and covers nearly all of the time in a typical capture.
TOP_OPS_IN_CHART = 10
#: Longest op or region name drawn in a chart; longer ones (compiled graphs) are cut.
CHART_LABEL_CHARS = 48

_ACCENT = "#3b6fb6"
_GREY = "#a7adb5"
_FASTER = "#2e8b57"
_SLOWER = "#c0504d"
#: Steps drawn one by one in the timeline chart (the rest are in result.json).
TIMELINE_STEPS = 24
#: Ranks drawn in the wall-time chart: the slowest ones (the table lists every rank).
RANK_BARS = 32


def device_label(backend: str | None) -> str:
    return {"neuron": "NEURON", "cuda": "CUDA", "rocm": "HIP", "mtia": "MTIA"}.get(backend or "", "device")


def _plain(text: str, limit: int = MAX_NAME_CHARS) -> str:
    """Text that matplotlib draws as it is: through the one sanitising step (a lone surrogate
    failed in its font code), then '$' escaped (a pair would start its mathtext)."""
    return safe_text(text, limit).replace("$", r"\$")


def _chart_label(text: str) -> str:
    text = text if len(text) <= CHART_LABEL_CHARS else text[: CHART_LABEL_CHARS - 1] + "…"
    return _plain(text)


def _finite(value: Any) -> float:
    """A bar's length: the value, or 0 for None, NaN or infinity."""
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return out if math.isfinite(out) else 0.0


class Charts:
    """Draws charts as inline SVG. One instance per page, so that every element id in every
    chart is unique on the page (inline SVGs share the document's id space)."""

    def __init__(self) -> None:
        try:
            import matplotlib
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise NeuronscopeError(
                "neuronscope report draws its charts with matplotlib, a dependency of neuronscope that "
                "is missing from this environment; pip install matplotlib"
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
        axis_max: float | None = None,
    ) -> str:
        """Horizontal bars, one per label, each with its text at its end. ``axis_max`` (100 for
        a share) is where the axis ends at most: a text that would run past it goes inside its
        bar instead."""
        values = [_finite(v) for v in values]
        errors = [_finite(e) for e in errors] if errors else None
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
        ends = [v + (errors[i] if errors else 0.0) for i, v in enumerate(values)]  # right of the whisker
        top = max([*ends, 0.0])
        limit = top * 1.28 if top > 0 else 1.0
        if axis_max is not None:
            limit = min(limit, axis_max)
        ax.set_xlim(0, limit)
        for y, end, t in zip(ypos, ends, texts):
            if end + limit * 0.2 <= limit:
                ax.text(end + limit * 0.015, y, _plain(t), va="center", fontsize=8.5, color="#1d2330")
            else:  # no room right of the bar: inside it, at its end
                ax.text(end - limit * 0.015, y, _plain(t), va="center", ha="right", fontsize=8.5, color="white")
        ax.set_title(_plain(shorten(title, 2 * MAX_NAME_CHARS // 3)), fontsize=10.5, loc="left")
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
        total = _finite(result.share_total_us)
        if not ops or total <= 0:
            return ""
        shown = ops[:TOP_OPS_IN_CHART]
        rest = ops[TOP_OPS_IN_CHART:]
        labels = [o.name for o in shown]
        times = [_finite(o.time_us) for o in shown]
        colors = [_ACCENT] * len(shown)
        if rest:
            labels.append(f"other ({len(rest)} ops)")
            times.append(sum(_finite(o.time_us) for o in rest))
            colors.append(_GREY)
        shares = [100.0 * t / total for t in times]
        texts = [f"{s:.1f}%  {fmt_us(t)}" for s, t in zip(shares, times)]
        kind = f"self {device_label(result.platform or result.backend)} time" if result.has_device_time else "self CPU time"
        title = f"Where the time went: {shorten(result.name, 80)} (share of {fmt_us(total)} {kind})"
        return self._bars(labels, shares, texts, colors, title, "share of total op time (%)", axis_max=100.0)

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
        marked = chart.get("step_starts_us") or []
        for start in marked:
            ax.axvline(start / scale, color=_GREY, linewidth=0.8, linestyle=":")
        marks = "too many steps to mark" if bd.get("steps_left_out") and not marked else "dotted: step starts"
        ax.set_yticks([i + 0.4 for i in range(len(lanes))])
        ax.set_yticklabels([k for k, _ in lanes], fontsize=9)
        ax.set_xlim(0, width * max(len(v) for _, v in lanes))
        ax.set_xlabel(f"time from the first device event ({unit}); {marks}", fontsize=9)
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
        colors = [_GREY] + [_variant_colour(r, base) for r in rows[1:]]
        unit, scale = _unit(max(_finite(r.time_us) for r in rows))
        errors = [(r.spread_us or 0.0) / scale for r in rows]
        texts = [f"{fmt_us(r.time_us)}   {r.speedup_text(base)}" for r in rows]
        title = f"{shorten(cmp.name, 80)}: time per call (median), speedup against {shorten(base.label, 40)!r}"
        return self._bars(
            [r.label for r in rows],
            [r.time_us / scale for r in rows],
            texts,
            colors,
            title,
            f"time per call ({unit}); whiskers: ± half the interquartile range; grey: within the noise",
            errors=errors if any(errors) else None,
        )

    def ranks(self, ranks: list[dict[str, Any]]) -> str:
        """Wall time per rank; the slowest rank stands out. Of more than :data:`RANK_BARS`
        ranks, the slowest ones, slowest first."""
        if not ranks:
            return ""
        shown = ranks
        title = "Wall time per rank (the slowest in red)" if len(ranks) > 1 else "Wall time per rank"
        if len(ranks) > RANK_BARS:
            shown = sorted(ranks, key=lambda r: _finite(r.get("wall_time_us")), reverse=True)[:RANK_BARS]
            title = f"Wall time of the {RANK_BARS} slowest of {len(ranks)} ranks (the slowest in red)"
        walls = [_finite(r.get("wall_time_us")) for r in shown]
        slowest = max(walls)
        colors = [_SLOWER if w == slowest and len(ranks) > 1 else _ACCENT for w in walls]
        unit, scale = _unit(slowest)
        labels = [f"rank {r.get('rank')}" for r in shown]
        return self._bars(labels, [w / scale for w in walls], [fmt_us(w) for w in walls], colors, title, f"wall time ({unit})")


def _variant_colour(row: Any, base: Any) -> str:
    """Green for faster, red for slower, grey where the difference is within the noise."""
    if row.within_noise(base):
        return _GREY
    return _FASTER if row.speedup >= 1.0 else _SLOWER


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
    head = f'<svg class="chart" role="img" aria-label="{html.escape(shorten(title, MAX_NAME_CHARS))}"' + head[len("<svg") :]
    return head + svg[head_end:] + "\n"


