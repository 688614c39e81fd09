"""Device work linked to its launch by flow ids (Chrome-trace ``ac2g`` arrows, Kineto's
``flow_id``) where nothing else links it.

TorchNeuron's framework events come in pairs (Neuron docs, "System profiles" and the profile
schema reference's ``SystemProfileEvents.flow_id``): an operator dispatch
(``privateuse1_runtime``) on the op's own thread, and the device execution
(``privateuse1_driver``) it started, on a thread named by the stream id. A build may join the
two by a flow alone, with no ``External id`` / linked correlation naming the op: the execution
then belongs to the op open on the dispatch's thread when the dispatch started. This module
turns flow points into those launch instants; the readers (live and trace) find the op.

A dispatch is a step of its op's host work, not an op of its own: once it has served as a
link, the readers leave it out of the op table (:data:`DISPATCH_CATEGORIES`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from neuronscope.capture.neuron_explorer import BY_FLOW
from neuronscope.events.nesting import innermost_open, row_columns
from neuronscope.events.table import FLAG_ASYNC, KIND_OP, EventTable

__all__ = [
    "DISPATCH_CATEGORIES",
    "FLOW_CATEGORIES",
    "add_flow_device_time",
    "dispatch_flows_from_points",
    "drop_dispatches",
    "drop_others",
    "flow_launches",
    "flow_ns",
    "fold_system_profile",
    "launches_by_flow_id",
    "ops_at_launches",
]

#: Kineto's categories of a launch-to-device-work flow (CPU to GPU, async CPU to GPU).
FLOW_CATEGORIES = frozenset({"ac2g", "async_cpu_to_gpu"})
#: Operator dispatch to a device: the link between an op and its device work, no op itself.
DISPATCH_CATEGORIES = frozenset({"privateuse1_runtime"})


def launches_by_flow_id(
    flow_ids: Sequence[int], starts_flow: Sequence[bool], threads: Sequence[int], starts: Sequence[int], ends: Sequence[int]
) -> dict[int, tuple[int, int, int]]:
    """Dispatch events that start a flow: flow id -> (thread, start, end). Flow id 0 is none
    (Kineto's default); where two dispatches claim one id, the first is kept."""
    out: dict[int, tuple[int, int, int]] = {}
    for fid, first, t, s, e in zip(flow_ids, starts_flow, threads, starts, ends):
        if fid and first and fid not in out:
            out[fid] = (t, s, e)
    return out


def flow_ns(ts: Any) -> int | None:
    """A trace's microsecond timestamp in integer ns, as the trace reader reads an event's
    (whole and fractional microseconds apart); None where it is no number."""
    if ts.__class__ is int:
        return int(ts * 1000)
    if ts.__class__ is float:
        whole_us = int(ts)
        return whole_us * 1000 + int((ts - whole_us) * 1000 + 0.5)
    return None


def flow_launches(
    raw_points: Iterable[tuple[Any, Any, Any, Any]],
    thread_ids: dict[tuple[Any, Any], int],
    device_starts: Sequence[int],
    wanted: Iterable[int],
    dispatch_at: dict[tuple[int, int], int],
) -> dict[int, tuple[int, int, int]]:
    """The launch of each device event in ``wanted`` (positions in ``device_starts``) from a
    trace's flow points: device event -> (thread, start, end) of the dispatch.

    ``raw_points`` are the flow events as read, (id, pid, tid, ts in us); ``thread_ids`` numbers
    the (pid, tid) pairs as the reader does. A flow has a point where it starts (at a
    dispatch) and one where it ends (at the device work's start). A device event's flow is the
    one with a point at its start; the flow's other point, on a host thread at or before it,
    is the launch. ``dispatch_at`` maps (thread, start) of each dispatch to its end (a point on
    no dispatch ends where it starts). Ambiguous or incomplete flows link nothing.
    """
    by_id: dict[Any, list[tuple[int, int]]] = {}
    for fid, pid, tid, ts in raw_points:
        ns = flow_ns(ts)
        if ns is not None and fid.__class__ in (int, str):
            by_id.setdefault(fid, []).append((thread_ids.get((pid, tid), -1), ns))
    at_time: dict[int, list[Any]] = {}
    for fid, pts in by_id.items():
        if len(pts) == 2:
            for _, ts in pts:
                at_time.setdefault(ts, []).append(fid)
    out: dict[int, tuple[int, int, int]] = {}
    for k in wanted:
        start = device_starts[k]
        found: set[tuple[int, int]] = set()
        for fid in at_time.get(start, ()):
            (t0, ts0), (t1, ts1) = by_id[fid]
            # The other end: the point not at the device work's start, or where both are,
            # the one at a dispatch.
            if ts0 == start and ts1 != start:
                found.add((t1, ts1))
            elif ts1 == start and ts0 != start:
                found.add((t0, ts0))
            else:  # both at the start: the one at a dispatch
                found.update(p for p in ((t0, ts0), (t1, ts1)) if p in dispatch_at)
        hits = [p for p in found if p[0] >= 0 and p[1] <= start]
        if len(hits) == 1:
            thread, ts = hits[0]
            out[k] = (thread, ts, dispatch_at.get((thread, ts), ts))
    return out


def ops_at_launches(
    table: EventTable, launches: dict[int, tuple[int, int, int]], base: int = 0
) -> dict[int, tuple[int, tuple[int, int]]]:
    """For each device event's launch, (thread, start, end) of its dispatch: the innermost
    synchronous op (rows from ``base`` on) open on that thread at the start. Returns device
    event -> (op row, (start, end)); launches inside no op are left out."""
    if not launches:
        return {}
    starts, ends, tids, kinds = row_columns(table, base)
    ops = np.flatnonzero(kinds == KIND_OP)
    if table.flags:
        ops = ops[(np.array(table.flags[base:], dtype=np.int64)[ops] & FLAG_ASYNC) == 0]
    keys = list(launches)
    thread = np.array([launches[k][0] for k in keys], dtype=np.int64)
    when = np.array([launches[k][1] for k in keys], dtype=np.int64)
    found = innermost_open(starts, ends, tids, ops, thread, when)
    return {
        k: (row + base, (launches[k][1], launches[k][2])) for k, row in zip(keys, found.tolist()) if row >= 0
    }


def drop_others(others: EventTable, keep: list[bool]) -> EventTable | None:
    """``others`` (runtime calls, Python frames) less the rows ``keep`` marks False; None
    where nothing is left."""
    if all(keep):
        return others
    if not any(keep):
        return None
    for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns"):
        setattr(others, attr, list(itertools.compress(getattr(others, attr), keep)))
    return others


def drop_dispatches(
    table: EventTable, acts: list[str], flow_ids: Sequence[int] = (), starts_flow: Sequence[bool] = ()
) -> None:
    """Leave operator dispatches (``acts``: the activity of each of ``table.others``) out of
    the table once they linked device work, each a step of its op's host work, never an op
    of its own; their (thread, start) stay in ``table.dispatches`` for the hints, and the
    flows they start (``flow_ids``, ``starts_flow``: each of ``table.others``', where read) in
    ``table.dispatch_flows``."""
    others = table.others
    if others is None or DISPATCH_CATEGORIES.isdisjoint(acts):
        return
    keep = [a not in DISPATCH_CATEGORIES for a in acts]
    rows = [j for j, k in enumerate(keep) if not k]
    table.dispatches = [(others.tids[j], others.starts[j]) for j in rows]
    if flow_ids and starts_flow:
        table.dispatch_flows = launches_by_flow_id(
            [flow_ids[j] for j in rows],
            [starts_flow[j] for j in rows],
            [others.tids[j] for j in rows],
            [others.starts[j] for j in rows],
            [others.ends[j] for j in rows],
        )
    table.others = drop_others(others, keep)


def dispatch_flows_from_points(
    raw_points: Iterable[tuple[Any, Any, Any, Any]],
    thread_ids: dict[tuple[Any, Any], int],
    dispatch_at: dict[tuple[int, int], int],
) -> dict[Any, tuple[int, int, int]]:
    """A trace file's flows that start at a dispatch: flow id -> (thread, start, end) of the
    dispatch (``raw_points`` and ``thread_ids`` as :func:`flow_launches` takes them;
    ``dispatch_at``: (thread, start) -> end of each dispatch). An id at two dispatches links
    nothing (ambiguous)."""
    out: dict[Any, tuple[int, int, int]] = {}
    twice: set[Any] = set()
    for fid, pid, tid, ts in raw_points:
        ns = flow_ns(ts)
        thread = thread_ids.get((pid, tid), -1)
        if ns is None or (thread, ns) not in dispatch_at or fid.__class__ not in (int, str):
            continue
        if fid in out:
            twice.add(fid)
        out[fid] = (thread, ns, dispatch_at[(thread, ns)])
    for fid in twice:
        del out[fid]
    return out


def add_flow_device_time(table: EventTable, device_ns_by_flow: dict[Any, int]) -> tuple[int, int, set[str]]:
    """Device time measured elsewhere (Neuron Explorer's system profile: per flow id, the
    executions it started) into the ops whose dispatches started those flows, through
    ``table.dispatch_flows``: each flow's time to the innermost synchronous op open on its
    dispatch's thread then. Only ops with no device time of the table's own take it (where the
    framework trace carries device time for an op, that is kept, never added to twice).
    Returns (executions joined, their ns, the names of the ops that took device time)."""
    if not device_ns_by_flow or not table.dispatch_flows:
        return 0, 0, set()
    keys = [fid for fid in device_ns_by_flow if fid in table.dispatch_flows]
    found = ops_at_launches(table, {k: table.dispatch_flows[fid] for k, fid in enumerate(keys)})
    if not found:
        return 0, 0, set()
    if not table.device_ns:
        table.device_ns = [0] * len(table)
    own = {row for row, _ in found.values() if table.device_ns[row]}
    count = total = 0
    names: set[str] = set()
    for k, (row, _) in found.items():
        if row in own:
            continue
        ns = int(device_ns_by_flow[keys[k]])
        table.device_ns[row] += ns
        count += 1
        total += ns
        names.add(table.names[row])
    if count:
        table.has_device = True
    return count, total, names


def fold_system_profile(table: EventTable, profile: dict[str, Any] | None) -> list[str]:
    """Neuron Explorer's device time per flow (``profile``: the device-profile record of
    :mod:`neuronscope.capture.neuron_explorer`) into the op table where the framework trace
    carries none for an op (:func:`add_flow_device_time`); the per-flow figures leave the record
    (transient), which then says which ops took device time from the system profile. Returns
    the note for the result."""
    if not profile:
        return []
    by_flow = profile.pop(BY_FLOW, None)
    if not by_flow:
        return []
    count, ns, names = add_flow_device_time(table, by_flow)
    if not count:
        return []
    profile["ops_from_system_profile"] = sorted(names)
    note = (
        f"device time of {len(names):,} op(s) ({count:,} device execution(s), {ns / 1e3:,.1f} us) is Neuron "
        "Explorer's system profile's, joined to their dispatches by flow id (the framework trace "
        "carries none for them); the step breakdown has no device timeline from it"
    )
    return [note]
