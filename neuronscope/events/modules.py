"""Module-call ranges (``nn.Module: <qualified name>``) taken out of an event table.

A capture labels each module call as a profiler range (:mod:`neuronscope.capture.modules`).
Those ranges are not regions the user named: :func:`split_module_ranges` gives a copy of the
table without them to summarise, so the op table and the regions read as without them, and
hands them to the module breakdown (:mod:`neuronscope.result.modules`) with the ops each holds.

Backward work is run by autograd, outside every module call: the profiler records each
backward function it runs as ``autograd::engine::evaluate_function: MmBackward0`` with the
sequence number (and forward thread) of the forward op that made it, and the forward op with
that number. :func:`sequence_links` reads those numbers from a live capture, so that the
breakdown gives each backward function to the module whose forward made it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuronscope.capture import torch_private
from neuronscope.events.table import KIND_ANNOTATION, KIND_OP, EventTable

__all__ = ["BACKWARD_PREFIX", "MODULE_RANGE_PREFIX", "ModuleRanges", "needs_links", "sequence_links", "split_module_ranges"]

#: The name autograd's engine gives the range of each backward function it runs.
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "

#: ``(thread, start ns, end ns)`` of an op -> ``(sequence number, forward thread)``.
Links = dict[tuple[int, int, int], tuple[int, int]]

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
    #: each op's autograd sequence number (-1: none or not read) and, for a backward
    #: function, the thread its forward ran on (0 otherwise); empty where not read
    op_seq: list[int] = field(default_factory=list)
    op_fwd_tids: list[int] = field(default_factory=list)
    has_device: bool = False

    def __len__(self) -> int:
        return len(self.names)


def split_module_ranges(table: EventTable, links: Links | None = None) -> tuple[ModuleRanges, EventTable]:
    """The module-call ranges of ``table`` with its ops, and a copy of ``table`` without them
    (what is summarised); ``table`` itself keeps them, as ranges, for the hint rules, which walk
    the profiler's event tree beside it. ``(empty, table)`` where the capture labelled none.
    ``links`` (:func:`sequence_links`) gives the ops their autograd sequence numbers."""
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
    if links:
        starts, ends, tids = table.starts, table.ends, table.tids
        seq = [links.get((tids[i], starts[i], ends[i]), (-1, 0)) for i in ops]
        found.op_seq = [s for s, _ in seq]
        found.op_fwd_tids = [t for _, t in seq]
    return found, table.without_rows(gone)


def needs_links(table: EventTable) -> bool:
    """True where ``table`` has module calls and backward functions to give them: only then
    are the sequence numbers worth reading."""
    names = set(table.names)
    return any(n.startswith(MODULE_RANGE_PREFIX) for n in names) and any(n.startswith(BACKWARD_PREFIX) for n in names)


def sequence_links(prof: Any) -> Links:
    """The autograd sequence numbers of a finished live capture's ops: forward ops that made
    a backward function, and the backward functions (with their forward's thread). Empty
    where the profiler's raw events lack them (an older torch)."""
    kineto = torch_private.kineto_results(prof)
    if kineto is None:
        return {}
    out: Links = {}
    try:
        for ev in kineto.events():
            seq = ev.sequence_nr()
            if seq >= 0:
                out[(ev.start_thread_id(), ev.start_ns(), ev.end_ns())] = (seq, ev.fwd_thread_id())
    except (AttributeError, RuntimeError, TypeError):
        return {}
    return out
