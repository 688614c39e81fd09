"""The nesting: which event is open around which, per thread, in array operations.

:func:`parents` nests a whole table at once (for :func:`summarize`); :func:`innermost_open`
answers "which of these events was open at this instant" for many instants at once (the
launches of device work, in a trace and in a live capture).
"""

from __future__ import annotations

import itertools

import numpy as np

from .table import KIND_ANNOTATION, EventTable

__all__ = ["add_inner_range_device_time", "innermost_open", "parents"]


def parents(starts: np.ndarray, ends: np.ndarray, new_thread: np.ndarray, thr: np.ndarray | None = None) -> np.ndarray:
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
    Another ``thr`` (at most ``ends + 1``, so that the jumps stay valid) gives the nearest
    earlier event that ends at or after it: ``ends + 1``, the nearest that ends later.
    """
    m = len(starts)
    if thr is None:
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


def innermost_open(
    starts: np.ndarray, ends: np.ndarray, tids: np.ndarray, rows: np.ndarray, thread: np.ndarray, when: np.ndarray
) -> np.ndarray:
    """For each instant ``when[k]`` on ``thread[k]``, the innermost of ``rows`` (events of the
    aligned ``starts``, ``ends``, ``tids``) open at it on that thread, or -1.

    The innermost is the one a sweep with a stack finds (events pushed in (thread, start,
    -end) order, each popping those that ended at or before its start; at an instant, those
    ended before it popped; the top is the answer): the latest event in that order that has
    started by the instant and not ended before it. From the last event started by then, the
    links to the nearest earlier event that ends later (ends grow along them) lead to it;
    binary lifting takes jumps of 1, 2, 4... links, so a deep nesting costs O(log depth) rounds.
    """
    out = np.full(len(when), -1, dtype=np.int64)
    if not rows.size or not when.size:
        return out
    order = rows[np.lexsort((-ends[rows], starts[rows], tids[rows]))]  # stable: ties by row
    s, e, t = starts[order], ends[order], tids[order]
    m = order.size
    new_thread = np.ones(m, dtype=bool)
    new_thread[1:] = t[1:] != t[:-1]

    # The last event started at or before each instant (events first on a tie), on its thread.
    is_instant = np.concatenate([np.zeros(m, dtype=bool), np.ones(when.size, dtype=bool)])
    merged = np.lexsort((is_instant, np.concatenate([s, when]), np.concatenate([t, thread])))
    last = np.maximum.accumulate(np.where(is_instant[merged], -1, merged))
    at = np.empty(when.size, dtype=np.int64)
    at[merged[is_instant[merged]] - m] = last[is_instant[merged]]
    at[(at < 0) | (t[np.maximum(at, 0)] != thread)] = -1

    # Where that one ended before the instant: the nearest earlier one that ends at or after it.
    climb = np.flatnonzero((at >= 0) & (e[np.maximum(at, 0)] < when))
    if climb.size:
        later = parents(s, e, new_thread, thr=e + 1)  # the nearest earlier that ends later
        cur, w = at[climb], when[climb]
        for up in reversed(_lifting(later)):
            nxt = up[cur]
            cur = np.where((nxt >= 0) & (e[np.maximum(nxt, 0)] < w), nxt, cur)
        nxt = later[cur]
        at[climb] = np.where((nxt >= 0) & (e[np.maximum(nxt, 0)] >= w), nxt, -1)
    found = at >= 0
    out[found] = order[at[found]]
    return out


def _lifting(up: np.ndarray) -> list[np.ndarray]:
    """Binary lifting over the links ``up`` (-1: none): level ``k`` holds each event's
    ``2**k``-th link, -1 where the chain is shorter."""
    levels = [up]
    while (up >= 0).any():
        up = np.where(up >= 0, up[np.maximum(up, 0)], -1)
        levels.append(up)
    return levels


def add_inner_range_device_time(
    table: EventTable, thread: np.ndarray, when: np.ndarray, op: np.ndarray, device_ns: np.ndarray, base: int = 0
) -> None:
    """For device work linked to the op that launched it (launched on ``thread[k]`` at
    ``when[k]`` inside row ``op[k]``, ``device_ns[k]`` long), add the time to the innermost
    range open at the launch on that thread when the range opened inside the op
    (``nccl:all_reduce`` inside ``record_param_comms``): :attr:`EventTable.range_device_ns`.
    Only rows from ``base`` on are ranges considered."""
    if not when.size:
        return
    kinds = np.array(table.kinds[base:], dtype=np.int8)
    ranges = np.flatnonzero(kinds == KIND_ANNOTATION) + base
    if not ranges.size:
        return
    starts = np.array(table.starts, dtype=np.int64)
    r = innermost_open(starts, np.array(table.ends, dtype=np.int64), np.array(table.tids, dtype=np.int64), ranges, thread, when)
    inside = (r >= 0) & (r != op)
    inside[inside] = starts[r[inside]] >= starts[op[inside]]
    extra = table.range_device_ns
    for row, ns in zip(r[inside].tolist(), device_ns[inside].tolist()):
        extra[row] = extra.get(row, 0) + ns
