"""From raw profiler events to per-op totals, without ``key_averages()``.

``prof.key_averages()`` builds one Python ``FunctionEvent`` per event, which costs about 10 s
per 100,000 events on a 2-core machine. The raw ``_KinetoEvent`` list reads in about 0.1 s, so
neuronscope works from it: :func:`table_from_profiler` copies the few fields it needs into
parallel lists (an :class:`EventTable`), and :func:`summarize` computes self and total times with
one containment-stack pass per thread, as ``key_averages`` does. Chrome-trace files become the
same table in :mod:`neuronscope.trace`, so everything downstream is shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .result import OpStat, RegionStat

__all__ = [
    "KIND_OP",
    "KIND_ANNOTATION",
    "EventTable",
    "Summary",
    "IGNORED_NAMES",
    "table_from_profiler",
    "summarize",
]

KIND_OP = 0  #: an operator (``cpu_op``): aten ops, c10d ops, custom ops
KIND_ANNOTATION = 1  #: a labelled range (``user_annotation``): record_function, regions

#: Names that ``key_averages()`` drops; dropped here too so that the numbers agree with it.
IGNORED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)

#: Most distinct input-shape signatures kept per op: enough to tell layers apart, bounded so a
#: dynamic-shape workload cannot grow the result without limit.
MAX_SHAPES_PER_OP = 8


@dataclass
class EventTable:
    """The CPU-side events of a capture as parallel lists (one index per event).

    Device activity is folded in already: ``device_ns[i]`` is the device time of the kernels
    (or Neuron executions) launched directly by event ``i``; device work launched outside any
    op is in ``unattributed_device_ns``. ``has_device`` tells a capture with no device
    activity at all (device fields become None) from one whose ops launched nothing.
    """

    names: list[str] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    device_ns: list[int] = field(default_factory=list)
    shapes: list[Any] = field(default_factory=list)  # per event, or empty when not recorded
    has_device: bool = False
    unattributed_device_ns: int = 0
    device_event_count: int = 0
    raw_event_count: int = 0

    def __len__(self) -> int:
        return len(self.names)

    def append(
        self,
        name: str,
        kind: int,
        tid: int,
        start: int,
        end: int,
        device: int = 0,
        shapes: Any = None,
    ) -> None:
        self.names.append(name)
        self.kinds.append(kind)
        self.tids.append(tid)
        self.starts.append(start)
        self.ends.append(end)
        self.device_ns.append(device)
        if shapes is not None or self.shapes:
            if len(self.shapes) < len(self.names) - 1:
                self.shapes.extend([None] * (len(self.names) - 1 - len(self.shapes)))
            self.shapes.append(shapes)

    @property
    def span_ns(self) -> int:
        """From the first event's start to the last event's end."""
        if not self.starts:
            return 0
        return max(self.ends) - min(self.starts)


_CPU_ACTIVITIES = {"cpu_op": KIND_OP, "user_annotation": KIND_ANNOTATION}
# Kineto activity names of device work: CUDA/ROCm kernels, copies and sets, and PrivateUse1
# (Neuron) executions.
_DEVICE_ACTIVITIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "concurrent_kernel", "privateuse1"}
)


def _is_device_activity(activity: str) -> bool:
    return activity in _DEVICE_ACTIVITIES or (
        activity.startswith("privateuse1") and not activity.endswith(("runtime", "driver"))
    )


def table_from_profiler(prof: Any, record_shapes: bool = False) -> EventTable:
    """Read a finished ``torch.profiler.profile`` into an :class:`EventTable`.

    Reads ``prof.profiler.kineto_results.events()`` (the raw events) and links each device
    event to the op that launched it through ``linked_correlation_id``, the same link
    ``key_averages()`` uses.
    """
    kineto = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kineto is None:
        return EventTable()
    raw = kineto.events()
    table = EventTable(raw_event_count=len(raw))
    names, kinds, tids, starts, ends = table.names, table.kinds, table.tids, table.starts, table.ends
    device = table.device_ns
    shapes: list[Any] = table.shapes
    index_by_corr: dict[int, int] = {}
    pending_device: list[tuple[int, int]] = []  # (linked correlation, duration ns)
    ignored = IGNORED_NAMES
    cpu_kinds = _CPU_ACTIVITIES
    for ev in raw:
        activity = ev.activity_type()
        kind = cpu_kinds.get(activity)
        if kind is None:
            if _is_device_activity(activity):
                pending_device.append((ev.linked_correlation_id(), ev.duration_ns()))
            continue
        name = ev.name()
        if name in ignored:
            continue
        start = ev.start_ns()
        index_by_corr[ev.correlation_id()] = len(names)
        names.append(name)
        kinds.append(kind)
        tids.append(ev.start_thread_id())
        starts.append(start)
        ends.append(start + ev.duration_ns())
        device.append(0)
        if record_shapes:
            shapes.append(ev.shapes())
    attach_device_time(table, pending_device, index_by_corr)
    return table


def attach_device_time(
    table: EventTable, device_events: Iterable[tuple[int, int]], index_by_corr: dict[int, int]
) -> None:
    """Add each device event's duration to the event that launched it (by correlation id)."""
    for corr, duration in device_events:
        table.has_device = True
        table.device_event_count += 1
        idx = index_by_corr.get(corr)
        if idx is None:
            table.unattributed_device_ns += duration
        else:
            table.device_ns[idx] += duration


@dataclass
class Summary:
    """Per-op and per-region totals of an :class:`EventTable`."""

    ops: list[OpStat]
    regions: dict[str, RegionStat]
    span_us: float
    op_events: int


class _OpAcc:
    """Running totals of one op name (or of one op inside one region)."""

    __slots__ = ("calls", "self_ns", "total_ns", "self_dev", "total_dev", "shapes")

    def __init__(self) -> None:
        self.calls = 0
        self.self_ns = 0
        self.total_ns = 0
        self.self_dev = 0
        self.total_dev = 0
        self.shapes: list[Any] | None = None

    def to_opstat(self, name: str, has_device: bool) -> OpStat:
        return OpStat(
            name=name,
            calls=self.calls,
            self_cpu_us=self.self_ns / 1e3,
            cpu_total_us=self.total_ns / 1e3,
            self_device_us=self.self_dev / 1e3 if has_device else None,
            device_total_us=self.total_dev / 1e3 if has_device else None,
            input_shapes=[list(map(list, s)) for s in self.shapes or []],
        )


def _sort_key(op: OpStat) -> tuple[float, float]:
    return (op.time_us, op.cpu_total_us)


def summarize(table: EventTable) -> Summary:
    """Compute per-op calls, self/total CPU time and self/total device time, and per-region
    inclusive time with the ops inside, from one pass per thread over a containment stack.

    An event's children are the events nested inside it on the same thread (ops and
    annotations alike, as in ``key_averages``); self time is its duration less its direct
    children's durations, and its total device time is its own plus its descendants'.
    """
    n = len(table)
    names, kinds, tids, starts, ends, dev = (
        table.names,
        table.kinds,
        table.tids,
        table.starts,
        table.ends,
        table.device_ns,
    )
    shapes = table.shapes if len(table.shapes) == n else None
    child_ns = [0] * n
    dev_total = list(dev)

    by_thread: dict[int, list[int]] = {}
    for i in range(n):
        by_thread.setdefault(tids[i], []).append(i)

    ops: dict[str, _OpAcc] = {}
    region_ops: dict[str, dict[str, _OpAcc]] = {}
    region_time: dict[str, list[int]] = {}  # name -> [calls, inclusive ns, device ns]
    op_events = 0

    for indices in by_thread.values():
        # Parents first: earlier start, and for equal starts the longer event.
        indices.sort(key=lambda i: (starts[i], -ends[i]))
        stack: list[int] = []
        open_regions: list[str] = []

        def close(j: int) -> None:
            nonlocal op_events
            if stack:
                parent = stack[-1]
                child_ns[parent] += ends[j] - starts[j]
                dev_total[parent] += dev_total[j]
            if kinds[j] == KIND_ANNOTATION:
                open_regions.pop()
                acc_r = region_time.setdefault(names[j], [0, 0, 0])
                acc_r[0] += 1
                acc_r[1] += ends[j] - starts[j]
                acc_r[2] += dev_total[j]
                return
            op_events += 1
            name = names[j]
            self_ns = ends[j] - starts[j] - child_ns[j]
            acc = ops.get(name)
            if acc is None:
                acc = ops[name] = _OpAcc()
            acc.calls += 1
            acc.self_ns += self_ns
            acc.total_ns += ends[j] - starts[j]
            acc.self_dev += dev[j]
            acc.total_dev += dev_total[j]
            if shapes is not None and shapes[j] is not None:
                _add_shape(acc, shapes[j])
            for region in set(open_regions):
                racc = region_ops.setdefault(region, {}).get(name)
                if racc is None:
                    racc = region_ops[region][name] = _OpAcc()
                racc.calls += 1
                racc.self_ns += self_ns
                racc.total_ns += ends[j] - starts[j]
                racc.self_dev += dev[j]
                racc.total_dev += dev_total[j]

        for i in indices:
            while stack and ends[stack[-1]] <= starts[i]:
                close(stack.pop())
            stack.append(i)
            if kinds[i] == KIND_ANNOTATION:
                open_regions.append(names[i])
        while stack:
            close(stack.pop())

    has_device = table.has_device
    op_stats = [acc.to_opstat(name, has_device) for name, acc in ops.items()]
    op_stats.sort(key=_sort_key, reverse=True)
    regions: dict[str, RegionStat] = {}
    for name, (calls, incl_ns, dev_ns) in region_time.items():
        inner = [a.to_opstat(op, has_device) for op, a in region_ops.get(name, {}).items()]
        inner.sort(key=_sort_key, reverse=True)
        regions[name] = RegionStat(
            name=name,
            calls=calls,
            time_us=incl_ns / 1e3,
            device_time_us=dev_ns / 1e3 if has_device else None,
            ops=inner,
        )
    return Summary(ops=op_stats, regions=regions, span_us=table.span_ns / 1e3, op_events=op_events)


def _add_shape(acc: _OpAcc, shape: Any) -> None:
    if acc.shapes is None:
        acc.shapes = []
    if len(acc.shapes) < MAX_SHAPES_PER_OP and shape not in acc.shapes:
        acc.shapes.append(shape)
