"""The ops inside labelled ranges: what a variant's own code dispatched per call, what ran
nested inside those ops, and the costliest dispatched op (compare()'s ``Ops/call (all)`` and
``Top op`` columns, which therefore cannot disagree with each other)."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from neuronscope.compare import intervals as stats
from neuronscope.config import Options
from neuronscope.events import KIND_ANNOTATION, EventTable, table_from_profiler
from neuronscope.events.modules import split_module_ranges
from neuronscope.events.nesting import enclosing
from neuronscope.result.types import ProfileResult
from neuronscope.units import fmt_us

__all__ = ["NOT_WORK_OPS", "Profiled", "RangeOps", "dispatched_ops", "top_level_ops", "variant_figures"]

#: Top-level events that are bookkeeping, not work: Dynamo checks its cache before every call
#: of a compiled function. Left in, every compiled variant would count one op too many.
NOT_WORK_OPS = frozenset({"TorchDynamo Cache Lookup"})


@dataclass
class RangeOps:
    """The ops inside one labelled range: ``dispatched`` by the range's own code (ops nested
    in other ops left out), ``total`` (every op, nested ones included), and each dispatched
    op's inclusive time in microseconds."""

    dispatched: int = 0
    total: int = 0
    inclusive_us: dict[str, float] | None = None


def dispatched_ops(table: EventTable, range_names: list[str]) -> dict[str, RangeOps]:
    """The ops inside each named range (see :class:`RangeOps`). Ops inside user annotations
    within the range count as the range's own; :data:`NOT_WORK_OPS` are not counted.

    For the hand-written RMSNorm that is six dispatched ops (pow, mean, add, rsqrt, mul, mul),
    for ``torch.rms_norm`` one (``aten::rms_norm``, which on a CPU runs pow, mean, ... inside
    it: those count in ``total``), for a ``torch.compile``d function one compiled region.
    """
    wanted = set(range_names)
    out = {name: RangeOps(inclusive_us={}) for name in range_names}
    kinds, names, starts, ends = table.kinds, table.names, table.starts, table.ends
    for i, stack in enclosing(table):
        if kinds[i] == KIND_ANNOTATION or names[i] in NOT_WORK_OPS:
            continue
        nested = False
        for j in reversed(stack):
            if kinds[j] != KIND_ANNOTATION:
                nested = True  # inside another op: that op is the one dispatched
            elif names[j] in wanted:
                ops = out[names[j]]
                ops.total += 1
                if not nested:
                    ops.dispatched += 1
                    assert ops.inclusive_us is not None
                    ops.inclusive_us[names[i]] = ops.inclusive_us.get(names[i], 0.0) + (ends[i] - starts[i]) / 1e3
                break
    return out


def top_level_ops(table: EventTable, range_names: list[str]) -> dict[str, int]:
    """How many ops each named range dispatched itself (``RangeOps.dispatched``)."""
    return {name: ops.dispatched for name, ops in dispatched_ops(table, range_names).items()}


@dataclass
class Profiled:
    """What a variant's profiled calls gave."""

    result: ProfileResult
    prof: Any = None
    op_count: int = 0
    all_op_count: int | None = None
    top_op: str | None = None
    device_us: float | None = None
    calls_us: float = 0.0  # the profiled calls' inclusive time, together


def variant_figures(label: str, names: list[str], options: Options, result: ProfileResult | None, prof: Any) -> Profiled:
    """A variant's figures from its result and profile: ops per call, the costliest op, the
    profiled calls' time and device time."""
    assert result is not None
    # Module-call ranges are labels, not ops the variant dispatched (as in the result's tables).
    _, table = split_module_ranges(table_from_profiler(prof, record_shapes=options.record_shapes))
    per_range = dispatched_ops(table, names)
    seen = [per_range[n] for n in names if n in result.regions]
    profiled = Profiled(result=result, prof=prof)
    if seen:
        profiled.op_count = int(statistics.median(r.dispatched for r in seen))
        profiled.all_op_count = int(statistics.median(r.total for r in seen))
        inclusive: dict[str, float] = {}
        for r in seen:
            for op, us in (r.inclusive_us or {}).items():
                inclusive[op] = inclusive.get(op, 0.0) + us
        profiled.top_op = max(inclusive, key=lambda op: inclusive[op]) if inclusive else None
    regions = [result.regions[n] for n in names if n in result.regions]
    profiled.calls_us = sum(r.time_us for r in regions)
    if result.has_device_time:
        device = [r.device_time_us for r in regions if r.device_time_us is not None]
        profiled.device_us = statistics.median(device) if device else None
    note = stats.spread_note([r.time_us for r in regions], f"the {len(regions)} profiled calls of {label!r}", fmt_us)
    if note:
        profiled.result = dataclasses.replace(result, notes=[*result.notes, note])
    return profiled
