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

from .units import fmt_us

if TYPE_CHECKING:
    from .result import Comparison, Hint, OpStat, ProfileResult, RegionStat

__all__ = [
    "MAX_NAME_CHARS",
    "comparison_dataframe",
    "comparison_html_table",
    "fmt_us",
    "ops_dataframe",
    "printable",
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
_UNPRINTABLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


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
    device_label = "NEURON" if result.backend == "neuron" else ("CUDA" if result.backend == "cuda" else "device")
    head = f"neuronscope: {_name(result.name)} [{_name(result.backend)}] {_name(result.status)}, wall {fmt_us(result.wall_time_us)}"
    if result.rank is not None:
        head += f", rank {_name(result.rank)}/{_name(result.world_size)}"
    parts = [head]
    if result.error:
        parts.append(f"error: {printable(shorten(result.error, 4 * MAX_NAME_CHARS))}")
    if result.ops:
        parts.append(render_ops(result.ops, row_limit=row_limit, device_label=device_label))
    else:
        parts.append("(no ops recorded)")
    if result.device_unattributed_us:
        parts.append(f"device time launched outside any op: {fmt_us(result.device_unattributed_us)}")
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
    return "\n\n".join(parts) + "\n"


def render_comparison(cmp: Comparison) -> str:
    """The comparison table: variant, time, spread, ops, top op, speedup, top hint."""
    rows = []
    base = cmp.rows[0] if cmp.rows else None
    for r in cmp.rows:
        spread = "" if r.spread_us is None else f"±{fmt_us(r.spread_us)}"
        match = "" if r.outputs_match is None else ("yes" if r.outputs_match else "NO")
        rows.append(
            [_name(r.label), fmt_us(r.time_us), spread, r.op_count, _name(r.top_op or "-"), r.speedup_text(base), match, _name(r.top_hint or "")]
        )
    text = tabulate(
        rows,
        headers=["Variant", "Time", "Spread", "Ops/call", "Top op", "Speedup", "Outputs agree", "Top hint"],
        tablefmt="simple",
        disable_numparse=True,
    )
    head = f"neuronscope compare: {_name(cmp.name)}" + (f" [{_name(cmp.backend)}]" if cmp.backend else "")
    notes = "".join(f"\nnote: {printable(shorten(n, 4 * MAX_NAME_CHARS))}" for n in cmp.notes)
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
        items = "".join(f"<li>{html.escape(shorten(h.message, 4 * MAX_NAME_CHARS))}</li>" for h in result.hints)
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
    total = sum(o.time_us for o in result.ops)
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
        + _html_hints_and_regions(result)
        + "</div>"
    )


def comparison_html_table(cmp: Comparison) -> str:
    """A comparison for Jupyter: the same columns as :func:`render_comparison`, then each
    variant's hints and regions."""
    rows = [
        [
            r.label,
            fmt_us(r.time_us),
            "" if r.spread_us is None else f"±{fmt_us(r.spread_us)}",
            r.op_count,
            r.top_op or "-",
            r.speedup_text(cmp.rows[0]),
            "" if r.outputs_match is None else ("yes" if r.outputs_match else "NO"),
            r.top_hint or "",
        ]
        for r in cmp.rows
    ]
    headers = ["Variant", "Time", "Spread", "Ops/call", "Top op", "Speedup", "Outputs agree", "Top hint"]
    caption = cmp.name + (f" [{cmp.backend}]" if cmp.backend else "")
    notes = "".join(f"<li>{_h(n)}</li>" for n in cmp.notes)
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
