"""Linking, once per trace file: device events to the ops that launched them, ops to the user's
frames around them, and the checks on the file's span (see :mod:`neuronscope.drive.traces`)."""

from __future__ import annotations

import operator
from array import array
from typing import Any

import numpy as np

from neuronscope.errors import TraceFormatError
from neuronscope.events import KIND_ANNOTATION, KIND_OP, EventTable
from neuronscope.events.arrays import int_column
from neuronscope.events.clocks import host_window, off_clock
from neuronscope.events.flows import dispatch_flows_from_points, flow_launches
from neuronscope.events.nesting import add_inner_range_device_time, innermost_open, row_columns
from neuronscope.events.table import DEVICE_WAIT, IntColumn, promote_compiled_events

__all__ = ["RuntimeCalls", "link_file"]

#: Timestamps beyond this (ns) are refused: they overflow the int64 arrays of the summary.
_MAX_NS = 1 << 62
#: Longest span of one file's events: float64 holds whole nanoseconds exactly up to 2**53 (104
#: days), and the summary sums durations in it.
_MAX_SPAN_NS = 1 << 53


class RuntimeCalls:
    """One file's runtime calls (and dispatches) that carry a correlation, in the order read:
    the correlation, thread, start and end of each, as lists. A device event's launch is the
    last one read with its correlation (:meth:`launches`), as a dict from correlation to call
    had it; the dict's tuples took a third of a big file's memory while it was read."""

    def __init__(self) -> None:
        self.corr: list[Any] = []
        self.thread: list[int] = []
        self.start: IntColumn = int_column()
        self.end: IntColumn = int_column()

    def launches(self, dev_corr: list[Any], fields: tuple[str, ...] = ("thread", "start", "end")) -> np.ndarray:
        """For each correlation of ``dev_corr`` (an int or str; others name none): the
        ``fields`` of the last call read with it, or -1s for none. OverflowError where one
        found is beyond int64."""
        found = self._by_sorting(dev_corr)
        if found is None:  # correlations other than int64 integers: as a dict finds them
            get = dict(zip(self.corr, range(len(self.corr)))).get
            found = np.array([get(c, -1) if c.__class__ in (int, str) else -1 for c in dev_corr], dtype=np.int64)
        spans = np.full((found.size, len(fields)), -1, dtype=np.int64)
        hit = found >= 0
        at = found[hit]
        for k, values in enumerate(getattr(self, f) for f in fields):
            if values.__class__ is array:
                spans[hit, k] = np.asarray(values)[at]
            else:  # a list: beyond int64 somewhere, so only the calls found are converted
                spans[hit, k] = np.array(list(map(values.__getitem__, at.tolist())), dtype=np.int64)
        return spans

    def _by_sorting(self, dev_corr: list[Any]) -> np.ndarray | None:
        """:meth:`launches`' places of the calls, by sorting, where every correlation is an
        integer within int64 (as torch writes them); None where one is not."""
        if not {int} >= set(map(type, self.corr)) or not {int, type(None)} >= set(map(type, dev_corr)):
            return None
        try:
            keys = np.array(self.corr, dtype=np.int64)
            wanted = np.array([-1 if c is None else c for c in dev_corr], dtype=np.int64)
        except OverflowError:
            return None
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        last = np.ones(ordered.size, dtype=bool)  # the last of each run: the last read
        last[:-1] = ordered[1:] != ordered[:-1]
        ordered, order = ordered[last], order[last]
        at = np.minimum(np.searchsorted(ordered, wanted), max(ordered.size - 1, 0))
        hit = (ordered[at] == wanted) if ordered.size else np.zeros(wanted.size, dtype=bool)
        hit &= np.array([c is not None for c in dev_corr], dtype=bool)
        return np.where(hit, order[at] if ordered.size else -1, -1)


def link_file(reader: Any, base: int, base_others: int) -> None:
    """Once per file, after its events: check its span, link its device events to the ops that
    launched them (by correlation, by flows, else by External id) and its ops to their user
    frames. ``reader``: the trace reader (:mod:`neuronscope.events.trace_reader`) that read
    them, rows from ``base`` (ops) and ``base_others`` (runtime calls, frames) on."""
    if reader.dev_start:
        _drop_off_clock(reader, base, base_others)
    table = reader.table
    n = len(table)
    starts, ends, device = table.starts, table.ends, table.device_ns
    dev_corr, dev_dur, dev_start = reader.dev_corr, reader.dev_dur, reader.dev_start
    dev_end = list(map(operator.add, dev_start, dev_dur))
    if DEVICE_WAIT in reader.dev_class:
        # A stream waiting on another (MTIA's event_wait) stays on the timeline, where the
        # breakdown leaves it out of busy time; it is no op's device time either.
        dev_dur = [0 if c == DEVICE_WAIT else d for d, c in zip(dev_dur, reader.dev_class)]
    # File span: first to last event of ops, annotations and device work (an interval's end
    # is never before its start: durations are at least 0).
    lo = min((min(v) for v in (starts[base:], dev_start) if v), default=None)
    hi = max((max(v) for v in (ends[base:], dev_end) if v), default=None)
    # Every interval kept goes into int64 arrays: each within +-2**62 ns, and the file
    # within _MAX_SPAN_NS, so that no duration, nor a sum of them, leaves the range where
    # int64 and float64 hold nanoseconds exactly. Runtime calls, frames and syncs too.
    others = reader.others
    sync_starts, sync_ends = zip(*reader.syncs) if reader.syncs else ((), ())
    first = min((v for v in (lo, min(others.starts[base_others:], default=None), min(sync_starts, default=None)) if v is not None), default=None)
    last = max((v for v in (hi, max(others.ends[base_others:], default=None), max(sync_ends, default=None)) if v is not None), default=None)
    if first is not None and last is not None:
        _check_span(reader, first, last)
    if lo is not None and hi is not None:
        reader.wall_ns += hi - lo

    _legacy_ranges(table, base)
    # Compiled code recorded as a range is an op (the pipeline makes it one too): the
    # kernels it launches are its own.
    promote_compiled_events(table, base)
    # Device events -> their launches (by correlation): (thread, start, end), -1s for none.
    try:
        spans = reader.runtime.launches(dev_corr)
    except OverflowError:  # a runtime call of an ignored name, out of range
        raise _out_of_range(reader) from None
    has_launch = spans[:, 0] >= 0  # thread ids are not negative
    if reader.flow_points and not has_launch.all():  # launched by a dispatch's flow alone
        has_launch = _launch_by_flow(reader, spans, has_launch)
    if has_launch.any():  # the launches (of ignored names too: no row of their own) as well
        calls = spans[has_launch, 1:]
        lo_call, hi_call = int(calls.min()), int(calls.max())
        _check_span(reader, lo_call if first is None else min(first, lo_call), hi_call if last is None else max(last, hi_call))
    dev = reader.device
    dev.launch_starts.extend(spans[:, 1].tolist())
    dev.launch_ends.extend(spans[:, 2].tolist())
    orphans = np.flatnonzero(~has_launch).tolist()  # device events whose launch found no op
    launched = np.flatnonzero(has_launch)
    if dev_start:
        dev.segments.append(len(dev.starts))
    dev.starts.extend(dev_start)
    dev.ends.extend(dev_end)
    dev.streams.extend(reader.dev_stream)
    dev.classes.extend(reader.dev_class)
    dev.devices.extend(reader.dev_device)
    for a, b in reader.syncs:
        dev.sync_starts.append(a)
        dev.sync_ends.append(b)
    if dev_dur:
        table.has_device = True
        table.device_event_count += len(dev_dur)

    launched_outside: dict[int, int] = {}  # device event -> its place in `launched`: no op
    if launched.size:
        thread, when = spans[launched, 0], spans[launched, 1]
        ns = np.array(dev_dur, dtype=np.int64)[launched]
        columns = row_columns(table, base)  # this file's rows, made arrays once
        op = _innermost(columns, KIND_OP, base, thread, when)
        hit = op >= 0
        _add_at(device, op[hit], ns[hit])
        reader.linked_correlation += int(hit.sum())
        # A range opened inside the op that launched the work (nccl:all_reduce inside
        # record_param_comms) ran that work: the range's device time too.
        add_inner_range_device_time(table, when[hit], op[hit], ns[hit], base, columns)
        outside = np.flatnonzero(~hit)
        launched_outside = dict(zip(launched[outside].tolist(), outside.tolist()))
        orphans.extend(launched_outside)

    if orphans:
        by_ext: dict[Any, int] | None = None
        dev_ext = reader.dev_ext
        in_range: list[int] = []  # places in `launched` of work launched outside any op
        for k in orphans:
            ext = dev_ext[k]
            # Old Kineto copies the correlation into "External id"; only a distinct value
            # names the op (as newer torch writes it).
            if ext.__class__ in (int, str) and ext != dev_corr[k]:
                if by_ext is None:
                    by_ext = {}
                    exts = reader.exts
                    for i in range(n - 1, base - 1, -1):
                        x = exts[i]
                        if x.__class__ in (int, str):
                            by_ext[x] = i
                i = by_ext.get(ext, -1)
                if i >= 0:
                    device[i] += dev_dur[k]
                    reader.linked_external += 1
                    continue
            table.unattributed_device_ns += dev_dur[k]
            reader.unattributed_events += 1
            if k in launched_outside:
                in_range.append(launched_outside[k])
        # Launched outside any op (a fused optimizer's kernels, launched from C++) but
        # inside a range: the range's device time. It stays "outside any op" as well.
        if in_range:
            pick = np.array(in_range, dtype=np.int64)
            r = _innermost(columns, KIND_ANNOTATION, base, thread[pick], when[pick])
            _add_at(device, r[r >= 0], ns[pick][r >= 0])

    if reader.frames:
        _locate(reader, base)
    table.raw_event_count += reader.raw_events
    table.dispatches.extend(reader.dispatches)  # (thread, start): counted by the hints
    if reader.flow_points and reader.dispatches:  # a system profile's executions join by them
        table.dispatch_flows.update(dispatch_flows_from_points(reader.flow_points, reader.thread_ids, reader.dispatches))

def _drop_off_clock(reader: Any, base: int, base_others: int) -> None:
    """Leave out this file's device records on another clock (events.clocks), counted."""
    t, o = reader.table, reader.others
    ends = list(map(operator.add, reader.dev_start, reader.dev_dur))
    try:
        spans = reader.runtime.launches(reader.dev_corr, ("thread", "start"))
    except OverflowError:  # out of range, as _check_span below would say
        raise _out_of_range(reader) from None
    has_launch = spans[:, 0] >= 0
    launched = spans[has_launch, 1]
    window = host_window((t.starts[base:], t.ends[base:]), (o.starts[base_others:], o.ends[base_others:]))
    # Out of range or spanning too long is refused first, as the linking below refuses it.
    edges = [*(window or ()), min(reader.dev_start), max(ends), *([int(launched.min()), int(launched.max())] if launched.size else [])]
    _check_span(reader, min(edges), max(edges))
    launch = np.where(has_launch, spans[:, 1], -1)
    bad = off_clock(reader.dev_start, ends, launch, window).tolist()
    if any(bad):
        t.off_clock_device += sum(bad)
        t.off_clock_device_ns += sum(d for d, b in zip(reader.dev_dur, bad) if b)
        for name in ("dev_corr", "dev_ext", "dev_dur", "dev_start", "dev_stream", "dev_class", "dev_device"):
            setattr(reader, name, [v for v, b in zip(getattr(reader, name), bad) if not b])

def _launch_by_flow(reader: Any, spans: np.ndarray, has_launch: np.ndarray) -> np.ndarray:
    """Fill the launches of device events no correlation names from the file's flows."""
    wanted = np.flatnonzero(~has_launch).tolist()
    found = flow_launches(reader.flow_points, reader.thread_ids, reader.dev_start, wanted, reader.dispatches)
    for k, launch in found.items():
        spans[k] = launch
    return spans[:, 0] >= 0

def _check_span(reader: Any, first: int, last: int) -> None:
    """Refuse a file whose intervals leave +-2**62 ns, or span more than _MAX_SPAN_NS."""
    if not (-_MAX_NS < first and last < _MAX_NS):
        raise _out_of_range(reader)
    if last - first > _MAX_SPAN_NS:
        raise TraceFormatError(
            f"{reader.files_pending}: its events span {(last - first) / 8.64e13:,.0f} days; a "
            f"torch.profiler trace spans seconds to hours (at most {_MAX_SPAN_NS / 8.64e13:.0f} days are read)"
        )

def _out_of_range(reader: Any) -> TraceFormatError:
    return TraceFormatError(
        f"{reader.files_pending}: a timestamp is out of range (beyond about 146 years in "
        f"microseconds); is this a torch.profiler trace?"
    )

def _locate(reader: Any, base: int) -> None:
    """Each op's innermost user ``python_function`` frame on its thread, as 'file:line'."""
    table = reader.table
    n = len(table)
    if reader.locations is None:
        reader.locations = [None] * base
    reader.locations.extend([None] * (n - len(reader.locations)))
    locations = reader.locations
    starts, ends, tids = table.starts, table.ends, table.tids
    frames_by_thread: dict[int, list[tuple[int, int, int, str]]] = {}
    for f in reader.frames:
        frames_by_thread.setdefault(f[0], []).append(f)
    rows_by_thread: dict[int, list[int]] = {}
    for i in range(base, n):
        if tids[i] in frames_by_thread:
            rows_by_thread.setdefault(tids[i], []).append(i)
    for t, rows in rows_by_thread.items():
        frames = frames_by_thread[t]
        frames.sort(key=lambda f: (f[1], -f[2]))
        rows.sort(key=lambda i: starts[i])
        stack: list[tuple[int, int, int, str]] = []
        j, nf = 0, len(frames)
        for i in rows:
            s = starts[i]
            while j < nf and frames[j][1] <= s:
                f = frames[j]
                while stack and stack[-1][2] <= f[1]:
                    stack.pop()
                stack.append(f)
                j += 1
            while stack and stack[-1][2] < ends[i]:
                stack.pop()
            if stack:
                locations[i] = stack[-1][3]


def _legacy_ranges(table: EventTable, base: int) -> None:
    """torch 1.9 wrote ``record_function`` ranges (``ProfilerStep#N`` among them) as ops, and had
    no ``user_annotation`` category: in a file like that, an "op" without a ``::`` namespace is
    a range (every operator has one: ``aten::mm``, ``c10d::allreduce_``)."""
    kinds, names = table.kinds, table.names
    rows = range(base, len(table))
    if any(kinds[i] == KIND_ANNOTATION for i in rows):
        return
    if not any(names[i].startswith("ProfilerStep#") for i in rows):
        return
    for i in rows:
        if "::" not in names[i]:
            kinds[i] = KIND_ANNOTATION


def _add_at(values: list[int], rows: np.ndarray, amounts: np.ndarray) -> None:
    """``values[rows[k]] += amounts[k]`` for every k (a row may repeat), in exact integers."""
    if rows.size:
        lo = int(rows.min())
        part = np.array(values[lo:], dtype=np.int64)
        np.add.at(part, rows - lo, amounts)
        values[lo:] = array(values.typecode, part.tobytes()) if values.__class__ is array else part.tolist()


def _innermost(
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], kind: int, base: int, thread: np.ndarray, when: np.ndarray
) -> np.ndarray:
    """The innermost row of ``kind`` open at each instant ``when[k]`` on ``thread[k]``, or -1;
    ``columns``: the :func:`row_columns` of the rows from ``base`` on (one file's: the earlier
    files' are not made into arrays again)."""
    starts, ends, tids, kinds = columns
    found = innermost_open(starts, ends, tids, np.flatnonzero(kinds == kind), thread, when)
    return np.where(found >= 0, found + base, -1)
