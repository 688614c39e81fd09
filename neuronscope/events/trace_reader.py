"""The streaming reader: a Chrome-trace file, a few megabytes of events at a time, into an
:class:`~neuronscope.events.EventTable` (see :mod:`neuronscope.trace` for what is read)."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import UNSET, Raw

from neuronscope.errors import TraceFormatError
from neuronscope.events import IGNORED_NAMES, KIND_ANNOTATION, KIND_OP, KIND_PYTHON, KIND_RUNTIME, EventTable, gc_paused
from neuronscope.events.arrays import extend_ints, int_column, reordered, start_order
from neuronscope.events.flows import DISPATCH_CATEGORIES, FLOW_CATEGORIES
from neuronscope.events.jsontext import Fallback, OnRead, stream, whole
from neuronscope.events.locations import user_location
from neuronscope.events.op_scalars import recorded_scalars
from neuronscope.events.table import (
    KIND_DEVICE,
    KIND_SKIP,
    KIND_SPAN,
    SYNC_CATEGORIES,
    DeviceEvents,
    IntColumn,
    blocks_host,
    category_kind,
    clean_name,
    device_class,
    is_sync_call,
)
from neuronscope.events.trace_link import RuntimeCalls, link_file
from neuronscope.events.trace_meta import trace_metadata
from neuronscope.events.trace_records import EventArgs, RawDimsArgs, TraceEvent, dims_value, strides_value

_UNSET = object()
_SYNC = 7  # a category of host intervals blocked in a synchronisation (read, not a row)
_FLOW = 8  # a launch-to-device flow point (ac2g): read where a device's dispatches have them
_DISPATCH = 9  # an operator dispatch (privateuse1_runtime): a launch, no row of its own
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
        self.table = _columns_table()
        # Python frames and runtime calls: children in the nesting (they lower the self time
        # of the op around them, as in key_averages), never ops of their own.
        self.others = _columns_table()
        self.exts: list[Any] = []  # "External id" per row (ops only), for the fallback link
        self.shapes: list[Any] = []
        self.strides: list[Any] = []  # per row: its inputs' strides, where torch wrote them
        self.scalars: list[Any] = []  # per row: its scalar arguments (op_scalars), or None
        self.locations: list[str | None] | None = None
        self.thread_ids: dict[tuple[Any, Any], int] = {}
        self.cat_codes: dict[Any, int] = {}
        self.location_cache: dict[str, str | None] = {}  # python_function name -> location
        self.name_cache: dict[str, str] = {}
        self.last_dims: dict[str, Any] = {}  # op name -> "Input Dims" of its last call
        self.dims_cache: dict[bytes, Any] = {}  # "Input Dims" text -> its list (None: no list)
        self.scalars_cache: dict[Any, Any] = {}  # ("Input type", "Concrete Inputs") texts -> scalars
        self.last_scalars: dict[str, Any] = {}  # op name -> its last call's texts and scalars
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
        self.device = DeviceEvents(
            starts=int_column(), ends=int_column(), launch_starts=int_column(), launch_ends=int_column(),
            sync_starts=int_column(), sync_ends=int_column(),
        )
        self._reset_file()

    # ---- per file --------------------------------------------------------------------------
    def _reset_file(self) -> None:
        # Runtime calls (and dispatches) with a correlation, as read: its value, thread, start,
        # end. Plain lists, not a dict of tuples: a third of a big file's memory while it was read.
        self.runtime = RuntimeCalls()
        self.dev_corr: list[Any] = []
        self.dev_ext: list[Any] = []
        self.dev_dur: IntColumn = int_column()
        self.dev_start: IntColumn = int_column()
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
        for lst in (t.names, t.kinds, t.tids, t.starts, t.ends, t.device_ns, self.exts, self.shapes, self.strides, self.scalars):
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

    def read(self, path: Path, on_read: OnRead | None = None) -> dict[str, Any]:
        """Add one file's events to the table; returns the file's top-level metadata.
        ``on_read``: told the bytes of the file read as it goes (a progress bar's steps)."""
        name = str(path)
        base, base_others = len(self.table), len(self.others)
        before = self._file_state()
        self._reset_file()
        try:
            try:
                meta = stream(path, name, self._ingest, on_read)
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
        link_file(self, base, base_others)
        self._reset_file()
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
        # Timestamps go to lists, moved to the columns after the chunk (_to_columns): the
        # integers made here live as long as the chunk's events, and no longer.
        starts_l: list[int] = []
        ends_l: list[int] = []
        o_starts_l: list[int] = []
        o_ends_l: list[int] = []
        rt_start_l: list[int] = []
        rt_end_l: list[int] = []
        dev_start_l: list[int] = []
        dev_dur_l: list[int] = []
        starts_append, ends_append = starts_l.append, ends_l.append
        exts_append = self.exts.append
        others = self.others
        o_names, o_kinds, o_tids = others.names.append, others.kinds.append, others.tids.append
        o_starts, o_ends = o_starts_l.append, o_ends_l.append
        shapes_append, scalars_append, strides_append = self.shapes.append, self.scalars.append, self.strides.append
        codes, thread_ids = self.cat_codes, self.thread_ids
        rt_corr, rt_thread = self.runtime.corr.append, self.runtime.thread.append
        rt_start, rt_end = rt_start_l.append, rt_end_l.append
        dev_corr, dev_ext, dev_dur = self.dev_corr, self.dev_ext, dev_dur_l
        dev_start, dev_stream, dev_class = dev_start_l, self.dev_stream, self.dev_class
        dev_device = self.dev_device
        frames, syncs = self.frames, self.syncs
        ignored = IGNORED_NAMES
        locations = self.location_cache
        last_dims = self.last_dims
        dims_cache, scalars_cache, last_scalars = self.dims_cache, self.scalars_cache, self.last_scalars
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
                    if args.__class__ is not RawDimsArgs and args.__class__ is not EventArgs:
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
                    kinds_append(code)
                    args = e.args
                    if args.__class__ is not RawDimsArgs and args.__class__ is not EventArgs:
                        _no_args_or_malformed(args)
                        args = None
                    if args is not None:
                        exts_append(args.external_id if code == KIND_OP else None)
                        dims = args.input_dims
                        if dims.__class__ is Raw:  # its text: one list per distinct text
                            text = bytes(dims)
                            dims = dims_cache.get(text, _UNSET)
                            if dims is _UNSET:
                                dims = dims_cache[text] = dims_value(text)
                        elif dims.__class__ is not list:
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
                        strides_append(strides_value(args.input_strides, dims_cache))
                        got = last_scalars.get(ev_name)  # as the op's last call's: most often
                        if got is not None and got[0] == args.concrete_inputs and got[1] == args.input_types:
                            scalars_append(got[2])
                        else:
                            scalars_append(recorded_scalars(ev_name, args.input_types, args.concrete_inputs, scalars_cache, last_scalars))
                    else:
                        exts_append(None)
                        shapes_append(None)
                        strides_append(None)
                        scalars_append(None)
                else:  # runtime call or Python frame: a child in the nesting, not an op
                    if code == _DISPATCH:  # a link to device work (flows.py), not an op
                        corr = self._dispatch(e, thread, start, start + dur_ns)
                        if corr is not None:  # a launch, as a runtime call's
                            rt_corr(corr)
                            rt_thread(thread)
                            rt_start(start)
                            rt_end(start + dur_ns)
                        continue
                    if code == KIND_RUNTIME:
                        args = e.args
                        if args.__class__ is not RawDimsArgs and args.__class__ is not EventArgs:
                            _no_args_or_malformed(args)
                            args = None
                        if args is not None:
                            corr = args.correlation
                            if corr is not None:
                                if corr.__class__ is not int:
                                    hash(corr)  # an unhashable one is malformed (as a key, it was)
                                rt_corr(corr)
                                rt_thread(thread)
                                rt_start(start)
                                rt_end(start + dur_ns)
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
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            raise TraceFormatError(
                f"{name}: malformed trace event ({type(exc).__name__}: {_short(str(exc))}): {_short(repr(e))}"
            ) from None
        self._to_columns(starts_l, ends_l, o_starts_l, o_ends_l, rt_start_l, rt_end_l, dev_start_l, dev_dur_l)
        self.raw_events += len(events)
        self.recognised += recognised
        self.negative += negative

    def _to_columns(self, *lists: list[int]) -> None:
        """A chunk's timestamps (in :meth:`_ingest`'s order) into the columns, 8 bytes each."""
        starts, ends, o_starts, o_ends, rt_start, rt_end, dev_start, dev_dur = lists
        table, others, runtime = self.table, self.others, self.runtime
        for owner, attr, values in (
            (table, "starts", starts), (table, "ends", ends), (others, "starts", o_starts), (others, "ends", o_ends),
            (runtime, "start", rt_start), (runtime, "end", rt_end), (self, "dev_start", dev_start), (self, "dev_dur", dev_dur),
        ):
            extend_ints(owner, attr, values)
        table.device_ns.extend(itertools.repeat(0, len(starts)))  # linked after the file
        others.device_ns.extend(itertools.repeat(0, len(o_starts)))

    def _dispatch(self, e: Any, thread: int, start: int, end: int) -> Any:
        """Note an operator dispatch; its correlation (None for none), checked hashable."""
        self.dispatches[(thread, start)] = end
        args = e.args
        corr = args.correlation if args.__class__ is RawDimsArgs or args.__class__ is EventArgs else None
        if corr is not None and corr.__class__ is not int:
            hash(corr)  # an unhashable one is malformed (as a key, it was)
        return corr

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

    # ---- after all files -------------------------------------------------------------------
    def finish(self) -> EventTable:
        """Order rows by start (parents first), as a live capture has them; fill shapes."""
        table = self.table
        n = len(table)
        for col in ("shapes", "strides", "scalars"):  # per row, or empty where no row has one
            setattr(table, col, getattr(self, col) if getattr(self, col).count(None) != n else [])
        if self.locations is not None:
            self.locations.extend([None] * (n - len(self.locations)))
        moved = start_order(table.starts, table.ends)
        if moved is not None:
            for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns"):
                setattr(table, attr, reordered(getattr(table, attr), moved))
            for col in ("shapes", "strides", "scalars"):
                if getattr(table, col):
                    setattr(table, col, reordered(getattr(table, col), moved))
            if self.locations is not None:
                self.locations = reordered(self.locations, moved)
            if table.range_device_ns:
                new_row = np.empty(n, dtype=np.int64)
                new_row[moved] = np.arange(n)
                table.range_device_ns = {int(new_row[r]): v for r, v in table.range_device_ns.items()}
        table.device = self.device if len(self.device) else None
        self.exts, self.shapes, self.strides, self.scalars = [], [], [], []
        table.others = self.others if len(self.others) else None
        return table


def _columns_table() -> EventTable:
    """A table whose timestamps and device times are :func:`int_column` s."""
    return EventTable(starts=int_column(), ends=int_column(), device_ns=int_column())


def _no_args_or_malformed(args: Any) -> None:
    """For ``args`` that are no object: return (they read as no args) where falsy, as
    ``if args:`` read them before; raise TypeError (a malformed event) where not."""
    if args:
        raise TypeError(f"'args' is a {type(args).__name__}, not an object")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def read_files(files: Sequence[Path], on_read: OnRead | None = None) -> tuple[EventTable, dict[str, Any]]:
    """Read ``files`` (one rank's) into one table, and what the files say (see
    :func:`neuronscope.trace.table_from_trace`); ``on_read`` is told the bytes of the files
    read as they are (a progress bar's steps)."""
    reader = _Reader()
    with gc_paused():
        for p in files:
            reader.read(p, on_read)
        table = reader.finish()
        table.processes = {i: key[0] for key, i in reader.thread_ids.items()}
        return table, trace_metadata(reader)
