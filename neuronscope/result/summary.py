"""Per-op and per-region totals of an event table, counted as ``key_averages()`` counts."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuronscope.events.arrays import as_int64, runs_concatenated, unique_sorted
from neuronscope.events.nesting import parents
from neuronscope.events.table import (
    FLAG_ASYNC,
    FLAG_LEGACY_DEVICE,
    KIND_ANNOTATION,
    KIND_OP,
    KIND_PYTHON,
    KIND_RUNTIME,
    MAX_SHAPES_PER_OP,
    EventTable,
)
from neuronscope.result.ranges import RangesAround, device_totals, grouped_sums, inside_named_range, region_ops
from neuronscope.result.stats import OpStat, RegionStat

# ---- summarizing --------------------------------------------------------------------------


@dataclass
class Summary:
    """Per-op and per-region totals of an :class:`EventTable`."""

    ops: list[OpStat]
    regions: dict[str, RegionStat]
    span_us: float
    op_events: int
    notes: list[str] = field(default_factory=list)  # what the totals leave out, for the result


def _agg_name(name: str) -> str:
    """The name key_averages groups an event under."""
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


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

    def kept(values: Sequence[Any]) -> list[Any]:
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

    def col(attr: str) -> Any:
        main = getattr(table, attr)
        if others is None:
            return main
        other = getattr(others, attr)
        # A trace's columns are arrays of int64 (events.arrays.int_column), a live capture's
        # lists; a copy of either (less some rows) may be a list.
        return main + other if main.__class__ is other.__class__ else [*main, *other]

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
    tids = as_int64(col("tids"))
    starts = _int64s(table.starts, None if others is None else others.starts)
    ends = _int64s(table.ends, None if others is None else others.ends)
    span_ns = int(ends[:n_main].max() - starts[:n_main].min())
    dur = ends - starts
    flags = np.zeros(n, dtype=np.int8)
    if table.flags and len(table.flags) == n_main:
        flags[:n_main] = table.flags
    is_async = (flags & FLAG_ASYNC) != 0
    # What needs the durations in the table's order, before the nesting: async ops (a call
    # and its duration, no self time, no device time) and the ranges' calls and times.
    a_idx = np.flatnonzero(is_async)
    a_is_op = a_idx[(kinds[a_idx] == KIND_OP) | (kinds[a_idx] == KIND_RUNTIME)] if a_idx.size else a_idx
    a_calls = np.bincount(codes[a_is_op], minlength=n_codes)
    a_total = np.bincount(codes[a_is_op], weights=dur[a_is_op], minlength=n_codes)
    ann_all = np.flatnonzero(kinds == KIND_ANNOTATION)
    r_calls = np.bincount(codes[ann_all], minlength=n_codes)
    r_time = np.bincount(codes[ann_all], weights=dur[ann_all], minlength=n_codes)
    # What is not needed again goes as soon as it is done with: a big trace's table is
    # millions of rows, and each array of them tens of megabytes (memory follows the events).
    del dur, a_idx

    # ---- nesting (sync events only), in (thread, start, -end) order ----
    if is_async.any():
        sync = np.flatnonzero(~is_async)
        order = sync[np.lexsort((-ends[sync], starts[sync], tids[sync]))]
        del sync
    else:
        order = np.lexsort((-ends, starts, tids))
    m = len(order)
    s_start, s_end, s_tid = starts[order], ends[order], tids[order]
    del starts, ends, tids
    new_thread = np.ones(m, dtype=bool)
    new_thread[1:] = s_tid[1:] != s_tid[:-1]
    parent = parents(s_start, s_end, new_thread)
    del new_thread
    has_p = parent >= 0
    p_idx = parent[has_p]
    s_dur = s_end - s_start
    s_code = codes[order]
    s_kind = kinds[order]
    self_ns = s_dur - np.bincount(p_idx, weights=s_dur[has_p], minlength=m).astype(np.int64)
    # Work the range's thread handed to other threads of its process while it was open
    # (CUDA backward runs on autograd's device threads while the caller waits in
    # ``## backward ##``): the range's too (regions, below). By default a capture records only
    # the threads working for the one that started it (not so with profile_all_threads=True).
    cross = _other_thread_work(s_start, s_end, s_tid, s_kind, table.processes, n_main, order) if ann_all.size else None
    del s_start, s_end, s_tid
    r_dev_rows = None
    if has_device and ann_all.size and table.range_device_ns:
        # Work an op launched while a range inside it was open (nccl:all_reduce inside
        # record_param_comms): the range's own, and not passed up (the op has it).
        rows = np.fromiter(table.range_device_ns, dtype=np.int64, count=len(table.range_device_ns))
        vals = np.fromiter(table.range_device_ns.values(), dtype=np.int64, count=len(rows))
        r_dev_rows = np.bincount(codes[rows], weights=vals, minlength=n_codes)

    # key_averages folds an event into a same-named parent whose only child it is.
    n_children = np.bincount(p_idx, minlength=m)
    safe_p = np.where(has_p, parent, 0)
    folded = has_p & (s_code[safe_p] == s_code) & (n_children[safe_p] == 1)
    del n_children, safe_p
    s_dev_own: np.ndarray | None = None
    if has_device:
        dev_all = np.zeros(n, dtype=np.int64)
        dev_all[:n_main] = table.device_ns
        s_dev_own = dev_all[order]
        del dev_all
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
        # A folded event is gone in key_averages: its children count as its parent's, so it
        # must pass everything up, whatever it was.
        legacy = ((flags[order] & FLAG_LEGACY_DEVICE) != 0) & ~folded
        s_dev_total = device_totals(parent, s_dev_own, legacy)
        s_dev_self = s_dev_total - np.bincount(p_idx, weights=s_dev_total[has_p], minlength=m).astype(np.int64)
        del legacy
    del has_p, p_idx

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
    if a_is_op.size:  # async: a call and its duration, no self time, no device time
        calls += a_calls
        # Not in place: without a sync op, bincount of nothing gave integers.
        total_sum = total_sum + a_total

    shapes_by_code: dict[int, list[Any]] = {}
    if len(table.shapes) == n_main:
        gone = np.zeros(n, dtype=bool)  # folded events: key_averages never shows their shapes
        gone[order[folded]] = True
        shapes_by_code = _shapes(table, codes[:n_main], (kinds[:n_main] == KIND_OP) & ~gone[:n_main])
    present = np.flatnonzero(calls)
    op_stats = _op_stats(
        [key_names[c] for c in present.tolist()],
        calls[present],
        self_sum[present],
        total_sum[present],
        dev_self_sum[present] if dev_self_sum is not None else None,
        dev_total_sum[present] if dev_total_sum is not None else None,
        [[_signature(s) for s in shapes_by_code.get(c, ())] for c in present.tolist()],
    )
    op_events = int(calls.sum())
    del op_codes, a_is_op, is_async

    # ---- regions: each range name, its inclusive time and the ops inside it ----
    regions: dict[str, RegionStat] = {}
    notes: list[str] = []
    if table.off_clock_device:  # events.clocks: never device time, nor the breakdown's
        notes.append(
            f"{table.off_clock_device:,} device record(s) ({table.off_clock_device_ns / 1e3:,.1f} us) were left "
            "out: they start before their own launch call or far outside the capture, a clock other "
            "than the profiler's (pytorch/pytorch#192021: profiler sessions after the first in a "
            "process); their ops' device time is short by them"
        )
    del kinds, codes, order, flags
    if ann_all.size:
        r_dev = None
        if s_dev_total is not None:
            s_ann = np.flatnonzero(s_kind == KIND_ANNOTATION)
            r_dev = np.bincount(s_code[s_ann], weights=s_dev_total[s_ann], minlength=n_codes)
            if r_dev_rows is not None:
                r_dev += r_dev_rows
        around = RangesAround(parent, s_kind, s_code)
        pairs: Iterable[tuple[np.ndarray, np.ndarray]] = region_ops(around, op_pos, n_codes)
        if cross is _TOO_MANY:
            notes.append(
                "regions count only their own thread's work here: the other threads' work inside "
                f"them would be over {MAX_CROSS_PAIRS:,} (range, event) pairs"
            )
        elif cross is not None:
            reg_x, ev_x = cross
            # Once per range name, and not where the event's own thread has a range of that
            # name open around it (its own nesting counts it already: the pairs are apart).
            ev_x, reg_cx = np.divmod(unique_sorted(ev_x * n_codes + s_code[reg_x]), n_codes)
            apart = ~inside_named_range(around, reg_cx, ev_x)
            ev_x, reg_cx = ev_x[apart], reg_cx[apart]
            if r_dev is not None and s_dev_own is not None:
                r_dev += np.bincount(reg_cx, weights=s_dev_own[ev_x], minlength=n_codes).astype(r_dev.dtype)
            is_op_x = s_is_op[ev_x]
            pairs = itertools.chain(pairs, [(reg_cx[is_op_x], ev_x[is_op_x])])
        columns = [self_ns, s_dur] + ([s_dev_self, s_dev_total] if s_dev_self is not None and s_dev_total is not None else [])
        grouped = grouped_sums(pairs, s_code, n_codes, columns)
        per_region: dict[int, list[OpStat]] = {}
        if grouped is not None:
            keys, calls_g, sums = grouped
            g_reg, g_op = np.divmod(keys, n_codes)
            # Grouped by region (the keys are sorted), each region's ops largest first.
            region_rows = _op_stats(
                [key_names[c] for c in g_op.tolist()],
                calls_g,
                sums[0],
                sums[1],
                sums[2] if len(sums) > 2 else None,
                sums[3] if len(sums) > 2 else None,
                group=g_reg,
            )
            for rc, start, stop in _runs(g_reg):
                per_region[rc] = region_rows[start:stop]
        r_calls_l, r_time_l = r_calls.tolist(), r_time.tolist()
        r_dev_l = r_dev.tolist() if r_dev is not None else None
        for c in np.flatnonzero(r_calls).tolist():
            ops_in = per_region.get(c, [])
            name = key_names[c]
            regions[name] = RegionStat(
                name=name,
                calls=r_calls_l[c],
                time_us=round(r_time_l[c]) / 1e3,
                device_time_us=(round(r_dev_l[c]) / 1e3 if r_dev_l is not None else 0.0) if has_device else None,
                ops=ops_in,
            )
    return Summary(ops=op_stats, regions=regions, span_us=span_ns / 1e3, op_events=op_events, notes=notes)


def _int64s(main: Any, other: Any) -> np.ndarray:
    """Two columns of integers (lists, or a trace's arrays, read without a copy) as one int64
    array."""
    if other is None:
        return np.array(main, dtype=np.int64)
    return np.concatenate([np.asarray(main, dtype=np.int64), np.asarray(other, dtype=np.int64)])


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
    own), and a thread's events are found by binary search on their starts. Each thread
    reads its own run of positions and its process's ranges, never the whole table: a
    capture may hold thousands of threads."""
    threads = unique_sorted(tid)
    if len(threads) < 2:
        return None
    main = order < n_main
    range_pos = np.flatnonzero((kind == KIND_ANNOTATION) & main)
    if not range_pos.size:
        return None
    proc = np.array([hash(processes.get(int(t), 0)) for t in threads.tolist()], dtype=np.int64)
    range_proc = proc[np.searchsorted(threads, tid[range_pos])]
    by_proc = np.argsort(range_proc, kind="stable")
    ranges_of = {int(p): range_pos[by_proc[a:b]] for p, a, b in _runs(range_proc[by_proc])}
    first = np.searchsorted(tid, threads).tolist() + [tid.size]  # each thread's run of positions
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    budget = MAX_CROSS_PAIRS
    for k, (t, p) in enumerate(zip(threads.tolist(), proc.tolist())):
        ranges = ranges_of.get(p)
        if ranges is None:
            continue
        ranges = ranges[tid[ranges] != t]
        mine = first[k] + np.flatnonzero(main[first[k] : first[k + 1]])  # by start
        if not mine.size or not ranges.size:
            continue
        lo = np.searchsorted(start[mine], start[ranges], side="left")
        hi = np.searchsorted(start[mine], end[ranges], side="left")
        budget -= int((hi - lo).sum())
        if budget < 0:
            return _TOO_MANY
        some = hi > lo  # kept only where they hold pairs: memory grows with pairs, not threads^2
        if some.any():
            spans.append((mine, ranges[some], lo[some], hi[some]))
    reg_parts: list[np.ndarray] = []
    ev_parts: list[np.ndarray] = []
    for mine, ranges, lo, hi in spans:
        ev_parts.append(mine[runs_concatenated(lo, hi)])
        reg_parts.append(np.repeat(ranges, hi - lo))
    if not ev_parts:
        return None
    return np.concatenate(reg_parts), np.concatenate(ev_parts)


def _op_stats(
    names: list[str],
    calls: np.ndarray,
    self_ns: np.ndarray,
    total_ns: np.ndarray,
    dev_self_ns: np.ndarray | None,
    dev_total_ns: np.ndarray | None,
    shapes: list[list[Any]] | None = None,
    group: np.ndarray | None = None,
) -> list[OpStat]:
    """One :class:`OpStat` per position of the aligned arrays (nanoseconds), in
    ``key_averages`` order: largest :attr:`OpStat.time_us` first, then largest CPU total, ties
    in the given order; within each ``group`` (ascending) where one is given. Device fields are
    None without device arrays. Built in bulk: a model's regions hold thousands of rows."""

    def us(ns: np.ndarray | None) -> list[Any]:
        # Whole nanoseconds (half to even, as round() does), then microseconds.
        return [None] * len(names) if ns is None else (np.rint(ns) / 1e3).tolist()

    self_us, total_us, dself_us, dtotal_us = us(self_ns), us(total_ns), us(dev_self_ns), us(dev_total_ns)
    rank = np.asarray(dself_us if dev_self_ns is not None else self_us, dtype=np.float64)
    keys = [-np.asarray(total_us, dtype=np.float64), -rank]
    if group is not None:
        keys.append(group)
    order = np.lexsort(keys).tolist() if names else []
    calls_l = calls.tolist()
    return [
        OpStat(names[i], calls_l[i], self_us[i], total_us[i], dself_us[i], dtotal_us[i], shapes[i] if shapes is not None else [])
        for i in order
    ]


def _runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """``(value, start, stop)`` of each run of equal values in a sorted array."""
    if not len(values):
        return []
    cuts = (np.flatnonzero(np.diff(values)) + 1).tolist()
    starts = [0, *cuts]
    stops = [*cuts, len(values)]
    return list(zip(values[starts].tolist(), starts, stops))


def _signature(recorded: list[Any]) -> list[Any]:
    """A copy of one call's recorded input dims for the op table: an input whose dims are no
    list (not in any torch trace) reads as one without a shape."""
    return [list(dims) if dims.__class__ is list else [] for dims in recorded]


def _shapes(table: EventTable, codes: np.ndarray, rows: np.ndarray) -> dict[int, list[Any]]:
    """The first few distinct input-shape signatures of each op, in capture order."""
    out: dict[int, list[Any]] = {}
    op_rows = np.flatnonzero(rows)
    by_op = op_rows[np.argsort(codes[op_rows], kind="stable")]  # each op's rows, in order
    shapes = table.shapes
    for c, start, stop in _runs(codes[by_op]):
        seen: list[Any] = []
        for sh in map(shapes.__getitem__, by_op[start:stop].tolist()):
            if sh is not None and sh not in seen:
                seen.append(sh)
                if len(seen) >= MAX_SHAPES_PER_OP:
                    break
        if seen:
            out[c] = seen
    return out
