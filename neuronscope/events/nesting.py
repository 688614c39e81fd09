"""The one nesting sweep: which event is open around which, per thread.

:func:`parents` nests a whole table at once (array operations, for :func:`summarize` and the
breakdown); :func:`innermost_open` answers "which of these events was open at this instant"
for a sorted list of instants (a trace's launches and frames).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable

import numpy as np

from .table import KIND_ANNOTATION, EventTable

__all__ = ["add_inner_range_device_time", "innermost_open", "parents", "rows_by_thread"]


def parents(starts: np.ndarray, ends: np.ndarray, new_thread: np.ndarray) -> np.ndarray:
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


def innermost_open(rows: list[int], starts: list[int], ends: list[int], instants: list[tuple[int, int]]) -> list[int]:
    """For each ``(instant, key)`` (in time order), the innermost of ``rows`` (one thread's
    events, parents first) open at that instant, or -1: one sweep with a stack."""
    out: list[int] = []
    stack: list[int] = []
    j, n = 0, len(rows)
    for when, _ in instants:
        # Open every row that starts at or before the instant...
        while j < n and starts[rows[j]] <= when:
            i = rows[j]
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            stack.append(i)
            j += 1
        # ...close those that ended before it; the innermost still open holds it.
        while stack and ends[stack[-1]] < when:
            stack.pop()
        out.append(stack[-1] if stack else -1)
    return out


def rows_by_thread(table: EventTable, kind: int, threads: Iterable[int], base: int = 0) -> dict[int, list[int]]:
    """The rows of ``kind`` from ``base`` on, per thread of ``threads``, parents first (by
    start, the longer first on a tie): the order :func:`innermost_open` takes."""
    kinds, tids, starts, ends = table.kinds, table.tids, table.starts, table.ends
    rows: dict[int, list[int]] = {t: [] for t in threads}
    # The rows of that kind picked at C speed (itertools), then grouped in Python.
    for i in itertools.compress(range(base, len(table)), map(kind.__eq__, itertools.islice(kinds, base, None))):
        lst = rows.get(tids[i])
        if lst is not None:
            lst.append(i)
    for lst in rows.values():
        lst.sort(key=lambda i: (starts[i] << 64) - ends[i])
    return rows


def add_inner_range_device_time(table: EventTable, launches: list[tuple[int, int, int, int]], base: int = 0) -> None:
    """For each ``(thread, launch instant, op row, device ns)`` (device work linked to the op
    that launched it), add the time to the innermost range open at the launch on that thread
    when the range opened inside the op (``nccl:all_reduce`` inside ``record_param_comms``):
    :attr:`EventTable.range_device_ns`. Only rows from ``base`` on are ranges considered."""
    if not launches:
        return
    starts, ends = table.starts, table.ends
    rows = rows_by_thread(table, KIND_ANNOTATION, {t for t, _, _, _ in launches}, base)
    range_starts = {t: [starts[r] for r in rs] for t, rs in rows.items() if rs}  # ascending
    by_thread: dict[int, list[tuple[int, int]]] = {}
    for k, (t, when, op, _) in enumerate(launches):
        # Only a launch with a range opened between its op's start and the launch can count:
        # a binary search leaves the others (nearly all) out of the sweep.
        rs = range_starts.get(t)
        if rs is not None:
            j = bisect.bisect_left(rs, starts[op])
            if j < len(rs) and rs[j] <= when:
                by_thread.setdefault(t, []).append((when, k))
    extra = table.range_device_ns
    for t, items in by_thread.items():
        ranges = rows[t]
        items.sort()
        for (_, k), r in zip(items, innermost_open(ranges, starts, ends, items)):
            _, _, op, dur = launches[k]
            if r >= 0 and starts[r] >= starts[op] and r != op:
                extra[r] = extra.get(r, 0) + dur
