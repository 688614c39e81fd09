"""The module tree as text, as notebook HTML and as a DataFrame. Functions return; none prints.

Repeated layers are folded (:func:`~neuronscope.result.modules.collapse_repeats`): the group's
row shows the time of all of them, and the spread of one layer's time (least-most).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from tabulate import tabulate

from neuronscope.result.modules import ModuleGroup, ModuleStat, collapse_repeats
from neuronscope.result.text import records_dataframe
from neuronscope.units import fmt_us, safe_text

__all__ = ["MODULE_COLUMNS", "has_backward", "module_records", "module_rows", "modules_dataframe", "modules_html", "render_modules"]

#: How a name is made safe to show: the text report passes its terminal sanitiser.
Namer = Callable[[object], str]

#: Rows of the module table in a terminal: the costliest part of a deep tree.
MODULE_ROWS = 25
#: Deepest level shown in a terminal (root, blocks, their parts, the parts' layers).
MODULE_DEPTH = 4
#: A name's indent per level of the tree. Not spaces: tabulate strips a cell's leading
#: spaces (keeping them takes tabulate 0.10's preserve_whitespace, or its global switch).
TREE_INDENT = "· "


def module_rows(modules: Sequence[ModuleStat], name: Namer = str, max_rows: int = MODULE_ROWS, max_depth: int = MODULE_DEPTH) -> list[list[Any]]:
    """The collapsed tree's rows (name indented by depth, class, calls, inclusive and self
    time, share, spread, top op, hint numbers), shared by the text and HTML tables; ``name``
    makes each name safe to show."""
    _name = name
    backward = has_backward(modules)
    rows = []
    shown, carried = visible_groups(modules, max_rows, max_depth)
    for g in shown:
        spread = g.spread
        top = g.first.top_ops[0][0] if g.first.top_ops else "-"
        row = [
            TREE_INDENT * g.depth + _name(g.label),
            _name(g.first.type or "-"),
            g.calls,
            fmt_us(g.time_us),
            fmt_us(g.self_time_us),
            f"{100 * g.share:.1f}%",
            "" if spread is None else f"{fmt_us(spread[0])}-{fmt_us(spread[1])} each",
            _name(top),
            ",".join(str(h + 1) for h in sorted({*g.hints, *carried.get(id(g), ())})),
        ]
        if backward:
            row.insert(5, fmt_us(g.backward_us))
        rows.append(row)
    return rows


def visible_groups(
    modules: Sequence[ModuleStat], max_rows: int = MODULE_ROWS, max_depth: int = MODULE_DEPTH
) -> tuple[list[ModuleGroup], dict[int, set[int]]]:
    """The rows shown (at most ``max_rows``, none deeper than ``max_depth``), and, by the
    ``id`` of a shown row, the hints of the rows left out below it: a hint placed on a module
    too deep or too small to show (Qwen2's rotary ``Func`` inside ``Func`` inside the
    attention) shows on the nearest row that holds it."""
    everything = collapse_repeats(modules)
    shown = [g for g in everything if g.depth <= max_depth][:max_rows]
    visible = {id(g) for g in shown}
    carried: dict[int, set[int]] = {}
    path: list[ModuleGroup] = []  # the row's ancestors: the rows come parents first
    for g in everything:
        del path[g.depth :]
        if id(g) not in visible and g.hints:
            holder = next((a for a in reversed(path) if id(a) in visible), None)
            if holder is not None:
                carried.setdefault(id(holder), set()).update(g.hints)
        path.append(g)
    return shown, carried


_HEADERS = ("Module", "Class", "Calls", "Total", "Self", "Share", "Spread", "Top op", "Hints")
#: With backward work given to the modules: forward's inclusive and own time, backward's.
_HEADERS_BACKWARD = ("Module", "Class", "Calls", "Forward", "Fwd self", "Backward", "Share", "Spread", "Top op", "Hints")


def has_backward(modules: Sequence[ModuleStat]) -> bool:
    """True where the capture's backward work was given to its modules."""
    return any(m.backward_cpu_us is not None for m in modules)


def _headers(modules: Sequence[ModuleStat]) -> tuple[str, ...]:
    return _HEADERS_BACKWARD if has_backward(modules) else _HEADERS


def render_modules(modules: Sequence[ModuleStat], name: Namer = str, max_rows: int = MODULE_ROWS) -> str:
    """The module table: each module's (or group of repeated layers') inclusive and self
    time, share, top op and the numbers of the hints in its code."""
    if not modules:
        return ""
    kind = "device" if modules[0].device_total_us is not None else "CPU"
    rows = module_rows(modules, name=name, max_rows=max_rows)
    text = tabulate(rows, headers=list(_headers(modules)), tablefmt="simple", disable_numparse=True)
    shown = len(collapse_repeats(modules, max_depth=MODULE_DEPTH))
    more = f"\n... {shown - len(rows)} more rows (result.to_dataframe('modules') has every module)" if shown > len(rows) else ""
    what = "forward and backward" if has_backward(modules) else "inclusive"
    return f"Modules ({kind} time, {what}; repeated layers folded, Spread: one layer's least-most):\n{text}{more}"


def modules_html(modules: Sequence[ModuleStat], max_rows: int = 40) -> str:
    """The module tree for the notebook: an indented table with a bar of each row's share."""
    if not modules:
        return ""
    body = []
    for g, row in zip(visible_groups(modules, max_rows)[0], module_rows(modules, max_rows=max_rows)):
        bar = f'<span style="display:inline-block;height:8px;width:{min(100, 100 * g.share):.0f}px;background:#4e79a7"></span>'
        cells = [html.escape(safe_text(c)) for c in row]
        cells[0] = f'<span style="padding-left:{g.depth}em">{html.escape(safe_text(g.label))}</span>'
        share = 6 if has_backward(modules) else 5
        cells[share] = f"{bar} {cells[share]}"
        body.append("<tr>" + "".join(f'<td style="text-align:left">{c}</td>' for c in cells) + "</tr>")
    head = "".join(f'<th style="text-align:left">{h}</th>' for h in _headers(modules))
    return f"<p><b>Modules</b> (inclusive time)</p><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


MODULE_COLUMNS = (
    "name", "type", "parent", "depth", "calls", "cpu_total_us", "self_cpu_us",
    "device_total_us", "self_device_us", "share", "top_op", "hints",
    "backward_cpu_us", "self_backward_cpu_us", "backward_device_us", "self_backward_device_us",
)


def module_records(modules: Sequence[ModuleStat]) -> list[dict[str, Any]]:
    """Every module as a flat record (:data:`MODULE_COLUMNS`), parents first; ``top_op`` is
    the costliest op the module ran itself."""
    records = [{**m.to_dict(), "top_op": m.top_ops[0][0] if m.top_ops else None, "hints": list(m.hints)} for m in modules]
    return [{k: r.get(k) for k in MODULE_COLUMNS} for r in records]


def group_label(group: ModuleGroup) -> str:
    """A group's label with its parent's name in front, as the page's tooltips show it."""
    parent = group.first.parent
    return group.label if parent is None else f"{parent}.{group.label}"


def modules_dataframe(modules: Sequence[ModuleStat]) -> Any:
    """The module tree as a pandas DataFrame indexed by qualified name, parents first."""
    return records_dataframe(module_records(modules), columns=list(MODULE_COLUMNS)).set_index("name")
