"""Module-call ranges (``nn.Module: <qualified name>``) taken out of an event table.

A capture labels each module call as a profiler range (:mod:`neuronscope.capture.modules`).
Those ranges are not regions the user named: :func:`split_module_ranges` gives a copy of the
table without them to summarise, so the op table and the regions read as without them, and
hands them to the module breakdown (:mod:`neuronscope.result.modules`) with the ops each holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from neuronscope.events.table import KIND_ANNOTATION, KIND_OP, EventTable

__all__ = ["MODULE_RANGE_PREFIX", "ModuleRanges", "split_module_ranges"]

#: The range name of a module call (the same text as the capture stage's).
MODULE_RANGE_PREFIX = "nn.Module: "


@dataclass
class ModuleRanges:
    """The module calls of a capture (qualified name, thread, start, end in ns), and a copy of
    its ops' intervals and device time for placing them in those calls."""

    names: list[str] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    op_names: list[str] = field(default_factory=list)
    op_tids: list[int] = field(default_factory=list)
    op_starts: list[int] = field(default_factory=list)
    op_ends: list[int] = field(default_factory=list)
    op_device_ns: list[int] = field(default_factory=list)
    has_device: bool = False

    def __len__(self) -> int:
        return len(self.names)


def split_module_ranges(table: EventTable) -> tuple[ModuleRanges, EventTable]:
    """The module-call ranges of ``table`` with its ops, and a copy of ``table`` without them
    (what is summarised); ``table`` itself keeps them, as ranges, for the hint rules, which walk
    the profiler's event tree beside it. ``(empty, table)`` where the capture labelled none."""
    names, kinds = table.names, table.kinds
    n = len(names)
    # A range, or an op where a trace (or another labeller) recorded the call as one.
    rows = [i for i in range(n) if kinds[i] <= KIND_ANNOTATION and names[i].startswith(MODULE_RANGE_PREFIX)]
    if not rows:
        return ModuleRanges(), table
    for i in rows:
        # torch records a fast record_function (what the hooks open) as an op; to the hint
        # rules, which walk the event tree beside this table, a module call is a range to
        # pass through, not an op that hides the ops inside it.
        kinds[i] = KIND_ANNOTATION
    cut = len(MODULE_RANGE_PREFIX)
    found = ModuleRanges(
        names=[names[i][cut:] for i in rows],
        tids=[table.tids[i] for i in rows],
        starts=[table.starts[i] for i in rows],
        ends=[table.ends[i] for i in rows],
        has_device=table.has_device,
    )
    gone = set(rows)
    ops = [i for i in range(n) if kinds[i] == KIND_OP and i not in gone]
    found.op_names = [names[i] for i in ops]
    found.op_tids = [table.tids[i] for i in ops]
    found.op_starts = [table.starts[i] for i in ops]
    found.op_ends = [table.ends[i] for i in ops]
    found.op_device_ns = [table.device_ns[i] for i in ops]
    return found, _without_rows(table, gone)


def _without_rows(table: EventTable, gone: set[int]) -> EventTable:
    """A copy of ``table`` without rows ``gone``, the rows that
    :attr:`EventTable.range_device_ns` is keyed by renumbered; the rest shared."""
    keep = [i for i in range(len(table.names)) if i not in gone]
    new_row = {old: new for new, old in enumerate(keep)}
    return replace(
        table,
        names=[table.names[i] for i in keep],
        kinds=[table.kinds[i] for i in keep],
        tids=[table.tids[i] for i in keep],
        starts=[table.starts[i] for i in keep],
        ends=[table.ends[i] for i in keep],
        device_ns=[table.device_ns[i] for i in keep],
        shapes=[table.shapes[i] if i < len(table.shapes) else None for i in keep] if table.shapes else [],
        flags=[table.flags[i] if i < len(table.flags) else 0 for i in keep] if table.flags else [],
        range_device_ns={new_row[r]: ns for r, ns in table.range_device_ns.items() if r in new_row},
    )
