"""The streaming reader: a Chrome-trace file, a few megabytes of events at a time, into an
:class:`~neuronscope.events.EventTable` (see :mod:`neuronscope.trace` for what is read)."""

from __future__ import annotations

import copy
import operator
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import UNSET

from neuronscope.errors import TraceFormatError
from neuronscope.events import IGNORED_NAMES, KIND_ANNOTATION, KIND_OP, KIND_PYTHON, KIND_RUNTIME, EventTable, gc_paused
from neuronscope.events.clocks import host_window, off_clock
from neuronscope.events.flows import DISPATCH_CATEGORIES, FLOW_CATEGORIES, flow_launches
from neuronscope.events.jsontext import EventArgs, Fallback, TraceEvent, stream, whole
from neuronscope.events.locations import user_location
from neuronscope.events.nesting import add_inner_range_device_time, innermost_open, row_columns
from neuronscope.events.table import (
    DEVICE_WAIT,
    KIND_DEVICE,
    KIND_SKIP,
    KIND_SPAN,
    SYNC_CATEGORIES,
    DeviceEvents,
    blocks_host,
    category_kind,
    clean_name,
    device_class,
    is_sync_call,
    promote_compiled_events,
)
from neuronscope.events.trace_meta import trace_metadata

_UNSET = object()
_SYNC = 7  # a category of host intervals blocked in a synchronisation (read, not a row)
_FLOW = 8  # a launch-to-device flow point (ac2g): read where a device's dispatches have them
_DISPATCH = 9  # an operator dispatch (privateuse1_runtime): a launch, no row of its own
#: Timestamps beyond this (ns) are refused: they overflow the int64 arrays of the summary.
_MAX_NS = 1 << 62
#: Longest span of one file's events: float64 holds whole nanoseconds exactly up to 2**53 (104
#: days), and the summary sums durations in it.
_MAX_SPAN_NS = 1 << 53
_NO_ARGS = EventArgs()
_DEVICE_LABEL = re.compile(r"(?:[A-Za-z]+ ?:? ?)?(\d{1,9})")


def _device_number(label: Any) -> int:
    """A device named in text ("1", "cuda:1", "GPU 1"): its number; -1 where it has none (a
    model name such as "H100 HBM3" is no device number)."""
    m = _DEVICE_LABEL.fullmatch(label.strip()) if label.__class__ is str else None
    return int(m.group(1)) if m else -1


class _Reader:
    """Reads trace files into one :class:`EventTable` (several files: one rank's captures)."""

    def __init__(self) -> None:
        self.table = EventTable()
        # Python frames and runtime calls: children in the nesting (they lower the self time
        # of the op around them, as in key_averages), never ops of their own.
        self.others = EventTable()
        self.exts: list[Any] = []  # "External id" per row (ops only), for the fallback link
        self.shapes: list[Any] = []
        self.locations: list[str | None] | None = None
        self.thread_ids: dict[tuple[Any, Any], int] = {}
        self.cat_codes: dict[Any, int] = {}
        self.location_cache: dict[str, str | None] = {}  # python_function name -> location
        self.name_cache: dict[str, str] = {}
        self.last_dims: dict[str, Any] = {}  # op name -> "Input Dims" of its last call
        self.files: list[str] = []
        self.metas: list[dict[str, Any]] = []
        self.wall_ns = 0
        self.saw_privateuse1 = False
        self.saw_hip = False
        self.linked_correlation = 0
        self.linked_external = 0
        self.unattributed_events = 0
        self.device_categories: set[str] = set()
        self.class_cache: dict[tuple[Any, Any], int] = {}  # (category, name) -> device class
        self.sync_calls: dict[str, bool] = {}  # runtime call name -> blocks the host
        self.saw_mtia = False
        self.saw_counters = False
        self.negative = 0  # events with a negative duration, read as 0
        self.device = DeviceEvents()
        self._reset_file()

    # ---- per file --------------------------------------------------------------------------
    def _reset_file(self) -> None:
        self.runtime: dict[Any, tuple[int, int, int]] = {}  # correlation -> (thread, start, end)
        self.dev_corr: list[Any] = []
        self.dev_ext: list[Any] = []
        self.dev_dur: list[int] = []
        self.dev_start: list[int] = []
        self.dev_stream: list[int] = []
        self.dev_class: list[int] = []
        self.dev_device: list[int] = []
        self.syncs: list[tuple[int, int]] = []  # host intervals blocked in a synchronisation
        self.frames: list[tuple[int, int, int, str]] = []  # (thread, start, end, location)
        self.raw_events = 0
        self.recognised = 0
        self.saw_span = False
        self.flow_points: list[tuple[Any, Any, Any, Any]] = []  # (id, pid, tid, ts) as read
        self.dispatches: dict[tuple[int, int], int] = {}  # (thread, start) -> end

    def _truncate(self, n: int, n_others: int) -> None:
        t, o = self.table, self.others
        for lst in (t.names, t.kinds, t.tids, t.starts, t.ends, t.device_ns, self.exts, self.shapes):
            del lst[n:]
        for lst in (o.names, o.kinds, o.tids, o.starts, o.ends, o.device_ns):
            del lst[n_others:]
        if self.locations is not None:
            del self.locations[n:]

    #: What ingesting events changes besides the rows and the caches of names: the threads,
    #: the categories and runtime calls classified (each sets a flag once, when first seen),
    #: the flags, the counts. Saved before a file, restored when it is read again whole.
    _FILE_STATE = (
        "thread_ids", "cat_codes", "sync_calls", "device_categories",
        "saw_privateuse1", "saw_hip", "saw_mtia", "saw_counters", "negative",
    )

    def _file_state(self) -> dict[str, Any]:
        return {key: copy.copy(getattr(self, key)) for key in self._FILE_STATE}

    def _restore(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)

    def read(self, path: Path) -> dict[str, Any]:
        """Add one file's events to the table; returns the file's top-level metadata."""
        name = str(path)
        base, base_others = len(self.table), len(self.others)
        before = self._file_state()
        self._reset_file()
        try:
            try:
                meta = stream(path, name, self._ingest)
            except Fallback:  # what the streamed events added goes, rows and facts alike
                self._truncate(base, base_others)
                self._reset_file()
                self._restore(before)
                meta = whole(path, name, self._ingest)
        except RecursionError:
            raise TraceFormatError(f"{name}: a value is nested too deeply to be a trace event") from None
        if self.recognised == 0 and not self.saw_span and "schemaVersion" not in meta:
            raise TraceFormatError(
                f"{name}: holds no torch.profiler events (no cpu_op, user_annotation, kernel or "
                f"PyTorch Profiler span); is it a Chrome trace written by torch.profiler?"
            )
        self.files_pending = name
        self._finish_file(base, base_others)
        self.files.append(name)
        self.metas.append(meta)
        return meta

    # ---- the hot loop ----------------------------------------------------------------------
    def _ingest(self, events: list[TraceEvent], name: str) -> None:
        # The one loop that sees every event: locals only, one attribute read per field, and
        # the rarer categories after the common ones.
        table = self.table
        names_append = table.names.append
        kinds_append = table.kinds.append
        tids_append = table.tids.append
        starts_append = table.starts.append
        ends_append = table.ends.append
        device_append = table.device_ns.append
        exts_append = self.exts.append
        others = self.others
        o_names, o_kinds, o_tids = others.names.append, others.kinds.append, others.tids.append
        o_starts, o_ends, o_device = others.starts.append, others.ends.append, others.device_ns.append
        shapes_append = self.shapes.append
        codes, thread_ids, runtime = self.cat_codes, self.thread_ids, self.runtime
        dev_corr, dev_ext, dev_dur = self.dev_corr, self.dev_ext, self.dev_dur
        dev_start, dev_stream, dev_class = self.dev_start, self.dev_stream, self.dev_class
        dev_device = self.dev_device
        frames, syncs = self.frames, self.syncs
        ignored = IGNORED_NAMES
        locations = self.location_cache
        last_dims = self.last_dims
        name_cache = self.name_cache
        class_cache = self.class_cache
        sync_calls = self.sync_calls
        last_pid: Any = _UNSET
        last_tid: Any = _UNSET
        thread = -1
        recognised = 0
        negative = 0
        e: Any = None
        try:
            for e in events:
                cat = e.cat
                if cat is None:
                    continue
                code = codes.get(cat)
                if code is None:
                    code = codes[cat] = self._classify(cat)
                if code >= KIND_SKIP:
                    if code == KIND_SPAN:
                        self.saw_span = True
                    elif code == _FLOW:
                        # Only a device whose dispatches are no rows links by flows alone.
                        if self.saw_privateuse1 and e.id is not None:
                            self.flow_points.append((e.id, e.pid, e.tid, e.ts))
                        continue
                    if code != _SYNC and code != _DISPATCH:
                        continue
                dur = e.dur
                if dur is None:  # not a complete ("X") event
                    continue
                recognised += 1
                ts = e.ts
                # Microseconds, as int or as float with nanosecond decimals, to integer ns. The
                # type is checked before any arithmetic: "x" * 1000 would build a huge string.
                tc = ts.__class__
                if tc is int:
                    start = ts * 1000
                elif tc is float:
                    # Whole and fractional microseconds apart: ts * 1000 of an epoch timestamp
                    # (about 1.7e18 ns) is past float precision, off by up to 128 ns.
                    whole_us = int(ts)
                    start = whole_us * 1000 + int((ts - whole_us) * 1000 + 0.5)
                else:
                    raise TypeError(f"'ts' is a {tc.__name__}, not a number")
                tc = dur.__class__
                if tc is int:
                    dur_ns = dur * 1000
                elif tc is float:
                    dur_ns = int(dur * 1000 + 0.5)
                else:
                    raise TypeError(f"'dur' is a {tc.__name__}, not a number")
                if dur_ns < 0:
                    negative += 1
                    dur_ns = 0
                if code == KIND_DEVICE:
                    args = e.args
                    if args.__class__ is not EventArgs:
                        _no_args_or_malformed(args)
                        args = _NO_ARGS
                    dev_corr.append(args.correlation)
                    dev_ext.append(args.external_id)
                    dev_dur.append(dur_ns)
                    dev_start.append(start)
                    st = args.stream
                    if st is UNSET:
                        st = e.tid
                    dev_stream.append(st if st.__class__ is int else -1)
                    on = args.device
                    if on.__class__ is not int:
                        on = _device_number(on)
                        if on < 0:  # Kineto writes a GPU's events under the device's pid
                            on = e.pid if e.pid.__class__ is int else _device_number(e.pid)
                    dev_device.append(on)
                    ev_name = e.name
                    key = (cat, ev_name)
                    c = class_cache.get(key)
                    if c is None:
                        c = class_cache[key] = device_class(str(cat), str(ev_name))
                    dev_class.append(c)
                    continue
                if code == _SYNC:
                    if blocks_host(str(e.name)):
                        syncs.append((start, start + dur_ns))
                    continue
                pid = e.pid
                tid = e.tid
                if tid != last_tid or pid != last_pid:
                    last_pid, last_tid = pid, tid
                    thread = thread_ids.get((pid, tid), -1)
                    if thread < 0:
                        thread = thread_ids[(pid, tid)] = len(thread_ids)
                ev_name = e.name
                got = name_cache.get(ev_name)  # one str per distinct name
                if got is None:
                    got = name_cache[ev_name] = clean_name(ev_name)
                ev_name = got
                if code <= KIND_ANNOTATION:  # cpu_op, user_annotation
                    if ev_name in ignored:
                        continue
                    names_append(ev_name)
                    tids_append(thread)
                    starts_append(start)
                    ends_append(start + dur_ns)
                    device_append(0)
                    kinds_append(code)
                    args = e.args
                    if args.__class__ is not EventArgs:
                        _no_args_or_malformed(args)
                        args = None
                    if args is not None:
                        exts_append(args.external_id if code == KIND_OP else None)
                        dims = args.input_dims
                        if dims.__class__ is not list:
                            dims = None  # none recorded, or no list of inputs' dims: no shapes
                        else:
                            # Share one list between calls of an op with the shapes of its last
                            # call: loops repeat them, and shared lists keep memory low.
                            prev = last_dims.get(ev_name)
                            if prev is not None and prev == dims:
                                dims = prev
                            else:
                                last_dims[ev_name] = dims
                        shapes_append(dims)
                    else:
                        exts_append(None)
                        shapes_append(None)
                else:  # runtime call or Python frame: a child in the nesting, not an op
                    if code == _DISPATCH:  # a link to device work (flows.py), not an op
                        self._dispatch(e, thread, start, start + dur_ns)
                        continue
                    if code == KIND_RUNTIME:
                        args = e.args
                        if args.__class__ is not EventArgs:
                            _no_args_or_malformed(args)
                            args = None
                        if args is not None:
                            corr = args.correlation
                            if corr is not None:
                                runtime[corr] = (thread, start, start + dur_ns)
                        blocks = sync_calls.get(ev_name)
                        if blocks is None:  # once per distinct name
                            hip = ev_name.startswith("hip")
                            self.saw_hip = self.saw_hip or hip
                            blocks = sync_calls[ev_name] = is_sync_call(ev_name)
                        if blocks:
                            syncs.append((start, start + dur_ns))
                        kind = KIND_RUNTIME
                    else:
                        if ev_name in locations:
                            loc = locations[ev_name]
                        else:
                            loc = locations[ev_name] = user_location(ev_name)
                        if loc is not None:
                            frames.append((thread, start, start + dur_ns, loc))
                        kind = KIND_PYTHON
                    if ev_name in ignored:
                        continue
                    o_names(ev_name)
                    o_kinds(kind)
                    o_tids(thread)
                    o_starts(start)
                    o_ends(start + dur_ns)
                    o_device(0)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            raise TraceFormatError(
                f"{name}: malformed trace event ({type(exc).__name__}: {_short(str(exc))}): {_short(repr(e))}"
            ) from None
        self.raw_events += len(events)
        self.recognised += recognised
        self.negative += negative

    def _dispatch(self, e: Any, thread: int, start: int, end: int) -> None:
        self.dispatches[(thread, start)] = end
        args = e.args
        corr = args.correlation if args.__class__ is EventArgs else None
        if corr is not None:
            self.runtime[corr] = (thread, start, end)

    def _classify(self, cat: Any) -> int:
        if cat.__class__ is not str:
            return KIND_SKIP
        c = cat.lower()
        if c in FLOW_CATEGORIES:
            return _FLOW
        if c.startswith("privateuse1"):
            self.saw_privateuse1 = True
        elif c.startswith("mtia"):
            self.saw_mtia = True
        elif c == "cuda_profiler_range":
            self.saw_counters = True
        if c in SYNC_CATEGORIES:
            return _SYNC
        if c in DISPATCH_CATEGORIES:
            return _DISPATCH
        kind = category_kind(c)
        if kind == KIND_DEVICE:
            self.device_categories.add(cat)
        return KIND_SKIP if kind is None else kind

    # ---- linking, once per file ------------------------------------------------------------
    def _finish_file(self, base: int, base_others: int) -> None:
        if self.dev_start:
            self._drop_off_clock(base, base_others)
        table = self.table
        n = len(table)
        starts, ends, device = table.starts, table.ends, table.device_ns
        dev_corr, dev_dur, dev_start = self.dev_corr, self.dev_dur, self.dev_start
        dev_end = list(map(operator.add, dev_start, dev_dur))
        if DEVICE_WAIT in self.dev_class:
            # A stream waiting on another (MTIA's event_wait) stays on the timeline, where the
            # breakdown leaves it out of busy time; it is no op's device time either.
            dev_dur = [0 if c == DEVICE_WAIT else d for d, c in zip(dev_dur, self.dev_class)]
        # File span: first to last event of ops, annotations and device work (an interval's end
        # is never before its start: durations are at least 0).
        lo = min((min(v) for v in (starts[base:], dev_start) if v), default=None)
        hi = max((max(v) for v in (ends[base:], dev_end) if v), default=None)
        # Every interval kept goes into int64 arrays: each within +-2**62 ns, and the file
        # within _MAX_SPAN_NS, so that no duration, nor a sum of them, leaves the range where
        # int64 and float64 hold nanoseconds exactly. Runtime calls, frames and syncs too.
        others = self.others
        sync_starts, sync_ends = zip(*self.syncs) if self.syncs else ((), ())
        first = min((v for v in (lo, min(others.starts[base_others:], default=None), min(sync_starts, default=None)) if v is not None), default=None)
        last = max((v for v in (hi, max(others.ends[base_others:], default=None), max(sync_ends, default=None)) if v is not None), default=None)
        if first is not None and last is not None:
            self._check_span(first, last)
        if lo is not None and hi is not None:
            self.wall_ns += hi - lo

        _legacy_ranges(table, base)
        # Compiled code recorded as a range is an op (the pipeline makes it one too): the
        # kernels it launches are its own.
        promote_compiled_events(table, base)
        # Device events -> their launches (by correlation): (thread, start, end), -1s for none.
        get = self.runtime.get
        found = [get(c) if c.__class__ in (int, str) else None for c in dev_corr]
        try:
            spans = np.array([_NO_LAUNCH if x is None else x for x in found], dtype=np.int64).reshape(-1, 3)
        except OverflowError:  # a runtime call of an ignored name, out of range
            raise self._out_of_range() from None
        has_launch = spans[:, 0] >= 0  # thread ids are not negative
        if self.flow_points and not has_launch.all():  # launched by a dispatch's flow alone
            has_launch = self._launch_by_flow(spans, has_launch)
        if has_launch.any():  # the launches (of ignored names too: no row of their own) as well
            calls = spans[has_launch, 1:]
            lo_call, hi_call = int(calls.min()), int(calls.max())
            self._check_span(lo_call if first is None else min(first, lo_call), hi_call if last is None else max(last, hi_call))
        dev = self.device
        dev.launch_starts.extend(spans[:, 1].tolist())
        dev.launch_ends.extend(spans[:, 2].tolist())
        orphans = np.flatnonzero(~has_launch).tolist()  # device events whose launch found no op
        launched = np.flatnonzero(has_launch)
        if dev_start:
            dev.segments.append(len(dev.starts))
        dev.starts.extend(dev_start)
        dev.ends.extend(dev_end)
        dev.streams.extend(self.dev_stream)
        dev.classes.extend(self.dev_class)
        dev.devices.extend(self.dev_device)
        for a, b in self.syncs:
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
            self.linked_correlation += int(hit.sum())
            # A range opened inside the op that launched the work (nccl:all_reduce inside
            # record_param_comms) ran that work: the range's device time too.
            add_inner_range_device_time(table, when[hit], op[hit], ns[hit], base, columns)
            outside = np.flatnonzero(~hit)
            launched_outside = dict(zip(launched[outside].tolist(), outside.tolist()))
            orphans.extend(launched_outside)

        if orphans:
            by_ext: dict[Any, int] | None = None
            dev_ext = self.dev_ext
            in_range: list[int] = []  # places in `launched` of work launched outside any op
            for k in orphans:
                ext = dev_ext[k]
                # Old Kineto copies the correlation into "External id"; only a distinct value
                # names the op (as newer torch writes it).
                if ext.__class__ in (int, str) and ext != dev_corr[k]:
                    if by_ext is None:
                        by_ext = {}
                        exts = self.exts
                        for i in range(n - 1, base - 1, -1):
                            x = exts[i]
                            if x.__class__ in (int, str):
                                by_ext[x] = i
                    i = by_ext.get(ext, -1)
                    if i >= 0:
                        device[i] += dev_dur[k]
                        self.linked_external += 1
                        continue
                table.unattributed_device_ns += dev_dur[k]
                self.unattributed_events += 1
                if k in launched_outside:
                    in_range.append(launched_outside[k])
            # Launched outside any op (a fused optimizer's kernels, launched from C++) but
            # inside a range: the range's device time. It stays "outside any op" as well.
            if in_range:
                pick = np.array(in_range, dtype=np.int64)
                r = _innermost(columns, KIND_ANNOTATION, base, thread[pick], when[pick])
                _add_at(device, r[r >= 0], ns[pick][r >= 0])

        if self.frames:
            self._locate(base)
        table.raw_event_count += self.raw_events
        table.dispatches.extend(self.dispatches)  # (thread, start): counted by the hints
        self._reset_file()

    def _drop_off_clock(self, base: int, base_others: int) -> None:
        """Leave out this file's device records on another clock (events.clocks), counted."""
        t, o = self.table, self.others
        ends = list(map(operator.add, self.dev_start, self.dev_dur))
        get = self.runtime.get
        found = [get(c) if c.__class__ in (int, str) else None for c in self.dev_corr]
        launched = [f[1] for f in found if f is not None]
        window = host_window((t.starts[base:], t.ends[base:]), (o.starts[base_others:], o.ends[base_others:]))
        # Out of range or spanning too long is refused first, as the linking below refuses it.
        edges = [*(window or ()), min(self.dev_start), max(ends), *([min(launched), max(launched)] if launched else [])]
        self._check_span(min(edges), max(edges))
        launch = [-1 if f is None else f[1] for f in found]
        bad = off_clock(self.dev_start, ends, launch, window).tolist()
        if any(bad):
            t.off_clock_device += sum(bad)
            t.off_clock_device_ns += sum(d for d, b in zip(self.dev_dur, bad) if b)
            for name in ("dev_corr", "dev_ext", "dev_dur", "dev_start", "dev_stream", "dev_class", "dev_device"):
                setattr(self, name, [v for v, b in zip(getattr(self, name), bad) if not b])

    def _launch_by_flow(self, spans: np.ndarray, has_launch: np.ndarray) -> np.ndarray:
        """Fill the launches of device events no correlation names from the file's flows."""
        wanted = np.flatnonzero(~has_launch).tolist()
        found = flow_launches(self.flow_points, self.thread_ids, self.dev_start, wanted, self.dispatches)
        for k, launch in found.items():
            spans[k] = launch
        return spans[:, 0] >= 0

    def _check_span(self, first: int, last: int) -> None:
        """Refuse a file whose intervals leave +-2**62 ns, or span more than _MAX_SPAN_NS."""
        if not (-_MAX_NS < first and last < _MAX_NS):
            raise self._out_of_range()
        if last - first > _MAX_SPAN_NS:
            raise TraceFormatError(
                f"{self.files_pending}: its events span {(last - first) / 8.64e13:,.0f} days; a "
                f"torch.profiler trace spans seconds to hours (at most {_MAX_SPAN_NS / 8.64e13:.0f} days are read)"
            )

    def _out_of_range(self) -> TraceFormatError:
        return TraceFormatError(
            f"{self.files_pending}: a timestamp is out of range (beyond about 146 years in "
            f"microseconds); is this a torch.profiler trace?"
        )

    def _locate(self, base: int) -> None:
        """Each op's innermost user ``python_function`` frame on its thread, as 'file:line'."""
        table = self.table
        n = len(table)
        if self.locations is None:
            self.locations = [None] * base
        self.locations.extend([None] * (n - len(self.locations)))
        locations = self.locations
        starts, ends, tids = table.starts, table.ends, table.tids
        frames_by_thread: dict[int, list[tuple[int, int, int, str]]] = {}
        for f in self.frames:
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

    # ---- after all files -------------------------------------------------------------------
    def finish(self) -> EventTable:
        """Order rows by start (parents first), as a live capture has them; fill shapes."""
        table = self.table
        n = len(table)
        table.shapes = self.shapes if self.shapes.count(None) != n else []
        if self.locations is not None:
            self.locations.extend([None] * (n - len(self.locations)))
        moved = _start_order(table.starts, table.ends)
        if moved is not None:
            order = moved.tolist()
            for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns"):
                lst = getattr(table, attr)
                lst[:] = map(lst.__getitem__, order)
            if table.shapes:
                table.shapes = list(map(table.shapes.__getitem__, order))
            if self.locations is not None:
                self.locations = list(map(self.locations.__getitem__, order))
            if table.range_device_ns:
                new_row = np.empty(n, dtype=np.int64)
                new_row[moved] = np.arange(n)
                table.range_device_ns = {int(new_row[r]): v for r, v in table.range_device_ns.items()}
        table.device = self.device if len(self.device) else None
        self.exts = []
        self.shapes = []
        table.others = self.others if len(self.others) else None
        return table


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


#: The launch of a device event whose correlation names no runtime call.
_NO_LAUNCH = (-1, -1, -1)


def _add_at(values: list[int], rows: np.ndarray, amounts: np.ndarray) -> None:
    """``values[rows[k]] += amounts[k]`` for every k (a row may repeat), in exact integers."""
    if rows.size:
        lo = int(rows.min())
        part = np.array(values[lo:], dtype=np.int64)
        np.add.at(part, rows - lo, amounts)
        values[lo:] = part.tolist()


def _innermost(
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], kind: int, base: int, thread: np.ndarray, when: np.ndarray
) -> np.ndarray:
    """The innermost row of ``kind`` open at each instant ``when[k]`` on ``thread[k]``, or -1;
    ``columns``: the :func:`row_columns` of the rows from ``base`` on (one file's: the earlier
    files' are not made into arrays again)."""
    starts, ends, tids, kinds = columns
    found = innermost_open(starts, ends, tids, np.flatnonzero(kinds == kind), thread, when)
    return np.where(found >= 0, found + base, -1)


def _no_args_or_malformed(args: Any) -> None:
    """For ``args`` that are no object: return (they read as no args) where falsy, as
    ``if args:`` read them before; raise TypeError (a malformed event) where not."""
    if args:
        raise TypeError(f"'args' is a {type(args).__name__}, not an object")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _start_order(starts: list[int], ends: list[int]) -> np.ndarray | None:
    """The rows by start, and for equal starts the longer (the parent) first; None where they
    are in that order already. Timestamps are within int64 (checked as each file is read)."""
    s = np.array(starts, dtype=np.int64)
    e = np.array(ends, dtype=np.int64)
    if ((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] <= e[:-1]))).all():
        return None
    return np.lexsort((-e, s))


def read_files(files: Sequence[Path]) -> tuple[EventTable, dict[str, Any]]:
    """Read ``files`` (one rank's) into one table, and what the files say (see
    :func:`neuronscope.trace.table_from_trace`)."""
    reader = _Reader()
    with gc_paused():
        for p in files:
            reader.read(p)
        table = reader.finish()
        table.processes = {i: key[0] for key, i in reader.thread_ids.items()}
        return table, trace_metadata(reader)
