"""Text tables of results and comparisons. Every function returns a string; none prints.

Result types are imported for type checking only: ``ProfileResult.table()`` calls into this
module, so a runtime import back into :mod:`neuronscope.result` would close an import cycle.
Everything here reads the objects' attributes (duck typing), and :func:`printable` is the one
sanitiser for any name or text that reaches a terminal.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from neuronscope.report.device_profile import render_device_profile
from neuronscope.report.tree import MODULE_COLUMNS, module_records, modules_html, render_modules
from neuronscope.units import fmt_us

if TYPE_CHECKING:
    from neuronscope.result.types import Comparison, Hint, OpStat, ProfileResult, RegionStat

__all__ = [
    "MAX_NAME_CHARS",
    "breakdown_dataframe",
    "comparison_dataframe",
    "comparison_html_table",
    "comparison_legend",
    "fmt_us",
    "modules_dataframe",
    "ops_dataframe",
    "printable",
    "render_breakdown",
    "render_comparison",
    "render_hints",
    "render_ops",
    "render_ranks",
    "render_regions",
    "render_result",
    "result_html_table",
    "shorten",
]

#: Longest name shown in a table or a report (the whole name stays in result.json): a 50,000-
#: character op or region name would otherwise make every table, chart and page that wide.
MAX_NAME_CHARS = 200

#: Unicode categories never printed as they are: controls (escape sequences that retitle, clear
#: or write the clipboard of a terminal), format characters (bidi overrides that reorder a line),
#: lone surrogates, private-use and unassigned code points, and line/paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text: object, keep: str = "") -> str:
    """``text`` with every character a terminal would act on written as an escape (``\\x1b``,
    ``\\u202e``, ``\\ud800``), so that names from a trace or a run directory print as text and
    nothing else. Characters in ``keep`` (``"\\n"`` for a whole table) stay as they are."""
    value = str(text)
    if value.isprintable():
        return value
    out = []
    for ch in value:
        if ch in keep or unicodedata.category(ch) not in _UNPRINTABLE:
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"))
    return "".join(out)


def shorten(text: object, limit: int = MAX_NAME_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with '…' and the length left out."""
    value = str(text)
    if len(value) <= limit:
        return value
    return f"{value[: limit - 1]}… (+{len(value) - limit + 1} chars)"


def _name(text: object) -> str:
    """A name as a table shows it: printable and bounded."""
    return printable(shorten(text))


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
        row: list[Any] = [_name(op.name), op.calls, fmt_us(op.self_cpu_us), fmt_us(op.cpu_total_us)]
        if has_device:
            row += [fmt_us(op.self_device_us), fmt_us(op.device_total_us)]
        row += [_pct(op.time_us, total), _shape(op)]
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
        top = _name(reg.ops[0].name) if reg.ops else "-"
        rows.append([_name(name), reg.calls, fmt_us(reg.time_us), fmt_us(reg.device_time_us), len(reg.ops), top])
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
        row = [_name(r.get("rank")), fmt_us(r.get("wall_time_us")), fmt_us(r.get("total_op_us")), _name(r.get("top_op") or "-")]
        if with_dirs:
            row.append(_name(str(r.get("run_dir") or "-").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]))
        rows.append(row)
    headers = ["Rank", "Wall", "Op time", "Top op"] + (["Run dir"] if with_dirs else [])
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def render_result(result: ProfileResult, row_limit: int = 15) -> str:
    """Header, op table, regions, per-rank table and hints of one result."""
    device_label = {"neuron": "NEURON", "cuda": "CUDA"}.get(result.backend, "device")
    device_label = {"rocm": "HIP", "mtia": "MTIA"}.get(result.platform or "", device_label)
    head = f"neuronscope: {_name(result.name)} [{_name(result.platform or result.backend)}] {_name(result.status)}, wall {fmt_us(result.wall_time_us)}"
    if result.rank is not None:
        head += f", rank {result.rank}" + (f"/{result.world_size}" if result.world_size is not None else "")
    parts = [head]
    if result.error:
        parts.append(f"error: {printable(shorten(result.error, 4 * MAX_NAME_CHARS))}")
    if result.ops:
        outside = result.device_unattributed_us or 0.0
        parts.append(render_ops(result.ops, row_limit=row_limit, device_label=device_label, outside_us=outside))
    else:
        parts.append("(no ops recorded)")
    if result.device_unattributed_us:
        parts.append(f"device time launched outside any op: {fmt_us(result.device_unattributed_us)}")
    if result.modules:
        parts.append(render_modules(result, name=_name))
    if result.breakdown:
        try:
            parts.append(render_breakdown(result.breakdown))
        except (KeyError, TypeError, ValueError, AttributeError):  # a hand-edited or foreign result.json
            parts.append("device breakdown: present but unreadable in this result")
    if result.device_profile:
        parts.append(render_device_profile(result.device_profile))
    nested = {k: v for k, v in result.regions.items() if k != result.name}
    if nested:
        parts.append("Regions:\n" + render_regions(nested))
    if result.ranks:
        parts.append("Ranks:\n" + render_ranks(result.ranks))
    if result.hints:
        parts.append("Hints (largest saving first):\n" + render_hints(result.hints))
    elif result.ops and not result.hints_off:
        parts.append("Hints: none found (no fusion candidate, recompile, graph break or straggler)")
    for note in result.notes:
        parts.append(f"note: {printable(shorten(note, 4 * MAX_NAME_CHARS))}")
    if result.skipped_calls:
        parts.append(f"note: {result.skipped_calls} call(s) ran uncaptured while another capture was running")
    return printable("\n\n".join(parts) + "\n", keep="\n\t")


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
        row = [_name(r.label), fmt_us(r.time_us), "" if r.spread_us is None else f"±{fmt_us(r.spread_us)}", r.speedup_text(base), ops, _name(r.top_op or "-")]
        row += [fmt_us(r.device_time_us)] if device else []
        row += ["" if r.outputs_match is None else ("yes" if r.outputs_match else "NO"), _name(r.top_hint or "")]
        rows.append(row)
    return headers, rows


def comparison_legend(cmp: Comparison) -> list[str]:
    """What the columns mean, for a comparison timed in rounds (none for older runs)."""
    if not cmp.rows or cmp.rows[-1].verdict is None:
        return []
    first = cmp.rows[0]
    conf = cmp.timing.get("confidence")
    level = f"{conf * 100:g}% " if isinstance(conf, (int, float)) else ""
    samples = cmp.timing.get("samples_per_round")
    quickest = f", each round's quickest of {samples} samples" if isinstance(samples, int) and samples > 1 else ""
    timing = (
        f"Time: median per call over {first.repeats} interleaved rounds of unprofiled calls{quickest} (Spread: half the IQR). "
        f"Speedup: median over the rounds of {first.label}'s time over the variant's in the same round, "
        f"[{level}interval]; (noise): the interval holds 1.0, the speedup is within 2% of it, or the median times point the other way."
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
    head = f"neuronscope compare: {_name(cmp.name)}" + (f" [{_name(cmp.backend)}]" if cmp.backend else "")
    notes = "".join(f"\n{line}" for line in comparison_legend(cmp))
    notes += "".join(f"\nnote: {printable(shorten(n, 4 * MAX_NAME_CHARS))}" for n in cmp.notes)
    return f"{head}\n{text}{notes}\n"


def _h(value: object) -> str:
    return html.escape(shorten("" if value is None else value))


def _html_table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_h(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_h(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_hints_and_regions(result: ProfileResult) -> str:
    """The hints (or why there are none) and the nested regions, for the notebook views."""
    parts = []
    if result.hints:
        items = "".join(
            f"<li>{html.escape(shorten(h.message, 4 * MAX_NAME_CHARS))}"
            + (f"<br><small>at <code>{html.escape(shorten(h.location, 4 * MAX_NAME_CHARS))}</code></small>" if h.location else "")
            + "</li>"
            for h in result.hints
        )
        parts.append(f"<p><b>Hints</b> (largest saving first)</p><ol>{items}</ol>")
    elif result.ops and not result.hints_off:
        parts.append("<p><b>Hints</b>: none found (no fusion candidate, recompile, graph break or straggler)</p>")
    nested = {k: v for k, v in result.regions.items() if k != result.name}
    if nested:
        rows = [
            [name, reg.calls, fmt_us(reg.time_us), fmt_us(reg.device_time_us), len(reg.ops), reg.ops[0].name if reg.ops else "-"]
            for name, reg in sorted(nested.items(), key=lambda kv: kv[1].time_us, reverse=True)
        ]
        parts.append("<p><b>Regions</b></p>" + _html_table(["Region", "Calls", "Time (incl.)", "Device time", "Distinct ops", "Top op"], rows))
    notes = list(result.notes) + ([f"{result.skipped_calls} call(s) ran uncaptured"] if result.skipped_calls else [])
    if notes:
        parts.append("<ul>" + "".join(f"<li>note: {html.escape(shorten(n, 4 * MAX_NAME_CHARS))}</li>" for n in notes) + "</ul>")
    return "".join(parts)


def result_html_table(result: ProfileResult, row_limit: int = 15) -> str:
    """A result for Jupyter's ``_repr_html_``: the top ops, the hints, the nested regions and
    the notes (what ``table()`` prints, as HTML)."""
    total = result.share_total_us
    rows = [
        [o.name, o.calls, fmt_us(o.self_cpu_us), fmt_us(o.self_device_us), _pct(o.time_us, total)]
        for o in result.ops[:row_limit]
    ]
    caption = f"{result.name} [{result.backend}] {result.status}, wall {fmt_us(result.wall_time_us)}"
    more = f"<p>… {len(result.ops) - row_limit} more ops</p>" if len(result.ops) > row_limit else ""
    return (
        f"<div><b>{_h(caption)}</b>"
        + _html_table(["Op", "Calls", "Self CPU", "Self device", "Share"], rows)
        + more
        + modules_html(result)
        + _html_hints_and_regions(result)
        + "</div>"
    )


def comparison_html_table(cmp: Comparison) -> str:
    """A comparison for Jupyter: the same columns as :func:`render_comparison`, then each
    variant's hints and regions."""
    headers, rows = _comparison_cells(cmp)
    caption = cmp.name + (f" [{cmp.backend}]" if cmp.backend else "")
    # Whole sentences: the legend's lines run past a name's limit, and cut they said half a rule.
    notes = "".join(f"<li>{html.escape(shorten(n, 4 * MAX_NAME_CHARS))}</li>" for n in comparison_legend(cmp) + cmp.notes)
    variants = "".join(
        f"<details><summary>{_h(label)}</summary>{_html_hints_and_regions(result)}</details>"
        for label, result in cmp.results.items()
        if result.hints or len(result.regions) > 1 or result.notes
    )
    return f"<div><b>{_h(caption)}</b>" + _html_table(headers, rows) + (f"<ul>{notes}</ul>" if notes else "") + variants + "</div>"


def comparison_dataframe(cmp: Comparison, columns: list[str] | None = None) -> Any:
    """The comparison rows as a pandas DataFrame indexed by variant label (``columns``: the
    row's field names, which the caller knows even when there are no rows)."""
    records = [r.to_dict() for r in cmp.rows]
    return _dataframe(records, columns=columns or _columns(records) or ["label"]).set_index("label")


def ops_dataframe(ops: list[OpStat], columns: list[str] | None = None) -> Any:
    """The op table as a pandas DataFrame (pandas is an optional extra, imported here)."""
    records = [o.to_dict() for o in ops]
    return _dataframe(records, columns=columns or _columns(records))


def _columns(records: Sequence[Mapping[str, Any]]) -> list[str] | None:
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
    return _dataframe(records, columns=columns).set_index("name")


def modules_dataframe(modules: Sequence[Any]) -> Any:
    """The module tree as a pandas DataFrame indexed by qualified name, parents first."""
    return _dataframe(module_records(modules), columns=list(MODULE_COLUMNS)).set_index("name")


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
        from neuronscope.errors import NeuronscopeError

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
    return _dataframe(rows, columns=columns)
