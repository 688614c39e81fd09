"""Reading a live ``torch.profiler`` capture into an :class:`~neuronscope.events.table.EventTable`."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from neuronscope.capture import torch_private
from neuronscope.events.clocks import drop_off_clock_live
from neuronscope.events.flows import DISPATCH_CATEGORIES, drop_dispatches, launches_by_flow_id, ops_at_launches
from neuronscope.events.nesting import add_inner_range_device_time
from neuronscope.events.table import (
    DEVICE_WAIT,
    FLAG_ASYNC,
    FLAG_LEGACY_DEVICE,
    IGNORED_NAMES,
    KIND_ANNOTATION,
    KIND_DEVICE,
    KIND_OP,
    KIND_PYTHON,
    KIND_RUNTIME,
    KIND_SKIP,
    KIND_SPAN,
    READ_CHUNK,
    SYNC_CATEGORIES,
    DeviceEvents,
    EventTable,
    blocks_host,
    category_kind,
    device_class,
    gc_paused,
    is_sync_call,
)

# ---- reading a live capture ---------------------------------------------------------------

# Device types whose linked events key_averages adds to an op's device time.
_DEVICE_TYPES = frozenset({"CUDA", "PrivateUse1", "XPU"})
#: Kineto's own bookkeeping, recorded as CPU events (what torch 2.13 reads as runtime calls).
_KINETO_OVERHEAD = frozenset({"Activity Buffer Request", "Lazy Function Loading", "Buffer Flush", "CUPTI Overhead"})
_SYNC_RECORDS = ("Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event")
#: torch's Python tracer names a frame "file(line): function" ("<stdin>(5): <module>").
_PYTHON_FRAME = re.compile(r"\(\d+\): ")


def _guessed_activity(event: Any) -> str:
    """The Kineto activity of a raw event from a torch whose events have no ``activity_type``
    (torch 2.11), as the trace it exports names it: from the device type, whether it is a
    ``record_function`` range, and the name (runtime and driver calls are ``cuda*``, ``hip*``,
    ``cu*``; Python frames ``file(line): function`` or ``nn.Module: Name_0``)."""
    dtype = event.device_type()
    name = event.name()
    if name[:1] == "[":  # "[memory]": an allocation marker, on the allocation's device
        return "cpu_instant_event"
    if str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1] != "CPU":
        if event.is_user_annotation():  # a range's copy on the device timeline: no work
            return "gpu_user_annotation"
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        return "cuda_sync" if name.startswith(_SYNC_RECORDS) else "kernel"
    if event.is_user_annotation():
        return "user_annotation"
    api = name.startswith("cuda") or (name[:3] == "hip" and name[3:4].isupper()) or (name[:2] == "cu" and name[2:3].isupper())
    if api or name in _KINETO_OVERHEAD:
        return "cuda_runtime"
    if _PYTHON_FRAME.search(name) or name.startswith(("nn.Module: ", "<built-in", "torch/")):
        return "python_function"
    return "cpu_op"


def _activity_getter(ev_type: type) -> Any:
    """``ev_type.activity_type``, or :func:`_guessed_activity` where torch has none."""
    return getattr(ev_type, "activity_type", None) or _guessed_activity


def _classify(activity: str, sample: Any) -> int:
    """The kind of an activity: the shared category table first, then (for activities the table
    does not know) the event's device type, as ``key_averages()`` decides."""
    kind = category_kind(activity)
    if kind is not None:
        return KIND_SKIP if kind == KIND_SPAN else kind
    try:
        dtype = sample.device_type()
        dname = str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
    except Exception:
        dname = "CPU"
    if dname == "CPU":
        return KIND_RUNTIME
    if dname in _DEVICE_TYPES:
        return KIND_DEVICE
    return KIND_SKIP


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
    kineto = torch_private.kineto_results(prof)
    if kineto is None:
        return EventTable()
    use_device = getattr(getattr(prof, "profiler", None), "use_device", None)
    legacy_device = False
    if use_device:
        try:
            legacy_device = use_device == torch_private.privateuse1_backend_name()
        except Exception:
            legacy_device = False
    with gc_paused():
        raw = kineto.events()
        ev_type = type(raw[0]) if raw else None
        readable = all(hasattr(ev_type, name) for name in _ACCESSORS) and (
            hasattr(ev_type, "activity_type") or hasattr(ev_type, "is_user_annotation")
        )
        if raw and not readable:
            # An older torch whose raw events lack an accessor read here: take torch's own
            # FunctionEvents (key_averages' input; slow, but the same numbers).
            del raw
            return _table_from_function_events(prof, record_shapes)
        return _table_from_events(raw, record_shapes, legacy_device)


#: The ``_KinetoEvent`` accessors the fast path reads (``is_hidden_event`` where it exists).
#: torch 2.11's events have no ``activity_type`` (seen on a CUDA build): it is guessed there
#: (:func:`_guessed_activity`), so that a live capture has its device timeline on it too.
_ACCESSORS = (
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
    get_act = _activity_getter(ev_type)
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
        if all(k <= KIND_ANNOTATION for k in set(kinds)):
            main_events.extend(chunk)
            main_kinds.extend(kinds)
            continue
        main_mask = [k <= KIND_ANNOTATION for k in kinds]
        main_events.extend(itertools.compress(chunk, main_mask))
        main_kinds.extend(itertools.compress(kinds, main_mask))
        other_mask = [KIND_PYTHON <= k <= KIND_RUNTIME for k in kinds]
        other_events.extend(itertools.compress(chunk, other_mask))
        other_kinds.extend(itertools.compress(kinds, other_mask))
        device_events.extend(itertools.compress(chunk, [k == KIND_DEVICE for k in kinds]))
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
            drop = set(hidden)
            table = table.without_rows(drop)
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

    device_events = drop_off_clock_live(table, ev_type, device_events, other_events)
    if device_events or (others is not None and KIND_RUNTIME in set(others.kinds)):
        _link_device(table, ev_type, main_events, device_events, other_events)
    if others is not None and other_events:  # dispatches linked device work: no ops themselves
        acts = list(map(_activity_getter(ev_type), other_events))
        get_flow, get_first = getattr(ev_type, "flow_id", None), getattr(ev_type, "flow_start", None)
        if get_flow is None or get_first is None or DISPATCH_CATEGORIES.isdisjoint(acts):
            drop_dispatches(table, acts)
        else:  # their flows kept: a system profile's executions join the ops by them
            drop_dispatches(table, acts, list(map(get_flow, other_events)), list(map(get_first, other_events)))
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


def _link_device(
    table: EventTable, ev_type: Any, main_events: list[Any], device_events: list[Any], other_events: list[Any]
) -> None:
    """Device time to the op that launched it; runtime calls to the thread of that op."""
    corr = list(map(ev_type.correlation_id, main_events))
    linked = list(map(ev_type.linked_correlation_id, main_events))
    flags = table.flags
    # Only "frontend" events (linked id 0), CPU and synchronous, take device time.
    index_by_corr = {c: i for i, c in enumerate(corr) if c and not linked[i] and not (flags and flags[i] & FLAG_ASYNC)}
    if device_events:
        d_linked = list(map(ev_type.linked_correlation_id, device_events))
        d_dur = list(map(ev_type.duration_ns, device_events))
        acts = list(map(_activity_getter(ev_type), device_events))
        names = list(map(ev_type.name, device_events))
        by_flow = _flow_links(table, ev_type, device_events, d_linked, other_events, index_by_corr)
        keys: list[Any] = d_linked
        index: dict[Any, int] = index_by_corr
        if by_flow:
            # Linked through the dispatch's flow: keyed apart from correlations.
            keys = [("flow", k) if k in by_flow else c for k, c in enumerate(d_linked)]
            index = {**index_by_corr, **{("flow", k): row for k, (row, _) in by_flow.items()}}
        # A stream waiting on another (MTIA's event_wait) is no work: no op's device time, as
        # the trace reader counts it.
        work = [device_class(act, name) != DEVICE_WAIT for act, name in zip(acts, names)]
        attach_device_time(table, itertools.compress(zip(keys, d_dur), work), index)
        _device_intervals(table, ev_type, device_events, acts, names, other_events, index_by_corr, by_flow)
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


def _flow_links(
    table: EventTable,
    ev_type: Any,
    device_events: list[Any],
    d_linked: list[int],
    other_events: list[Any],
    index_by_corr: dict[int, int],
) -> dict[int, tuple[int, tuple[int, int]]]:
    """Device events no correlation links to an op, linked through a flow from a dispatch
    (:mod:`neuronscope.events.flows`): device event -> (op row, (dispatch start, end)). The op
    is the innermost synchronous op open on the dispatch's thread when it started."""
    get_flow = getattr(ev_type, "flow_id", None)
    get_first = getattr(ev_type, "flow_start", None)
    others = table.others
    if get_flow is None or get_first is None or others is None or not other_events:
        return {}
    wanted = [k for k, c in enumerate(d_linked) if c not in index_by_corr]
    if not wanted:
        return {}
    acts = list(map(_activity_getter(ev_type), other_events))
    rows = [j for j, a in enumerate(acts) if a in DISPATCH_CATEGORIES]
    if not rows:
        return {}
    picked = [other_events[j] for j in rows]
    dispatch = launches_by_flow_id(
        list(map(get_flow, picked)),
        list(map(get_first, picked)),
        [others.tids[j] for j in rows],
        [others.starts[j] for j in rows],
        [others.ends[j] for j in rows],
    )
    hits = {k: dispatch[f] for k, f in zip(wanted, map(get_flow, (device_events[k] for k in wanted))) if f in dispatch}
    return ops_at_launches(table, hits)


def _device_intervals(
    table: EventTable,
    ev_type: Any,
    device_events: list[Any],
    acts: list[str],
    names: list[str],
    other_events: list[Any],
    index_by_corr: dict[int, int],
    by_flow: dict[int, tuple[int, tuple[int, int]]] | None = None,
) -> None:
    """Each device event's interval, stream, class and launch call (for the step breakdown), the
    host's synchronisation calls, and the device time of ranges opened inside an op. ``acts``
    and ``names``: the device events' activities and names, read once by the caller;
    ``by_flow``: the events linked through a dispatch's flow (:func:`_flow_links`)."""
    by_flow = by_flow or {}
    others = table.others
    launch_at: dict[int, tuple[int, int]] = {}  # runtime call's correlation -> (start, end)
    dev = DeviceEvents()
    if others is not None and other_events:
        o_corr = list(map(ev_type.correlation_id, other_events))
        for j, c in enumerate(o_corr):
            if others.kinds[j] == KIND_RUNTIME:
                if c:
                    launch_at[c] = (others.starts[j], others.ends[j])
                if is_sync_call(others.names[j]):
                    dev.sync_starts.append(others.starts[j])
                    dev.sync_ends.append(others.ends[j])
    starts = list(map(ev_type.start_ns, device_events))
    ends = list(map(ev_type.end_ns, device_events))
    get_stream = getattr(ev_type, "device_resource_id", None)  # the stream: torch 2.1 and later
    streams = list(map(get_stream, device_events)) if get_stream is not None else [0] * len(device_events)
    get_index = getattr(ev_type, "device_index", None)
    indexes = list(map(get_index, device_events)) if get_index is not None else [0] * len(device_events)
    corr = list(map(ev_type.correlation_id, device_events))
    linked = list(map(ev_type.linked_correlation_id, device_events))
    inner: list[tuple[int, int, int]] = []  # (launch instant, op row, device ns)
    for k, act in enumerate(acts):
        if act in SYNC_CATEGORIES:
            if blocks_host(names[k]):
                dev.sync_starts.append(starts[k])
                dev.sync_ends.append(ends[k])
            continue
        flow = by_flow.get(k)
        launch = flow[1] if flow is not None else launch_at.get(corr[k])
        dev.starts.append(starts[k])
        dev.ends.append(ends[k])
        dev.streams.append(int(streams[k]))
        dev.devices.append(int(indexes[k]))
        dev.classes.append(device_class(act, names[k]))
        dev.launch_starts.append(launch[0] if launch else -1)
        dev.launch_ends.append(launch[1] if launch else -1)
        op = flow[0] if flow is not None else index_by_corr.get(linked[k])
        if launch is not None and op is not None:
            inner.append((launch[0], op, ends[k] - starts[k]))
    if len(dev):
        table.device = dev
    if inner:
        when, op_rows, ns = (np.array(col, dtype=np.int64) for col in zip(*inner))
        add_inner_range_device_time(table, when, op_rows, ns)


def attach_device_time(table: EventTable, device_events: Iterable[tuple[int, int]], index_by_corr: dict[int, int]) -> None:
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
