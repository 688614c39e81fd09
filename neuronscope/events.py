"""From raw profiler events to per-op totals, without ``key_averages()``.

``prof.key_averages()`` builds one Python ``FunctionEvent`` per event, about 10 s per 100,000
events on a 2-core machine (more under load), and about 2 KB of memory each. neuronscope reads
the raw ``_KinetoEvent`` list instead (``prof.profiler.kineto_results.events()``, in torch since
1.8): :func:`table_from_profiler` reads the few fields it needs, one C-level ``map`` per field,
into parallel lists (an :class:`EventTable`), and :func:`summarize` computes the same calls, self
and total CPU time and self and total device time as ``key_averages()`` with array operations
(numpy) rather than a Python object per event. Chrome-trace files become the same table in
:mod:`neuronscope.trace`, so everything downstream is shared.

How ``key_averages()`` counts, and so how this module counts (torch 2.4 to 2.13, checked by
experiment and in ``tests/test_events.py``):

- Nesting is per thread over every CPU-side event it keeps: ops, ``record_function`` ranges
  and device-runtime calls (``cudaLaunchKernel``; their thread becomes that of the op that
  launched them). Events sorted by (start, -end); an event is the child of the innermost open
  event that contains it, and an event that only partly overlaps the open one closes it. Self
  time is the duration less the direct children's. Runtime calls therefore lower the self time
  of the op around them; they live in :attr:`EventTable.others` (with the Python frames) so
  that code walking the ops never meets them.
- An event whose parent has the same name and no other child is folded into that parent
  (``EventList._remove_dup_nodes``): one call fewer, the parent's self time keeps both, and the
  parent's own device time is replaced by the child's.
- Ranges that start and end on different threads (async) nest nothing: self time 0.
- ``ProfilerStep#N`` names count as ``ProfilerStep*``.
- Names in :data:`IGNORED_NAMES` are dropped.

Where neuronscope differs on purpose: Python frames (``with_stack=True``) are neither ops nor
children in the nesting, so an op that calls back into Python (a compiled graph's generated
code, a Python kernel) keeps that time as its self time, where ``key_averages()`` moves it to
the frame's row (see :func:`_without_python_frames`); ``gpu_user_annotation`` spans are not
device work (they would double the kernels they cover); and top-level ``[memory]`` markers of
``profile_memory=True`` are not ops.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .result import OpStat, RegionStat

__all__ = [
    "FLAG_ASYNC",
    "FLAG_LEGACY_DEVICE",
    "IGNORED_NAMES",
    "KIND_ANNOTATION",
    "KIND_OP",
    "KIND_PYTHON",
    "KIND_RUNTIME",
    "EventTable",
    "Summary",
    "attach_device_time",
    "gc_paused",
    "summarize",
    "table_from_profiler",
]

KIND_OP = 0  #: an operator (``cpu_op``): aten ops, c10d ops, custom ops
KIND_ANNOTATION = 1  #: a labelled range (``user_annotation``): record_function, regions
#: A Python frame (``python_function``, with ``with_stack=True``). Only in
#: :attr:`EventTable.others`: never an op, and no child in :func:`summarize`'s nesting.
KIND_PYTHON = 2
#: Any other CPU-side activity: device-runtime and driver calls (``cudaLaunchKernel``,
#: ``cudaDeviceSynchronize``, PrivateUse1 runtime), instant events. Only in
#: :attr:`EventTable.others`; reported as ops, as ``key_averages()`` does.
KIND_RUNTIME = 3

FLAG_ASYNC = 1  #: started and ended on different threads: nests nothing, self time 0
#: Device time came from the op itself (``privateuse1_elapsed_us``), not from device events:
#: ``key_averages`` then leaves its children's device time out of its total.
FLAG_LEGACY_DEVICE = 2

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

#: Raw events read per slice: bounds the short-lived Python objects (activity strings, names)
#: alive at once to a few megabytes however large the capture.
READ_CHUNK = 1 << 16


@dataclass
class EventTable:
    """The CPU-side events of a capture as parallel lists (one index per event).

    ``names``/``kinds`` hold ops (:data:`KIND_OP`) and ranges (:data:`KIND_ANNOTATION`).
    Device activity is folded in already: ``device_ns[i]`` is the device time of the kernels
    (or Neuron executions) launched directly by event ``i``; device work launched outside any
    op is in ``unattributed_device_ns``. ``has_device`` tells a capture with no device
    activity at all (device fields become None) from one whose ops launched nothing.

    ``flags`` is per event (:data:`FLAG_ASYNC`, :data:`FLAG_LEGACY_DEVICE`), or empty when no
    event has one. ``others`` holds the CPU-side events that are neither ops nor ranges (Python
    frames, device-runtime calls) with the same fields, or None: :func:`summarize` nests the
    runtime calls as ``key_averages()`` does, and leaves the Python frames out.
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
    flags: list[int] = field(default_factory=list)  # per event, or empty when all are 0
    others: EventTable | None = None
    #: thread -> its process, where a table holds several (a trace file); else empty
    processes: dict[int, Any] = field(default_factory=dict)

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
        flags: int = 0,
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
        if flags or self.flags:
            if len(self.flags) < len(self.names) - 1:
                self.flags.extend([0] * (len(self.names) - 1 - len(self.flags)))
            self.flags.append(flags)

    def add_other(self, name: str, kind: int, tid: int, start: int, end: int) -> None:
        """Add a Python frame (:data:`KIND_PYTHON`) or runtime call (:data:`KIND_RUNTIME`)."""
        if self.others is None:
            self.others = EventTable()
        self.others.append(name, kind, tid, start, end)

    @property
    def span_ns(self) -> int:
        """From the first event's start to the last event's end (ops and ranges)."""
        if not self.starts:
            return 0
        return max(self.ends) - min(self.starts)


# ---- reading a live capture ---------------------------------------------------------------

_DEVICE = -1  # device work: its duration goes to the op that launched it
_SKIP = -2  # neither CPU-side nor device work that key_averages attributes

_FIXED_CLASSES = {
    "cpu_op": KIND_OP,
    "user_annotation": KIND_ANNOTATION,
    "python_function": KIND_PYTHON,
    # Allocation markers: their device_type() is the allocation's device, not where they ran.
    "cpu_instant_event": KIND_RUNTIME,
    # The device-side copy of a record_function range: a span over kernels, not work.
    "gpu_user_annotation": _SKIP,
    # TorchNeuron (Neuron docs): dispatch on the op's thread, as cudaLaunchKernel; device
    # execution (stream id as thread id), linked to the op, as a kernel. Both CPU-typed in torch.
    "privateuse1_runtime": KIND_RUNTIME,
    "privateuse1_driver": _DEVICE,
}
# Device types whose linked events key_averages adds to an op's device time.
_DEVICE_TYPES = frozenset({"CUDA", "PrivateUse1", "XPU"})


def _classify(activity: str, sample: Any) -> int:
    kind = _FIXED_CLASSES.get(activity)
    if kind is not None:
        return kind
    try:
        dtype = sample.device_type()
        dname = str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
    except Exception:
        dname = "CPU"
    if dname == "CPU":
        return KIND_RUNTIME
    if dname in _DEVICE_TYPES:
        return _DEVICE
    return _SKIP


def _read_names(getter: Any, events: list[Any], canon: dict[str, str]) -> list[str]:
    """``getter(e)`` for each event, each distinct string stored once (``canon``)."""
    try:
        got = list(map(getter, events))
    except UnicodeDecodeError:
        # Seen once, rarely, for a Python frame of a builtin: keep the capture, mark the name.
        got = []
        for e in events:
            try:
                got.append(getter(e))
            except UnicodeDecodeError:
                got.append("<undecodable name>")
    return list(map(canon.setdefault, got, got))


def table_from_profiler(prof: Any, record_shapes: bool = False) -> EventTable:
    """Read a finished ``torch.profiler.profile`` into an :class:`EventTable`.

    Reads ``prof.profiler.kineto_results.events()`` (the raw events), a field at a time, and
    links each device event to the op that launched it through ``linked_correlation_id``, the
    same link ``key_averages()`` uses.
    """
    kineto = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kineto is None:
        return EventTable()
    use_device = getattr(getattr(prof, "profiler", None), "use_device", None)
    legacy_device = False
    if use_device:
        try:
            import torch

            legacy_device = use_device == torch._C._get_privateuse1_backend_name()
        except Exception:
            legacy_device = False
    with gc_paused():
        raw = kineto.events()
        if raw and not all(hasattr(type(raw[0]), name) for name in _ACCESSORS):
            # An older torch whose raw events lack an accessor read here: take torch's own
            # FunctionEvents (key_averages' input; slow, but the same numbers).
            del raw
            return _table_from_function_events(prof, record_shapes)
        return _table_from_events(raw, record_shapes, legacy_device)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while tens of thousands of objects are built (raw
    events read, a trace parsed, an op graph made): each collection would walk them all
    again, a third to a half of the time on big captures. Nothing built here makes reference
    cycles, so reference counting frees it all."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


#: The ``_KinetoEvent`` accessors the fast path reads (all in torch 2.4 and later, the oldest
#: torch neuronscope supports; ``is_hidden_event`` is read where it exists).
_ACCESSORS = (
    "activity_type",
    "name",
    "start_ns",
    "end_ns",
    "duration_ns",
    "start_thread_id",
    "end_thread_id",
    "correlation_id",
    "linked_correlation_id",
    "device_type",
    "shapes",
)


def _table_from_function_events(prof: Any, record_shapes: bool) -> EventTable:
    """The table from ``prof.events()``: torch's FunctionEvents, with device time attached."""
    table = EventTable()
    events = prof.events() or []
    table.raw_event_count = len(events)
    use_device = getattr(getattr(prof, "profiler", None), "use_device", None)
    for fe in events:
        dtype = str(getattr(fe.device_type, "name", fe.device_type)).rsplit(".", 1)[-1]
        if dtype != "CPU" or fe.name in IGNORED_NAMES:
            continue
        start = round(fe.time_range.start * 1000)
        end = round(fe.time_range.end * 1000)
        tid = int(fe.thread)
        if getattr(fe, "is_python_function", False):
            table.add_other(fe.name, KIND_PYTHON, tid, start, end)
            continue
        kind = KIND_ANNOTATION if getattr(fe, "is_user_annotation", False) else KIND_OP
        flags = (FLAG_ASYNC if fe.is_async else 0) | (FLAG_LEGACY_DEVICE if getattr(fe, "is_legacy", False) else 0)
        device = round(sum(k.duration for k in fe.kernels) * 1000)
        if device:
            table.has_device = True
        table.append(fe.name, kind, tid, start, end, device, fe.input_shapes if record_shapes else None, flags)
    if use_device and use_device != "cpu":
        table.has_device = table.has_device or any(
            str(getattr(fe.device_type, "name", fe.device_type)).rsplit(".", 1)[-1] != "CPU" for fe in events
        )
    return table


def _table_from_events(raw: list[Any], record_shapes: bool, legacy_device: bool) -> EventTable:
    table = EventTable(raw_event_count=len(raw))
    if not raw:
        return table
    ev_type = type(raw[0])
    get_act = ev_type.activity_type
    get_name, get_start, get_end, get_tid = ev_type.name, ev_type.start_ns, ev_type.end_ns, ev_type.start_thread_id
    classes: dict[str, int] = {}
    canon: dict[str, str] = {}
    ignored = IGNORED_NAMES

    main_events: list[Any] = []  # ops and annotations, in capture order
    main_kinds: list[int] = []
    other_events: list[Any] = []  # Python frames, runtime calls
    other_kinds: list[int] = []
    device_events: list[Any] = []
    for base in range(0, len(raw), READ_CHUNK):
        chunk = raw[base : base + READ_CHUNK]
        acts = list(map(get_act, chunk))
        for act in set(acts).difference(classes):
            classes[act] = _classify(act, chunk[acts.index(act)])
        kinds = list(map(classes.__getitem__, acts))
        del acts
        if all(k <= KIND_ANNOTATION and k >= 0 for k in set(kinds)):
            main_events.extend(chunk)
            main_kinds.extend(kinds)
            continue
        main_mask = [0 <= k <= KIND_ANNOTATION for k in kinds]
        main_events.extend(itertools.compress(chunk, main_mask))
        main_kinds.extend(itertools.compress(kinds, main_mask))
        other_mask = [k >= KIND_PYTHON for k in kinds]
        other_events.extend(itertools.compress(chunk, other_mask))
        other_kinds.extend(itertools.compress(kinds, other_mask))
        device_events.extend(itertools.compress(chunk, [k == _DEVICE for k in kinds]))
    del raw

    names = _read_chunked(get_name, main_events, canon)
    if ignored.intersection(canon):
        keep = [nm not in ignored for nm in names]
        main_events = list(itertools.compress(main_events, keep))
        main_kinds = list(itertools.compress(main_kinds, keep))
        names = list(itertools.compress(names, keep))
    table.names = names
    table.kinds = main_kinds
    table.starts = list(map(get_start, main_events))
    table.ends = list(map(get_end, main_events))
    table.tids = list(map(get_tid, main_events))
    table.device_ns = [0] * len(names)
    if record_shapes:
        table.shapes = _read_shapes(ev_type.shapes, main_events, names)

    # Ranges may end on another thread than they started on (async): key_averages nests
    # nothing under them. Ops cannot (a dispatcher call returns on its own thread).
    ann = list(itertools.compress(range(len(main_kinds)), map(KIND_ANNOTATION.__eq__, main_kinds)))
    if ann:
        flags: list[int] | None = None
        hidden: list[int] = []
        for i in ann:
            e = main_events[i]
            if getattr(e, "is_hidden_event", _false)():
                hidden.append(i)
            elif getattr(e, "is_async", _false)() or e.end_thread_id() != table.tids[i]:
                if flags is None:
                    flags = [0] * len(names)
                flags[i] |= FLAG_ASYNC
        if flags is not None:
            table.flags = flags
        if hidden:  # key_averages drops them too
            _drop_rows(table, hidden)
            drop = set(hidden)
            main_events = [e for i, e in enumerate(main_events) if i not in drop]

    if legacy_device:
        # A PrivateUse1 backend that reports each op's device time itself (key_averages'
        # "legacy" path); Neuron builds that emit device events take the linked path below.
        elapsed = list(map(ev_type.privateuse1_elapsed_us, main_events))
        if any(us > 0 for us in elapsed):
            table.has_device = True
            if not table.flags:
                table.flags = [0] * len(table.names)
            dev, fl = table.device_ns, table.flags
            for i, us in enumerate(elapsed):
                if us > 0 and not fl[i] & FLAG_ASYNC:
                    dev[i] += int(us * 1000)
                    fl[i] |= FLAG_LEGACY_DEVICE

    others: EventTable | None = None
    if other_events:
        o_names = _read_chunked(get_name, other_events, canon)
        keep = [nm not in ignored for nm in o_names]
        if not all(keep):
            other_events = list(itertools.compress(other_events, keep))
            other_kinds = list(itertools.compress(other_kinds, keep))
            o_names = list(itertools.compress(o_names, keep))
        if other_events:
            others = EventTable(names=o_names, kinds=other_kinds)
            others.starts = list(map(get_start, other_events))
            others.ends = list(map(get_end, other_events))
            others.tids = list(map(get_tid, other_events))
            others.device_ns = [0] * len(o_names)
            table.others = others

    if device_events or (others is not None and KIND_RUNTIME in set(others.kinds)):
        _link_device(table, ev_type, main_events, device_events, other_events)
    return table


def _false() -> bool:
    return False


def _read_chunked(getter: Any, events: list[Any], canon: dict[str, str]) -> list[str]:
    out: list[str] = []
    for base in range(0, len(events), READ_CHUNK):
        out.extend(_read_names(getter, events[base : base + READ_CHUNK], canon))
    return out


def _read_shapes(getter: Any, events: list[Any], names: list[str]) -> list[Any]:
    """Each event's input shapes, one list shared by the calls of an op that repeat the shapes
    of its previous call: a training loop repeats a few signatures, and a list of lists per
    event would otherwise be the largest part of the table (about 200 bytes an event)."""
    out: list[Any] = []
    last: dict[str, Any] = {}
    get = last.get
    for base in range(0, len(events), READ_CHUNK):
        chunk = list(map(getter, events[base : base + READ_CHUNK]))
        for j, name in enumerate(names[base : base + READ_CHUNK]):
            shape = chunk[j]
            prev = get(name)
            if prev == shape:
                chunk[j] = prev
            else:
                last[name] = shape
        out.extend(chunk)
    return out


def _drop_rows(table: EventTable, rows: list[int]) -> None:
    drop = set(rows)
    keep = [i not in drop for i in range(len(table.names))]
    for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns", "shapes", "flags"):
        lst = getattr(table, attr)
        if lst:
            setattr(table, attr, list(itertools.compress(lst, keep)))


def _link_device(
    table: EventTable, ev_type: Any, main_events: list[Any], device_events: list[Any], other_events: list[Any]
) -> None:
    """Device time to the op that launched it; runtime calls to the thread of that op."""
    corr = list(map(ev_type.correlation_id, main_events))
    linked = list(map(ev_type.linked_correlation_id, main_events))
    flags = table.flags
    # Only "frontend" events (linked id 0), CPU and synchronous, take device time.
    index_by_corr = {
        c: i for i, c in enumerate(corr) if c and not linked[i] and not (flags and flags[i] & FLAG_ASYNC)
    }
    if device_events:
        d_linked = list(map(ev_type.linked_correlation_id, device_events))
        d_dur = list(map(ev_type.duration_ns, device_events))
        attach_device_time(table, zip(d_linked, d_dur), index_by_corr)
    others = table.others
    if others is not None and other_events:
        o_linked = list(map(ev_type.linked_correlation_id, other_events))
        tids = table.tids
        o_tids = others.tids
        for j, c in enumerate(o_linked):
            if c > 0:
                i = index_by_corr.get(c)
                if i is not None:
                    o_tids[j] = tids[i]


def attach_device_time(
    table: EventTable, device_events: Iterable[tuple[int, int]], index_by_corr: dict[int, int]
) -> None:
    """Add each device event's duration to the event that launched it (by correlation id)."""
    dev = table.device_ns
    get = index_by_corr.get
    count = 0
    lost = 0
    for corr, duration in device_events:
        count += 1
        idx = get(corr)
        if idx is None:
            lost += duration
        else:
            dev[idx] += duration
    if count:
        table.has_device = True
        table.device_event_count += count
        table.unattributed_device_ns += lost


# ---- summarizing --------------------------------------------------------------------------


@dataclass
class Summary:
    """Per-op and per-region totals of an :class:`EventTable`."""

    ops: list[OpStat]
    regions: dict[str, RegionStat]
    span_us: float
    op_events: int
    notes: list[str] = field(default_factory=list)  # what the totals leave out, for the result


def _sort_key(op: OpStat) -> tuple[float, float]:
    return (op.time_us, op.cpu_total_us)


def _agg_name(name: str) -> str:
    """The name key_averages groups an event under."""
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


def _int_array(values: list[int]) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:  # thread ids beyond int64: number them instead
        codes: dict[int, int] = {}
        return np.array([codes.setdefault(v, len(codes)) for v in values], dtype=np.int64)


def _parents(starts: np.ndarray, ends: np.ndarray, new_thread: np.ndarray) -> np.ndarray:
    """Parent of each event, as ``key_averages`` nests them; events sorted by thread, then
    (start, -end). Returns positions in that order, -1 for none.

    key_averages walks a stack: an event closes the open ones that end before it starts or
    that it outlasts, and becomes the child of the one left on top. That top is the nearest
    earlier event (same thread) whose end is at least this event's end, and after this
    event's start: ``end >= thr`` with ``thr = end``, or ``start + 1`` for an instant. Found
    for all events at once by pointer jumping: ``ans[i]`` starts at ``i - 1`` and, while the
    candidate ends too early, jumps to the candidate's own candidate. Everything skipped ends
    before the candidate's threshold, which is at most ``thr[i]``, so no jump passes the answer;
    the events that have no parent at all are settled first, from the running maximum end.
    """
    m = len(starts)
    thr = np.where(ends > starts, ends, starts + 1)
    ans = np.arange(-1, m - 1, dtype=np.int64)
    ans[new_thread] = -1
    # Running max of ends within each thread, up to the previous event.
    seg_starts = np.flatnonzero(new_thread)
    run_max = np.empty(m, dtype=np.int64)
    bounds = list(seg_starts) + [m]
    for a, b in itertools.pairwise(bounds):
        np.maximum.accumulate(ends[a:b], out=run_max[a:b])
    before = np.empty(m, dtype=np.int64)
    before[0] = -1
    before[1:] = run_max[:-1]
    orphan = new_thread | (before < thr)
    ans[orphan] = -1
    todo = np.flatnonzero(~orphan)
    while todo.size:
        cand = ans[todo]
        miss = ends[cand] < thr[todo]
        todo = todo[miss]
        if not todo.size:
            break
        nxt = ans[cand[miss]]
        ans[todo] = nxt
        todo = todo[nxt >= 0]
    return ans


def _without_python_frames(others: EventTable) -> EventTable | None:
    """``others`` less its Python frames (``with_stack=True``), or None when nothing is left.

    A frame is no child in the nesting here, so the time an op spends in Python that it calls
    back into (the generated code of a compiled graph, a Python kernel, a custom autograd
    Function's backward) stays that op's self time. ``key_averages()`` gives it to the frame's
    own row, which is not an op: with ``with_stack=True`` a compiled graph's work would drop
    out of the op table, and a comparison of eager and compiled code would be off by 100x.
    """
    kinds = others.kinds
    if KIND_PYTHON not in kinds:
        return others
    keep = [k != KIND_PYTHON for k in kinds]
    if not any(keep):
        return None

    def kept(values: list[Any]) -> list[Any]:
        return list(itertools.compress(values, keep))

    return EventTable(
        names=kept(others.names),
        kinds=kept(kinds),
        tids=kept(others.tids),
        starts=kept(others.starts),
        ends=kept(others.ends),
        device_ns=kept(others.device_ns),
    )


def summarize(table: EventTable) -> Summary:
    """Compute per-op calls, self/total CPU time and self/total device time, and per-region
    inclusive time with the ops inside, as ``key_averages()`` would (see the module notes).

    An event's children are the events nested directly inside it on the same thread (ops,
    ranges and runtime calls alike; not Python frames); self time is its duration less its
    children's, and its total device time is its own plus its descendants'. A region's ops
    are all the ops nested inside it, at any depth, and those that other threads of its
    process started while it was open (autograd's backward threads, TorchScript forks; by
    default a capture records only threads working for the one that started it); its device time is
    what all of them launched. An op counts once per region name even where ranges of one
    name nest.
    """
    n_main = len(table)
    others = _without_python_frames(table.others) if table.others is not None and len(table.others) else None
    n_other = len(others) if others is not None else 0
    n = n_main + n_other
    if n_main == 0:
        return Summary(ops=[], regions={}, span_us=0.0, op_events=0)
    has_device = table.has_device

    def col(attr: str) -> list[Any]:
        main = getattr(table, attr)
        return main if others is None else main + getattr(others, attr)

    # Name codes, with key_averages' grouping applied.
    def all_names() -> Iterable[str]:
        return table.names if others is None else itertools.chain(table.names, others.names)

    key_code: dict[str, int] = {}
    code_of: dict[str, int] = {}
    for nm in dict.fromkeys(all_names()):
        code_of[nm] = key_code.setdefault(_agg_name(nm), len(key_code))
    key_names = list(key_code)
    n_codes = len(key_names)
    codes = np.fromiter(map(code_of.__getitem__, all_names()), dtype=np.int64, count=n)
    kinds = np.array(col("kinds"), dtype=np.int8)
    tids = _int_array(col("tids"))
    starts = np.array(col("starts"), dtype=np.int64)
    ends = np.array(col("ends"), dtype=np.int64)
    dur = ends - starts
    flags = np.zeros(n, dtype=np.int8)
    if table.flags and len(table.flags) == n_main:
        flags[:n_main] = table.flags
    is_async = (flags & FLAG_ASYNC) != 0

    # ---- nesting (sync events only), in (thread, start, -end) order ----
    sync = np.flatnonzero(~is_async) if is_async.any() else np.arange(n)
    order = sync[np.lexsort((-ends[sync], starts[sync], tids[sync]))]
    m = len(order)
    s_start, s_end, s_tid = starts[order], ends[order], tids[order]
    new_thread = np.ones(m, dtype=bool)
    new_thread[1:] = s_tid[1:] != s_tid[:-1]
    parent = _parents(s_start, s_end, new_thread)
    has_p = parent >= 0
    p_idx = parent[has_p]
    s_dur = s_end - s_start
    s_code = codes[order]
    s_kind = kinds[order]
    self_ns = s_dur - np.bincount(p_idx, weights=s_dur[has_p], minlength=m).astype(np.int64)

    # key_averages folds an event into a same-named parent whose only child it is.
    n_children = np.bincount(p_idx, minlength=m)
    safe_p = np.where(has_p, parent, 0)
    folded = has_p & (s_code[safe_p] == s_code) & (n_children[safe_p] == 1)
    s_dev_own: np.ndarray | None = None
    if has_device:
        dev_all = np.zeros(n, dtype=np.int64)
        dev_all[:n_main] = table.device_ns
        s_dev_own = dev_all[order]
    if folded.any():
        for i in np.flatnonzero(folded)[::-1].tolist():  # children after parents: bottom-up
            p = int(parent[i])
            self_ns[p] += self_ns[i]
            if s_dev_own is not None:
                s_dev_own[p] = s_dev_own[i]
                s_dev_own[i] = 0

    # ---- device totals: own plus descendants' (a legacy event counts only its own) ----
    s_dev_total = s_dev_self = None
    if s_dev_own is not None:
        s_dev_total = s_dev_own.copy()
        # A folded event is gone in key_averages: its children count as its parent's, so it
        # must pass everything up, whatever it was.
        legacy = ((flags[order] & FLAG_LEGACY_DEVICE) != 0) & ~folded
        any_legacy = bool(legacy.any())
        pos = np.flatnonzero(s_dev_own)
        w = s_dev_own[pos]
        while pos.size:
            up = parent[pos]
            keep = up >= 0
            if any_legacy:
                keep &= ~legacy[np.where(keep, up, 0)]
            pos, w = up[keep], w[keep]
            np.add.at(s_dev_total, pos, w)
        s_dev_self = s_dev_total - np.bincount(p_idx, weights=s_dev_total[has_p], minlength=m).astype(np.int64)

    # ---- ops ----
    s_is_op = ((s_kind == KIND_OP) | (s_kind == KIND_RUNTIME)) & ~folded
    op_pos = np.flatnonzero(s_is_op)
    op_codes = s_code[op_pos]
    calls = np.bincount(op_codes, minlength=n_codes)
    self_sum = np.bincount(op_codes, weights=self_ns[op_pos], minlength=n_codes)
    total_sum = np.bincount(op_codes, weights=s_dur[op_pos], minlength=n_codes)
    dev_self_sum = dev_total_sum = None
    if s_dev_self is not None and s_dev_total is not None:
        dev_self_sum = np.bincount(op_codes, weights=s_dev_self[op_pos], minlength=n_codes)
        dev_total_sum = np.bincount(op_codes, weights=s_dev_total[op_pos], minlength=n_codes)
    a_idx = np.flatnonzero(is_async)
    a_is_op = a_idx[(kinds[a_idx] == KIND_OP) | (kinds[a_idx] == KIND_RUNTIME)] if a_idx.size else a_idx
    if a_is_op.size:  # async: a call and its duration, no self time, no device time
        calls += np.bincount(codes[a_is_op], minlength=n_codes)
        total_sum += np.bincount(codes[a_is_op], weights=dur[a_is_op], minlength=n_codes)

    shapes_by_code: dict[int, list[Any]] = {}
    if len(table.shapes) == n_main:
        gone = np.zeros(n, dtype=bool)  # folded events: key_averages never shows their shapes
        gone[order[folded]] = True
        shapes_by_code = _shapes(table, codes[:n_main], (kinds[:n_main] == KIND_OP) & ~gone[:n_main])
    op_stats: list[OpStat] = []
    calls_l = calls.tolist()
    self_l, total_l = self_sum.tolist(), total_sum.tolist()
    dself_l = dev_self_sum.tolist() if dev_self_sum is not None else None
    dtotal_l = dev_total_sum.tolist() if dev_total_sum is not None else None
    for c in np.flatnonzero(calls).tolist():
        op_stats.append(
            OpStat(
                name=key_names[c],
                calls=calls_l[c],
                self_cpu_us=round(self_l[c]) / 1e3,
                cpu_total_us=round(total_l[c]) / 1e3,
                self_device_us=(round(dself_l[c]) / 1e3 if dself_l is not None else 0.0) if has_device else None,
                device_total_us=(round(dtotal_l[c]) / 1e3 if dtotal_l is not None else 0.0) if has_device else None,
                input_shapes=[list(map(list, s)) for s in shapes_by_code.get(c, ())],
            )
        )
    op_stats.sort(key=_sort_key, reverse=True)
    op_events = int(calls.sum())

    # ---- regions: each range name, its inclusive time and the ops inside it ----
    regions: dict[str, RegionStat] = {}
    notes: list[str] = []
    ann_all = np.flatnonzero(kinds == KIND_ANNOTATION)
    if ann_all.size:
        r_calls = np.bincount(codes[ann_all], minlength=n_codes)
        r_time = np.bincount(codes[ann_all], weights=dur[ann_all], minlength=n_codes)
        r_dev = None
        if s_dev_total is not None:
            s_ann = np.flatnonzero(s_kind == KIND_ANNOTATION)
            r_dev = np.bincount(s_code[s_ann], weights=s_dev_total[s_ann], minlength=n_codes)
        inner = _region_ops(parent, s_kind, s_code, op_pos, n_codes)
        # Work the range's thread handed to other threads of its process while it was open
        # (CUDA backward runs on autograd's device threads while the caller waits in
        # ``## backward ##``): the range's too. By default a capture records only the threads
        # working for the one that started it (not so with profile_all_threads=True).
        cross = _other_thread_work(s_start, s_end, s_tid, s_kind, table.processes, n_main, order)
        if cross is _TOO_MANY:
            notes.append(
                "regions count only their own thread's work here: the other threads' work inside "
                f"them would be over {MAX_CROSS_PAIRS:,} (range, event) pairs"
            )
        elif cross is not None:
            reg_x, ev_x = cross
            keys = ev_x * n_codes + s_code[reg_x]
            # Once per range name, and not where the event's own thread has a range of that
            # name open around it (its own nesting counts it already).
            own = _region_ops(parent, s_kind, s_code, np.unique(ev_x), n_codes)
            if own is not None:
                keys = np.setdiff1d(keys, own[2] * n_codes + own[0])
            ev_x, reg_cx = np.divmod(np.unique(keys), n_codes)
            if r_dev is not None and s_dev_own is not None:
                r_dev += np.bincount(reg_cx, weights=s_dev_own[ev_x], minlength=n_codes).astype(r_dev.dtype)
            is_op_x = s_is_op[ev_x]
            ev_x, reg_cx = ev_x[is_op_x], reg_cx[is_op_x]
            if inner is None:
                inner = (reg_cx, s_code[ev_x], ev_x)
            else:
                both = np.unique(np.concatenate([inner[2] * n_codes + inner[0], ev_x * n_codes + reg_cx]))
                ev_all, reg_all = np.divmod(both, n_codes)
                inner = (reg_all, s_code[ev_all], ev_all)
        per_region: dict[int, list[OpStat]] = {}
        if inner is not None:
            reg_c, op_c, ev = inner
            key = reg_c * n_codes + op_c
            uniq, inv = np.unique(key, return_inverse=True)
            g_calls = np.bincount(inv, minlength=len(uniq)).tolist()
            g_self = np.bincount(inv, weights=self_ns[ev], minlength=len(uniq)).tolist()
            g_total = np.bincount(inv, weights=s_dur[ev], minlength=len(uniq)).tolist()
            g_dself = g_dtotal = None
            if s_dev_self is not None and s_dev_total is not None:
                g_dself = np.bincount(inv, weights=s_dev_self[ev], minlength=len(uniq)).tolist()
                g_dtotal = np.bincount(inv, weights=s_dev_total[ev], minlength=len(uniq)).tolist()
            for g, k in enumerate(uniq.tolist()):
                rc, oc = divmod(k, n_codes)
                per_region.setdefault(rc, []).append(
                    OpStat(
                        name=key_names[oc],
                        calls=g_calls[g],
                        self_cpu_us=round(g_self[g]) / 1e3,
                        cpu_total_us=round(g_total[g]) / 1e3,
                        self_device_us=round(g_dself[g]) / 1e3 if g_dself is not None else None,
                        device_total_us=round(g_dtotal[g]) / 1e3 if g_dtotal is not None else None,
                    )
                )
        r_calls_l, r_time_l = r_calls.tolist(), r_time.tolist()
        r_dev_l = r_dev.tolist() if r_dev is not None else None
        for c in np.flatnonzero(r_calls).tolist():
            ops_in = per_region.get(c, [])
            ops_in.sort(key=_sort_key, reverse=True)
            name = key_names[c]
            regions[name] = RegionStat(
                name=name,
                calls=r_calls_l[c],
                time_us=round(r_time_l[c]) / 1e3,
                device_time_us=(round(r_dev_l[c]) / 1e3 if r_dev_l is not None else 0.0) if has_device else None,
                ops=ops_in,
            )
    span_ns = int(ends[:n_main].max() - starts[:n_main].min())
    return Summary(ops=op_stats, regions=regions, span_us=span_ns / 1e3, op_events=op_events, notes=notes)


#: Most (range, other thread's event) pairs a summary builds: threads that all run ranges at
#: once would otherwise make threads^2 x ranges x events of them (50 threads: gigabytes).
MAX_CROSS_PAIRS = 5_000_000
_TOO_MANY: Any = object()


def _other_thread_work(
    start: np.ndarray,
    end: np.ndarray,
    tid: np.ndarray,
    kind: np.ndarray,
    processes: dict[int, Any],
    n_main: int,
    order: np.ndarray,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(range position, event position) for each event that starts while a range of another
    thread of the same process is open; positions in (thread, start, -end) order. Only the
    table's own rows count (not Python frames or runtime calls: they hold no work of their
    own), and a thread's events are found by binary search on their starts."""
    threads = np.unique(tid)
    if len(threads) < 2:
        return None
    main = order < n_main
    is_range = (kind == KIND_ANNOTATION) & main
    if not is_range.any():
        return None
    proc = np.array([hash(processes.get(int(t), 0)) for t in threads.tolist()], dtype=np.int64)
    proc_of = proc[np.searchsorted(threads, tid)]
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    budget = MAX_CROSS_PAIRS
    for t, p in zip(threads.tolist(), proc.tolist()):
        mine = np.flatnonzero((tid == t) & main)  # by start, within the thread
        ranges = np.flatnonzero(is_range & (tid != t) & (proc_of == p))
        if not mine.size or not ranges.size:
            continue
        lo = np.searchsorted(start[mine], start[ranges], side="left")
        hi = np.searchsorted(start[mine], end[ranges], side="left")
        budget -= int((hi - lo).sum())
        if budget < 0:
            return _TOO_MANY
        spans.append((mine, ranges, lo, hi))
    reg_parts: list[np.ndarray] = []
    ev_parts: list[np.ndarray] = []
    for mine, ranges, lo, hi in spans:
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            continue
        first = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        ev_parts.append(mine[first + np.arange(total)])
        reg_parts.append(np.repeat(ranges, counts))
    if not ev_parts:
        return None
    return np.concatenate(reg_parts), np.concatenate(ev_parts)


def _region_ops(
    parent: np.ndarray, kind: np.ndarray, code: np.ndarray, op_pos: np.ndarray, n_codes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(region code, op code, op position) for each op and each distinct range name around it.

    ``near[i]``: the innermost range around event ``i`` (-1 for none), by pointer jumping over
    the parents that are not ranges; then each op climbs from range to range.
    """
    is_ann = kind == KIND_ANNOTATION
    near = parent.copy()
    todo = np.flatnonzero(near >= 0)
    todo = todo[~is_ann[near[todo]]]
    while todo.size:
        near[todo] = near[near[todo]]
        nt = near[todo]
        todo = todo[nt >= 0]
        todo = todo[~is_ann[near[todo]]]
    ev_parts: list[np.ndarray] = []
    reg_parts: list[np.ndarray] = []
    ev = op_pos
    cur = near[op_pos]
    while True:
        live = cur >= 0
        ev, cur = ev[live], cur[live]
        if not ev.size:
            break
        ev_parts.append(ev)
        reg_parts.append(code[cur])
        cur = near[cur]
    if not ev_parts:
        return None
    ev_all = np.concatenate(ev_parts)
    reg_all = np.concatenate(reg_parts)
    if len(ev_parts) > 1:  # ranges of one name nested: count the op once for that name
        pair = np.unique(ev_all * n_codes + reg_all)
        ev_all, reg_all = np.divmod(pair, n_codes)
    return reg_all, code[ev_all], ev_all


def _shapes(table: EventTable, codes: np.ndarray, rows: np.ndarray) -> dict[int, list[Any]]:
    """The first few distinct input-shape signatures of each op, in capture order."""
    out: dict[int, list[Any]] = {}
    full: set[int] = set()
    op_rows = np.flatnonzero(rows).tolist()
    shapes = table.shapes
    code_l = codes.tolist()
    for i in op_rows:
        sh = shapes[i]
        if sh is None:
            continue
        c = code_l[i]
        if c in full:
            continue
        seen = out.get(c)
        if seen is None:
            out[c] = [sh]
        elif sh not in seen:
            seen.append(sh)
            if len(seen) >= MAX_SHAPES_PER_OP:
                full.add(c)
    return out
