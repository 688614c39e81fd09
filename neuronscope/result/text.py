"""Text of the parts of a result: op, region, hint, rank and breakdown tables, the notebook's
HTML cells, and pandas tables. Every function returns a value; none prints.

It reads :class:`~neuronscope.result.stats.OpStat`, :class:`~neuronscope.result.hint.Hint` and
plain mappings; the result types compose it in ``table()``, ``_repr_html_`` and
``to_dataframe()``, so it never imports them (no cycle, not even for type checking).
:func:`printable` is the one sanitiser for any name or text that reaches a terminal.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from neuronscope.errors import NeuronscopeError
from neuronscope.units import MAX_NAME_CHARS, fmt_us, printable, safe_text, shorten

if TYPE_CHECKING:
    from neuronscope.result.hint import Hint
    from neuronscope.result.stats import OpStat, RegionStat

__all__ = [
    "breakdown_dataframe",
    "display_name",
    "hints_dataframe",
    "html_cell",
    "html_table",
    "ops_dataframe",
    "record_columns",
    "records_dataframe",
    "regions_dataframe",
    "render_breakdown",
    "render_hints",
    "render_ops",
    "render_ranks",
    "render_regions",
    "share_text",
]

def display_name(text: object) -> str:
    """A name as a table shows it: printable and bounded."""
    return safe_text(text)


def share_text(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` (``-`` where there is no whole)."""
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _shape(op: OpStat) -> str:
    if not op.input_shapes:
        return ""
    text = str(op.input_shapes[0])
    more = len(op.input_shapes) - 1
    if more:
        text += f" (+{more})"
    return text if len(text) <= 40 else text[:37] + "..."


def render_ops(ops: list[OpStat], row_limit: int = 15, device_label: str = "device", outside_us: float = 0.0) -> str:
    """The op table, costliest first: calls, self/total CPU, device times where present, and
    each op's share of the total (with ``outside_us``, device time launched outside any op, in
    the total: it ran on the device too)."""
    has_device = any(o.self_device_us is not None for o in ops)
    total = sum(o.time_us for o in ops) + (outside_us if has_device else 0.0)
    headers = ["Op", "Calls", "Self CPU", "CPU total"]
    if has_device:
        headers += [f"Self {device_label}", f"{device_label} total"]
    headers += ["Share", "Input shapes"]
    rows = []
    for op in ops[:row_limit]:
        row: list[Any] = [display_name(op.name), op.calls, fmt_us(op.self_cpu_us), fmt_us(op.cpu_total_us)]
        if has_device:
            row += [fmt_us(op.self_device_us), fmt_us(op.device_total_us)]
        row += [share_text(op.time_us, total), _shape(op)]
        rows.append(row)
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    if len(ops) > row_limit:
        rest = ops[row_limit:]
        text += f"\n... {len(rest)} more ops, {fmt_us(sum(o.time_us for o in rest))} together"
    return text


def render_regions(regions: dict[str, RegionStat]) -> str:
    if not regions:
        return ""
    rows = []
    for name, reg in sorted(regions.items(), key=lambda kv: kv[1].time_us, reverse=True):
        top = display_name(reg.ops[0].name) if reg.ops else "-"
        rows.append([display_name(name), reg.calls, fmt_us(reg.time_us), fmt_us(reg.device_time_us), len(reg.ops), top])
    return tabulate(
        rows,
        headers=["Region", "Calls", "Time (incl.)", "Device time", "Distinct ops", "Top op"],
        tablefmt="simple",
        disable_numparse=True,
    )


def render_hints(hints: Iterable[Hint]) -> str:
    """One line per hint, costliest first."""
    lines = [f"  {i}. {printable(shorten(h.message, 4 * MAX_NAME_CHARS))}" for i, h in enumerate(hints, 1)]
    return "\n".join(lines)


def render_ranks(ranks: list[dict[str, Any]]) -> str:
    """One row per rank; the run directory by its last part (the ranks share the parent)."""
    with_dirs = any(r.get("run_dir") for r in ranks)
    rows = []
    for r in ranks:
        row = [display_name(r.get("rank")), fmt_us(r.get("wall_time_us")), fmt_us(r.get("total_op_us")), display_name(r.get("top_op") or "-")]
        if with_dirs:
            row.append(display_name(str(r.get("run_dir") or "-").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]))
        rows.append(row)
    headers = ["Rank", "Wall", "Op time", "Top op"] + (["Run dir"] if with_dirs else [])
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def html_cell(value: object) -> str:
    """``value`` as HTML text, shortened (None: empty)."""
    return html.escape(shorten("" if value is None else value))


def html_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain HTML table of ``rows`` under ``headers``, every cell escaped."""
    head = "".join(f"<th>{html_cell(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def ops_dataframe(ops: list[OpStat], columns: list[str] | None = None) -> Any:
    """The op table as a pandas DataFrame (pandas is an optional extra, imported here)."""
    records = [o.to_dict() for o in ops]
    return records_dataframe(records, columns=columns or record_columns(records))


def record_columns(records: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The keys of the first record (None where there is none)."""
    return list(records[0]) if records else None


def regions_dataframe(regions: dict[str, RegionStat]) -> Any:
    """The regions as a pandas DataFrame indexed by name: calls, inclusive time, device time,
    how many distinct ops ran inside and the costliest of them."""
    records = [
        {
            "name": name,
            "calls": r.calls,
            "time_us": r.time_us,
            "device_time_us": r.device_time_us,
            "distinct_ops": len(r.ops),
            "top_op": r.ops[0].name if r.ops else None,
        }
        for name, r in regions.items()
    ]
    columns = ["name", "calls", "time_us", "device_time_us", "distinct_ops", "top_op"]
    return records_dataframe(records, columns=columns).set_index("name")


def hints_dataframe(hints: list[Hint]) -> Any:
    """The hints as a pandas DataFrame, one row each, the ops joined with ' -> '."""
    records = [{**h.to_dict(), "ops": " -> ".join(h.ops)} for h in hints]
    columns = [
        "kind", "pattern", "ops", "calls", "time_us", "est_saving_us", "verified_saving_us",
        "suggestion", "location", "confidence",
    ]
    return records_dataframe([{k: r.get(k) for k in columns} for r in records], columns=columns)


def records_dataframe(records: list[dict[str, Any]], columns: list[str] | None = None) -> Any:
    """``records`` as a pandas DataFrame (pandas is an optional extra, imported here)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise NeuronscopeError("to_dataframe() needs pandas; pip install 'neuronscope[pandas]'") from exc
    return pd.DataFrame(records, columns=columns)


def _share(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _device_label(device: int) -> str:
    return str(device) if device >= 0 else "?"  # a trace that named no device number


def render_breakdown(bd: dict[str, Any]) -> str:
    """The device's busy and idle time in a few lines (see :mod:`neuronscope.events.timeline`)."""
    w = float(bd.get("window_us") or 0.0)
    others = [d for d in bd.get("devices") or [] if d["device"] != bd.get("device")]
    label = f"Device {_device_label(bd['device'])} (the busiest of {len(others) + 1})" if others else "Device"
    lines = [
        (
            f"{label}: busy {_share(bd['busy_us'], w)} of {fmt_us(w)}, idle {_share(bd['idle_us'], w)} "
            f"(host not launching {_share(bd['idle_host_us'], w)}, blocked in sync "
            f"{_share(bd['idle_sync_us'], w)}, other {_share(bd['idle_other_us'], w)})"
        ),
        (
            f"  compute {_share(bd['compute_us'], w)}, communication {_share(bd['communication_us'], w)}, "
            f"memory {_share(bd['memory_us'], w)}; overlapped: compute+communication "
            f"{fmt_us(bd['overlap_compute_communication_us'])}, compute+memory {fmt_us(bd['overlap_compute_memory_us'])}"
        ),
    ]
    if others:
        lines.append(
            "  other devices: "
            + ", ".join(f"{_device_label(d['device'])}: busy {_share(d['busy_us'], d['window_us'])} of {fmt_us(d['window_us'])}" for d in others)
        )
    steps = bd.get("steps") or []
    streams = bd.get("streams") or []
    parts = []
    if len(steps) > 1:
        busy = [s["busy_us"] / s["window_us"] if s["window_us"] else 0.0 for s in steps]
        lo = min(range(len(steps)), key=busy.__getitem__)
        parts.append(f"{len(steps)} steps, busy {100 * min(busy):.0f}% ({steps[lo]['name']}) to {100 * max(busy):.0f}%")
    if streams:
        top = ", ".join(f"{s['stream']}: {_share(s['busy_us'], w)}" for s in streams[:3])
        parts.append(f"{len(streams)} stream(s) ({top}{', ...' if len(streams) > 3 else ''})")
    if parts:
        lines.append("  " + "; ".join(parts))
    la = bd.get("launch") or {}
    if la.get("linked"):
        lines.append(
            f"  launches: {la['shorter_than_launch']:,} of {la['linked']:,} kernels ran shorter than their "
            f"launch call (median kernel {fmt_us(la['median_kernel_us'])}, launch {fmt_us(la['median_launch_us'])}); "
            f"launch to start median {fmt_us(la['median_delay_us'])}, p90 {fmt_us(la['p90_delay_us'])}"
        )
    return "\n".join(lines)


def breakdown_dataframe(bd: dict[str, Any] | None) -> Any:
    """One row per step of the breakdown (times in us), as a pandas DataFrame."""
    rows = list((bd or {}).get("steps") or [])
    columns = list(rows[0]) if rows else ["name", "start_us", "window_us", "busy_us", "idle_us"]
    return records_dataframe(rows, columns=columns)
