"""Text tables of results and comparisons. Every function returns a string; none prints."""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from tabulate import tabulate

from .result import (
    HINTS_OFF_NOTE,
    Comparison,
    ComparisonRow,
    Hint,
    OpStat,
    ProfileResult,
    RegionStat,
    _fmt_us,
)

__all__ = [
    "comparison_dataframe",
    "comparison_html_table",
    "comparison_legend",
    "fmt_us",
    "ops_dataframe",
    "render_comparison",
    "render_hints",
    "render_ops",
    "render_ranks",
    "render_regions",
    "render_result",
    "result_html_table",
]

fmt_us = _fmt_us


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _shape(op: OpStat) -> str:
    if not op.input_shapes:
        return ""
    text = str(op.input_shapes[0])
    more = len(op.input_shapes) - 1
    if more:
        text += f" (+{more})"
    return text if len(text) <= 40 else text[:37] + "..."


def render_ops(ops: list[OpStat], row_limit: int = 15, device_label: str = "device") -> str:
    """The op table, costliest first: calls, self/total CPU, device times where present, and
    each op's share of the total."""
    has_device = any(o.self_device_us is not None for o in ops)
    total = sum(o.time_us for o in ops)
    headers = ["Op", "Calls", "Self CPU", "CPU total"]
    if has_device:
        headers += [f"Self {device_label}", f"{device_label} total"]
    headers += ["Share", "Input shapes"]
    rows = []
    for op in ops[:row_limit]:
        row: list[Any] = [op.name, op.calls, _fmt_us(op.self_cpu_us), _fmt_us(op.cpu_total_us)]
        if has_device:
            row += [_fmt_us(op.self_device_us), _fmt_us(op.device_total_us)]
        row += [_pct(op.time_us, total), _shape(op)]
        rows.append(row)
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    if len(ops) > row_limit:
        rest = ops[row_limit:]
        text += f"\n... {len(rest)} more ops, {_fmt_us(sum(o.time_us for o in rest))} together"
    return text


def render_regions(regions: dict[str, RegionStat]) -> str:
    if not regions:
        return ""
    rows = []
    for name, reg in sorted(regions.items(), key=lambda kv: kv[1].time_us, reverse=True):
        top = reg.ops[0].name if reg.ops else "-"
        rows.append([name, reg.calls, _fmt_us(reg.time_us), _fmt_us(reg.device_time_us), len(reg.ops), top])
    return tabulate(
        rows,
        headers=["Region", "Calls", "Time (incl.)", "Device time", "Distinct ops", "Top op"],
        tablefmt="simple",
        disable_numparse=True,
    )


def render_hints(hints: Iterable[Hint]) -> str:
    """One line per hint, costliest first."""
    lines = [f"  {i}. {h.message}" for i, h in enumerate(hints, 1)]
    return "\n".join(lines)


def render_ranks(ranks: list[dict[str, Any]]) -> str:
    """One row per rank; the run directory by its last part (the ranks share the parent)."""
    with_dirs = any(r.get("run_dir") for r in ranks)
    rows = []
    for r in ranks:
        row = [r.get("rank"), _fmt_us(r.get("wall_time_us")), _fmt_us(r.get("total_op_us")), r.get("top_op") or "-"]
        if with_dirs:
            row.append(str(r.get("run_dir") or "-").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1])
        rows.append(row)
    headers = ["Rank", "Wall", "Op time", "Top op"] + (["Run dir"] if with_dirs else [])
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def render_result(result: ProfileResult, row_limit: int = 15) -> str:
    """Header, op table, regions, per-rank table and hints of one result."""
    device_label = "NEURON" if result.backend == "neuron" else ("CUDA" if result.backend == "cuda" else "device")
    head = f"neuronscope: {result.name} [{result.backend}] {result.status}, wall {_fmt_us(result.wall_time_us)}"
    if result.rank is not None:
        head += f", rank {result.rank}/{result.world_size}"
    parts = [head]
    if result.error:
        parts.append(f"error: {result.error}")
    if result.ops:
        parts.append(render_ops(result.ops, row_limit=row_limit, device_label=device_label))
    else:
        parts.append("(no ops recorded)")
    if result.device_unattributed_us:
        parts.append(f"device time launched outside any op: {_fmt_us(result.device_unattributed_us)}")
    nested = {k: v for k, v in result.regions.items() if k != result.name}
    if nested:
        parts.append("Regions:\n" + render_regions(nested))
    if result.ranks:
        parts.append("Ranks:\n" + render_ranks(result.ranks))
    if result.hints:
        parts.append("Hints (largest saving first):\n" + render_hints(result.hints))
    elif result.ops and HINTS_OFF_NOTE not in result.notes:
        parts.append("Hints: none found (no fusion candidate, recompile, graph break or straggler)")
    for note in result.notes:
        parts.append(f"note: {note}")
    if result.skipped_calls:
        parts.append(f"note: {result.skipped_calls} call(s) ran uncaptured while another capture was running")
    return "\n\n".join(parts) + "\n"


def _comparison_cells(cmp: Comparison) -> tuple[list[str], list[list[Any]]]:
    """The comparison's headers and rows, shared by the text and the HTML table."""
    base = cmp.rows[0] if cmp.rows else None
    device = any(r.device_time_us is not None for r in cmp.rows)
    headers = ["Variant", "Time", "Spread", "Speedup", "Ops/call (all)", "Top op"]
    headers += ["Device/call"] if device else []
    headers += ["Outputs agree", "Top hint"]
    rows = []
    for r in cmp.rows:
        ops = f"{r.op_count}" + ("" if r.all_op_count is None else f" ({r.all_op_count})")
        row = [r.label, _fmt_us(r.time_us), "" if r.spread_us is None else f"±{_fmt_us(r.spread_us)}", r.speedup_text(base), ops, r.top_op or "-"]
        row += [_fmt_us(r.device_time_us)] if device else []
        row += ["" if r.outputs_match is None else ("yes" if r.outputs_match else "NO"), r.top_hint or ""]
        rows.append(row)
    return headers, rows


def comparison_legend(cmp: Comparison) -> list[str]:
    """What the columns mean, for a comparison timed in rounds (none for older runs)."""
    if not cmp.rows or cmp.rows[-1].verdict is None:
        return []
    first = cmp.rows[0]
    conf = cmp.timing.get("confidence")
    level = f"{conf * 100:g}% " if isinstance(conf, (int, float)) else ""
    timing = (
        f"Time: median per call over {first.repeats} interleaved rounds of unprofiled calls (Spread: half the IQR). "
        f"Speedup: median over the rounds of {first.label}'s time over the variant's in the same round, "
        f"[{level}interval]; (noise): the interval holds 1.0, or the speedup is within 2% of it."
    )
    ops = (
        "Ops/call: ops the variant's own code dispatched per profiled call (all: with the ops they ran inside); "
        "Top op: the costliest of those."
    )
    return [timing, ops]


def render_comparison(cmp: Comparison) -> str:
    """The comparison table: variant, time, spread, speedup, ops, top op, top hint."""
    headers, rows = _comparison_cells(cmp)
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    head = f"neuronscope compare: {cmp.name}" + (f" [{cmp.backend}]" if cmp.backend else "")
    notes = "".join(f"\n{line}" for line in comparison_legend(cmp)) + "".join(f"\nnote: {n}" for n in cmp.notes)
    return f"{head}\n{text}{notes}\n"


def _html_table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def result_html_table(result: ProfileResult, row_limit: int = 15) -> str:
    """An HTML table of the top ops (for Jupyter's ``_repr_html_``)."""
    total = sum(o.time_us for o in result.ops)
    rows = [
        [o.name, o.calls, _fmt_us(o.self_cpu_us), _fmt_us(o.self_device_us), _pct(o.time_us, total)]
        for o in result.ops[:row_limit]
    ]
    caption = html.escape(f"{result.name} [{result.backend}] wall {_fmt_us(result.wall_time_us)}")
    hints = "".join(f"<li>{html.escape(h.message)}</li>" for h in result.hints)
    return (
        f"<div><b>{caption}</b>"
        + _html_table(["Op", "Calls", "Self CPU", "Self device", "Share"], rows)
        + (f"<ul>{hints}</ul>" if hints else "")
        + "</div>"
    )


def comparison_html_table(cmp: Comparison) -> str:
    """An HTML table of the comparison, the same columns as :func:`render_comparison`."""
    headers, rows = _comparison_cells(cmp)
    caption = html.escape(cmp.name + (f" [{cmp.backend}]" if cmp.backend else ""))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in comparison_legend(cmp) + cmp.notes)
    return f"<div><b>{caption}</b>" + _html_table(headers, rows) + (f"<ul>{notes}</ul>" if notes else "") + "</div>"


def comparison_dataframe(cmp: Comparison) -> Any:
    """The comparison rows as a pandas DataFrame indexed by variant label."""
    columns = [f.name for f in fields(ComparisonRow)]
    return _dataframe([r.to_dict() for r in cmp.rows], columns=columns).set_index("label")


def ops_dataframe(ops: list[OpStat]) -> Any:
    """The op table as a pandas DataFrame (pandas is an optional extra, imported here)."""
    columns = [f.name for f in fields(OpStat)]
    return _dataframe([o.to_dict() for o in ops], columns=columns)


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
    return _dataframe(records, columns=columns).set_index("name")


def hints_dataframe(hints: list[Hint]) -> Any:
    """The hints as a pandas DataFrame, one row each, the ops joined with ' -> '."""
    records = [{**h.to_dict(), "ops": " -> ".join(h.ops)} for h in hints]
    columns = [
        "kind", "pattern", "ops", "calls", "time_us", "est_saving_us", "verified_saving_us",
        "suggestion", "location", "confidence",
    ]
    return _dataframe([{k: r.get(k) for k in columns} for r in records], columns=columns)


def _dataframe(records: list[dict[str, Any]], columns: list[str] | None = None) -> Any:
    try:
        import pandas as pd
    except ImportError as exc:
        from .errors import NeuronscopeError

        raise NeuronscopeError("to_dataframe() needs pandas; pip install 'neuronscope[pandas]'") from exc
    return pd.DataFrame(records, columns=columns)
