"""Where did the step's time go: the device's busy and idle time, from the device events.

:func:`step_breakdown` reads :attr:`EventTable.device` (each device event's interval, stream,
class and launch) and the ``ProfilerStep#N`` ranges, and returns plain data (JSON-ready) for
the result:

- **Busy** is the union of the device's work intervals (kernels, copies, sets; a stream
  waiting on another is no work); **idle** is the rest of the device window, from the first
  device event's start to the last one's end, as Holistic Trace Analysis' temporal breakdown
  counts it (its ``kernel_time``).
- Each idle gap is split by cause: the part the host spent blocked in a synchronisation
  (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, CUPTI's sync records) is **sync**; of
  the rest, the part before the next kernel's launch call ended is **host** (the host had not
  launched the work yet); what is left (the work was queued: dependencies, launch latency) is
  **other**.
- Steps: each device event belongs to the step whose ``ProfilerStep#N`` range was open when it
  was launched (or when it ran, where the launch is unknown); a step's device window runs from
  its first event's start to the next step's. The windows tile the device window, so the steps
  add up to the total.
- Compute, communication (NCCL/RCCL kernels) and memory (copies and sets) each as the union of
  their intervals, and their overlap (time both ran at once); per stream busy time; launch
  statistics (kernels shorter than their launch call, the delay from launch to start).
- Several devices in one capture (one process driving two GPUs): each device's busy and idle
  time is its own; the breakdown is the busiest device's, the others' totals beside it.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from neuronscope.events.arrays import unique_first_inverse
from neuronscope.events.table import (
    DEVICE_CLASS_NAMES,
    DEVICE_COMM,
    DEVICE_COMPUTE,
    DEVICE_MEMCPY,
    DEVICE_MEMSET,
    DEVICE_WAIT,
    KIND_ANNOTATION,
    KIND_OP,
    DeviceEvents,
    EventTable,
)

__all__ = ["CHART_BINS", "MAX_STEPS", "step_breakdown"]

#: Bins of the timeline chart's busy profile: enough to see a step's shape, few enough that
#: result.json stays small whatever the capture.
CHART_BINS = 120
#: Most steps listed one by one (a long run: the first ones, then a note).
MAX_STEPS = 64
#: Devices broken down one by one (the busiest by kernel time; the rest are counted).
MAX_DEVICES = 64
#: Before any timestamp a table holds (the readers refuse those beyond +-2**62 ns).
_BEFORE = 1 << 62


class _Cover:
    """The union of intervals, with the covered length up to any instant in O(log n)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = _union(starts, ends)
        # For upto: a zero-length interval before every instant (timestamps are within
        # +-2**62), so that each instant has an interval at or before it.
        self._from = np.concatenate([[-_BEFORE], self.starts])
        self._length = np.concatenate([[0], self.ends - self.starts])
        self._before = np.cumsum(self._length) - self._length  # covered before each interval

    @property
    def total(self) -> int:
        return int(self._length.sum())

    def upto(self, x: np.ndarray) -> np.ndarray:
        """Covered length before each instant of ``x``."""
        i = np.searchsorted(self._from, x, side="right") - 1
        return self._before[i] + np.minimum(x - self._from[i], self._length[i])

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.upto(b) - self.upto(a)

    def per_window(self, edges: np.ndarray) -> np.ndarray:
        """Covered length between consecutive ``edges``: :meth:`within` for windows that tile."""
        return np.diff(self.upto(edges))


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals' union as disjoint intervals, by start."""
    if not starts.size:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run[:-1]  # touching intervals merge, as HTA merges them
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def _per_stream(stream: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each stream, its events and its busy time (the union of its intervals), all streams at
    once: a loop over streams costs streams x events."""
    ids, _, which = unique_first_inverse(stream)
    order = np.lexsort((starts, which))
    g, s, e = which[order], starts[order], ends[order]
    # As in _union, an interval starts a new run where it starts after every earlier one of its
    # stream has ended. Starts and ends ranked together, stream first, so that each stream's
    # ranks lie above the ones before it: the running maximum never carries across streams.
    n = s.size
    key_g, key_t = np.concatenate([g, g]), np.concatenate([s, e])
    by = np.lexsort((key_t, key_g))
    differs = np.ones(2 * n, dtype=bool)
    differs[1:] = (key_g[by][1:] != key_g[by][:-1]) | (key_t[by][1:] != key_t[by][:-1])
    rank = np.empty(2 * n, dtype=np.int64)
    rank[by] = np.cumsum(differs)
    run = np.maximum.accumulate(rank[n:])
    new = np.ones(n, dtype=bool)
    new[1:] = rank[: n][1:] > run[:-1]
    first = np.flatnonzero(new)
    length = np.maximum.reduceat(e, first) - s[first]
    return ids, np.bincount(which, minlength=ids.size), np.bincount(g[first], weights=length, minlength=ids.size)


def _ids(values: list[int]) -> np.ndarray:
    """Stream or device ids as int64 codes: the ids themselves where they fit, else each
    distinct id numbered in order of its value (a trace's ids past int64 raised OverflowError;
    only their identity matters here)."""
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        order = {v: k for k, v in enumerate(sorted(set(values)))}
        return np.array([order[v] for v in values], dtype=np.int64)


def _us(ns: float) -> float:
    return round(float(ns)) / 1e3


def _steps(table: EventTable) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The ``ProfilerStep#N`` ranges (any kind: torch 1.9 wrote them as ops), by start."""
    # Distinct names first: a loop over every row would cost more than the whole breakdown.
    step_names = {nm for nm in set(table.names) if nm.startswith("ProfilerStep#")}
    candidates = itertools.compress(itertools.count(), map(step_names.__contains__, table.names))
    rows = [i for i in candidates if table.kinds[i] in (KIND_OP, KIND_ANNOTATION)]
    rows.sort(key=lambda i: table.starts[i])
    names = [table.names[i] for i in rows]
    return names, np.array([table.starts[i] for i in rows], dtype=np.int64), np.array(
        [table.ends[i] for i in rows], dtype=np.int64
    )


def step_breakdown(table: EventTable) -> dict[str, Any] | None:
    """The device's busy and idle time of the capture and of each step (see the module
    notes), or None when the table holds no device intervals. Separate captures read together
    (:attr:`DeviceEvents.segments`) are broken down one by one and added up: the time between
    them is no idle time."""
    dev = table.device
    if dev is None or not len(dev):
        return None
    step_ranges = _steps(table)
    syncs = _Cover(np.array(dev.sync_starts, dtype=np.int64), np.array(dev.sync_ends, dtype=np.int64))
    ids = sorted(set(dev.devices))
    if len(ids) < 2:
        return _device_breakdown(dev, step_ranges, syncs)
    # One process driving several devices: each device is busy or idle on its own (a union
    # over all of them would call a device busy while another works). The breakdown shown is
    # the busiest device's; every device's totals are listed under "devices". Each device's
    # breakdown reads all events once, so only the MAX_DEVICES with the most kernel time are
    # broken down: a trace naming one device per kernel (20,000 of them) took over 100 s.
    left_out = 0
    if len(ids) > MAX_DEVICES:
        uniq, which = np.unique(_ids(dev.devices), return_inverse=True)
        length = np.asarray(dev.ends, dtype=np.float64) - np.asarray(dev.starts, dtype=np.float64)
        total = np.bincount(which, weights=length, minlength=uniq.size)
        keep = np.argsort(-total, kind="stable")[:MAX_DEVICES]
        left_out = len(ids) - MAX_DEVICES
        kept = set(keep.tolist())
        ids = sorted({d for d, k in zip(dev.devices, which.tolist()) if k in kept})
    each = {d: _device_breakdown(dev.of_device(d), step_ranges, syncs) for d in ids}
    found = {d: bd for d, bd in each.items() if bd is not None}
    if not found:
        return None
    main = max(found, key=lambda d: found[d]["busy_us"])
    out = dict(found[main])
    out["device"] = main
    out["devices"] = [
        {"device": d, **{k: bd[k] for k in ("window_us", "busy_us", "idle_us", "busy_pct")}} for d, bd in found.items()
    ]
    if left_out:
        out["devices_left_out"] = left_out
    return out


def _device_breakdown(dev: DeviceEvents, step_ranges: tuple[list[str], np.ndarray, np.ndarray], syncs: _Cover) -> dict[str, Any] | None:
    """One device's breakdown; separate captures of it are broken down one by one and added."""
    if len(dev.segments) > 1:
        bounds = [*dev.segments, len(dev)]
        parts = [_breakdown(dev.segment(a, b), step_ranges, syncs) for a, b in itertools.pairwise(bounds)]
        return _combine([p for p in parts if p is not None])
    return _breakdown(dev, step_ranges, syncs)


def _combine(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Several captures' breakdowns as one: times added, steps listed in turn, streams merged,
    launch counts and the host's lateness added (each beside the summed window); the launch
    medians and the chart are the longest capture's."""
    if len(parts) < 2:
        return parts[0] if parts else None
    main = max(parts, key=lambda p: p["window_us"])
    out = dict(main)
    for key in main:
        if key.endswith("_us") and isinstance(main[key], float):
            out[key] = round(sum(p[key] for p in parts), 3)
    out["busy_pct"] = round(100.0 * out["busy_us"] / out["window_us"], 2) if out["window_us"] else 0.0
    steps = [s for p in parts for s in p["steps"]]
    listed = len(steps) + sum(p.get("steps_left_out", 0) for p in parts)
    out["steps"] = steps[:MAX_STEPS]
    out.pop("steps_left_out", None)
    if listed > MAX_STEPS:
        out["steps_left_out"] = listed - MAX_STEPS
    streams: dict[int, dict[str, Any]] = {}
    for p in parts:
        for st in p["streams"]:
            row = streams.setdefault(st["stream"], {"stream": st["stream"], "events": 0, "busy_us": 0.0})
            row["events"] += st["events"]
            row["busy_us"] = round(row["busy_us"] + st["busy_us"], 3)
    out["streams"] = sorted(streams.values(), key=lambda r: r["busy_us"], reverse=True)
    launch = dict(main["launch"])
    for key in ("kernels", "linked", "shorter_than_launch"):
        if key in launch:
            launch[key] = sum(p["launch"].get(key, 0) for p in parts)
    launch["idle_host_before_kernels_us"] = round(sum(p["launch"]["idle_host_before_kernels_us"] for p in parts), 3)
    out["launch"] = launch
    out["captures"] = len(parts)
    return out


def _breakdown(dev: DeviceEvents, step_ranges: tuple[list[str], np.ndarray, np.ndarray], syncs: _Cover) -> dict[str, Any] | None:
    """The breakdown of one capture's device events; ``step_ranges`` and ``syncs`` (the host's time
    blocked in a synchronisation) are the whole table's: only those within the events' gaps
    count."""
    s = np.array(dev.starts, dtype=np.int64)
    e = np.array(dev.ends, dtype=np.int64)
    cls = np.array(dev.classes, dtype=np.int8)
    stream = _ids(dev.streams)
    ls = np.array(dev.launch_starts, dtype=np.int64)
    le = np.array(dev.launch_ends, dtype=np.int64)
    work = (cls != DEVICE_WAIT) & (e > s)
    if not work.any():
        return None
    s, e, cls, stream, ls, le = s[work], e[work], cls[work], stream[work], ls[work], le[work]
    busy = _Cover(s, e)
    t0, t1 = int(busy.starts[0]), int(busy.ends[-1])

    # ---- idle gaps and their causes ----
    g0, g1 = busy.ends[:-1], busy.starts[1:]
    order = np.argsort(s, kind="stable")
    # The event that ends each gap: the first to start at the next busy interval's start.
    first_after = order[np.searchsorted(s[order], g1, side="left")]
    launch_end = le[first_after]
    sync_ns = syncs.within(g0, g1)
    host_end = np.clip(np.where(launch_end >= 0, launch_end, g0), g0, g1)
    host_ns = np.maximum((host_end - g0) - syncs.within(g0, host_end), 0)
    other_ns = (g1 - g0) - sync_ns - host_ns
    # The host's lateness before a kernel (not before a copy, which waits for its data on the
    # host): what fewer, larger launches can win back.
    next_cls = cls[first_after]
    before_kernel = (next_cls == DEVICE_COMPUTE) | (next_cls == DEVICE_COMM)  # np.isin: ten times the time

    # ---- steps: each event to the step open at its launch (or start) ----
    step_names, step_s, _ = step_ranges
    when = np.where(ls >= 0, ls, s)
    if step_names:
        step_of = np.clip(np.searchsorted(step_s, when, side="right") - 1, 0, len(step_names) - 1)
        firsts = np.full(len(step_names), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(firsts, step_of, s)
        has = firsts < np.iinfo(np.int64).max
        names = [n for n, h in zip(step_names, has.tolist()) if h]
        bounds = np.minimum.accumulate(firsts[has][::-1])[::-1]  # a later step cannot start earlier
        bounds[0] = t0
    else:
        names = ["capture"]
        bounds = np.array([t0], dtype=np.int64)
    w0 = bounds  # the steps' windows: from each bound to the next, the last to t1

    is_compute, is_comm = cls == DEVICE_COMPUTE, cls == DEVICE_COMM
    is_memory = (cls == DEVICE_MEMCPY) | (cls == DEVICE_MEMSET)
    covers = {
        "compute": _Cover(*_pick(s, e, is_compute)),
        "communication": _Cover(*_pick(s, e, is_comm)),
        "memory": _Cover(*_pick(s, e, is_memory)),
    }
    # Where one side is empty, the union is the other side's cover (most traces: no NCCL).
    both_cc = _Cover(*_pick(s, e, is_compute | is_comm)) if is_comm.any() else covers["compute"]
    both_cm = _Cover(*_pick(s, e, is_compute | is_memory)) if is_memory.any() else covers["compute"]

    def part(edges: np.ndarray) -> dict[str, np.ndarray]:
        """The figures of each window between consecutive ``edges`` (windows that tile)."""
        a = edges[:-1]
        span = np.diff(edges)
        out = {"window": span, "busy": busy.per_window(edges)}
        for key, cov in covers.items():
            out[key] = cov.per_window(edges)
        out["overlap_compute_communication"] = out["compute"] + out["communication"] - both_cc.per_window(edges)
        out["overlap_compute_memory"] = out["compute"] + out["memory"] - both_cm.per_window(edges)
        # Gaps never straddle a window's bound (a bound is an event's start): each gap is its
        # window's, found by its start.
        gi = np.searchsorted(a, g0, side="right") - 1
        for key, vals in (("idle_host", host_ns), ("idle_sync", sync_ns), ("idle_other", other_ns)):
            out[key] = np.bincount(gi, weights=vals, minlength=len(a))[: len(a)] if gi.size else np.zeros(len(a))
        out["idle"] = span - out["busy"]
        return out

    per_step = part(np.append(w0, t1))
    # The steps' windows tile the device window, and every figure is a sum over time (integer
    # ns): the totals are the steps' sums.
    total = {key: vals.sum(keepdims=True) for key, vals in per_step.items()}

    def row(d: dict[str, np.ndarray], k: int) -> dict[str, float]:
        return {f"{key}_us": _us(vals[k]) for key, vals in d.items()}

    out: dict[str, Any] = {"device_window_start_ns": t0, **row(total, 0)}
    out["busy_pct"] = round(100.0 * out["busy_us"] / out["window_us"], 2) if out["window_us"] else 0.0
    steps = []
    for k, nm in enumerate(names[:MAX_STEPS]):
        steps.append({"name": nm, "start_us": _us(w0[k] - t0), **row(per_step, k)})
    out["steps"] = steps
    if len(names) > MAX_STEPS:
        out["steps_left_out"] = len(names) - MAX_STEPS

    # ---- streams ----
    ids, events, busy_ns = _per_stream(stream, s, e)
    streams = [
        {"stream": st, "events": n, "busy_us": _us(b)} for st, n, b in zip(ids.tolist(), events.tolist(), busy_ns.tolist())
    ]
    streams.sort(key=lambda r: r["busy_us"], reverse=True)
    out["streams"] = streams

    # ---- launches ----
    is_kernel = is_compute | is_comm
    kern = is_kernel & (ls >= 0) & (le >= ls)
    launch: dict[str, Any] = {
        "kernels": int(is_kernel.sum()),
        "linked": int(kern.sum()),
        "idle_host_before_kernels_us": _us(host_ns[before_kernel].sum()),
    }
    if kern.any():
        kd, ld, delay = (e - s)[kern], (le - ls)[kern], np.maximum((s - ls)[kern], 0)
        # Sorted once for the medians (as np.median takes them, far faster) and the p90.
        ascending = np.sort(np.stack([kd, ld, delay]), axis=1)
        mid = ascending[:, [(kd.size - 1) // 2, kd.size // 2]].tolist()
        launch.update(
            shorter_than_launch=int((kd < ld).sum()),
            median_kernel_us=_us(_mean(mid[0])),
            median_launch_us=_us(_mean(mid[1])),
            median_delay_us=_us(_mean(mid[2])),
            p90_delay_us=_us(_percentile(ascending[2].tolist(), 0.9)),
        )
    out["launch"] = launch

    # ---- the chart's busy profile ----
    edges = t0 + (np.arange(CHART_BINS + 1) * ((t1 - t0) / CHART_BINS)).round().astype(np.int64)
    edges[-1] = t1
    width = np.maximum(edges[1:] - edges[:-1], 1)
    out["chart"] = {
        "bin_us": _us((t1 - t0) / CHART_BINS),
        **{key: (cov.per_window(edges) / width).round(3).tolist() for key, cov in covers.items()},
        # Marked one by one where the steps are listed one by one (a long run's would be a
        # wall of lines, and a long list in result.json).
        "step_starts_us": [_us(b - t0) for b in w0.tolist()] if len(names) <= MAX_STEPS else [],
    }
    out["classes"] = list(DEVICE_CLASS_NAMES[:2]) + ["memory"]
    return out


def _percentile(ascending: list[int], q: float) -> float:
    """``np.percentile(values, 100 * q)`` (its default, linear method), computed as numpy
    computes it. np.percentile itself imports ``numpy.ma`` on its first call: 10 ms of a first
    ``from_trace``."""
    pos = (len(ascending) - 1) * q
    lo = int(pos)
    t = pos - lo
    a, b = ascending[lo], ascending[min(lo + 1, len(ascending) - 1)]
    # numpy's _lerp: from the nearer end, so that t = 0 and t = 1 give the ends exactly.
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def _mean(pair: list[int]) -> float:
    """The mean of two integers, as numpy's median takes it (in float64)."""
    return (float(pair[0]) + float(pair[1])) / 2


def _pick(s: np.ndarray, e: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return s[mask], e[mask]
