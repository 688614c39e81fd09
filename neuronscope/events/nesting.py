"""The nesting: which event is open around which, per thread, in array operations.

:func:`parents` nests a whole table at once (for :func:`summarize`); :func:`innermost_open`
answers "which of these events was open at this instant" for many instants at once (the
launches of device work, in a trace and in a live capture); :func:`enclosing` walks events in
order with the stack of those open around each, for the few readers that need the whole stack.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from neuronscope.events.arrays import as_int64
from neuronscope.events.table import KIND_ANNOTATION, EventTable

__all__ = ["add_inner_range_device_time", "enclosing", "innermost_open", "last_reaching", "parents", "row_columns", "subtree_ends"]

#: Rounds of pointer jumping in :func:`parents` before the rest go to :func:`last_reaching`:
#: the traces we know need 13 to 19, each cheaper than a round of the tree.
_JUMP_ROUNDS = 24


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
    A jump that lands on an event whose parent is settled moves one level up per round: after
    :data:`_JUMP_ROUNDS` rounds (real traces need fewer), the events still looking are found
    by :func:`last_reaching`, so that a nesting thousands deep costs no more than a shallow one.
    """
    m = len(starts)
    thr = np.where(ends > starts, ends, starts + 1)
    ans = np.arange(-1, m - 1, dtype=np.int64)
    ans[new_thread] = -1
    # Running max of ends within each thread, up to the previous event: written one place
    # on, so that no second array of them is made (a thread's first place holds the previous
    # thread's, which new_thread overrides).
    seg_starts = np.flatnonzero(new_thread)
    before = np.empty(m + 1, dtype=np.int64)
    before[:1] = -1  # none where every event is async (m = 0)
    bounds = list(seg_starts) + [m]
    for a, b in itertools.pairwise(bounds):
        np.maximum.accumulate(ends[a:b], out=before[a + 1 : b + 1])
    orphan = new_thread | (before[:m] < thr)
    del before
    ans[orphan] = -1
    todo = np.flatnonzero(~orphan)
    for _ in range(_JUMP_ROUNDS):
        if not todo.size:
            return ans
        cand = ans[todo]
        miss = ends[cand] < thr[todo]
        todo = todo[miss]
        if not todo.size:
            break
        nxt = ans[cand[miss]]
        ans[todo] = nxt
        todo = todo[nxt >= 0]
    if todo.size:  # nothing after ans[i] (up to i) reaches thr[i]; an earlier thread's event is none
        thread_start = np.maximum.accumulate(np.where(new_thread, np.arange(m), 0))
        found = last_reaching(ends, ans[todo], thr[todo])
        ans[todo] = np.where(found >= thread_start[todo], found, -1)
    return ans


def subtree_ends(parent: np.ndarray, of: np.ndarray | None = None) -> np.ndarray:
    """The last descendant of each event (itself where it has none), or of the events at the
    positions ``of``; events in the order of :func:`parents` (a preorder: an event's
    descendants follow it, a run of positions). The run ends before the first later event whose
    parent comes before the event (on another thread: -1); found for all at once with
    :func:`last_reaching`, over the order reversed."""
    m = parent.size
    i = np.arange(m) if of is None else of
    # First j > i with -parent[j] >= 1 - i; in the reversed order (j = m - 1 - r), the last r
    # at or before m - 2 - i.
    r = last_reaching(-parent[::-1], m - 2 - i, 1 - i)
    return np.where(r >= 0, m - 2 - r, m - 1)


def last_reaching(values: np.ndarray, upto: np.ndarray, at_least: np.ndarray) -> np.ndarray:
    """For each query ``k``, the last position ``j <= upto[k]`` with ``values[j] >= at_least[k]``,
    or -1 (also where ``upto[k] < 0``). All queries at once, in at most 2 log2(len(values))
    rounds, with a tree of maxima (two to four times the values' memory): from the leaf ``upto[k]`` up
    until the subtree just left of the path holds a value that reaches, then down into its
    rightmost part that does."""
    out = np.full(upto.size, -1, dtype=np.int64)
    n = values.size
    if not n:
        return out
    size = 1 << (n - 1).bit_length()
    # tree[1] is the root, tree[i]'s children are 2i and 2i + 1, the leaves tree[size:]; tree[0]
    # (the root's "left sibling") and the padding are below any value.
    tree = np.full(2 * size, np.iinfo(np.int64).min, dtype=np.int64)
    tree[size : size + n] = values
    half = size >> 1
    while half:
        tree[half : 2 * half] = np.maximum(tree[2 * half : 4 * half : 2], tree[2 * half + 1 : 4 * half : 2])
        half >>= 1
    query = np.flatnonzero(upto >= 0)
    node = upto[query] + size
    need = at_least[query]
    here = tree[node] >= need
    found_query, found_node = [query[here]], [node[here]]
    query, node, need = query[~here], node[~here], need[~here]
    while query.size:  # up: a right child whose left sibling holds a value that reaches
        left = ((node & 1) == 1) & (tree[node - 1] >= need)
        found_query.append(query[left])
        found_node.append(node[left] - 1)
        node = node[~left] >> 1
        go_on = node > 1  # at the root: nothing to the left reaches
        query, node, need = query[~left][go_on], node[go_on], need[~left][go_on]
    query, node = np.concatenate(found_query), np.concatenate(found_node)
    need = at_least[query]
    inner = np.flatnonzero(node < size)
    while inner.size:  # down: into the right child where it reaches, else the left
        right = 2 * node[inner] + 1
        node[inner] = np.where(tree[right] >= need[inner], right, right - 1)
        inner = inner[node[inner] < size]
    out[query] = node - size
    return out


def innermost_open(
    starts: np.ndarray, ends: np.ndarray, tids: np.ndarray, rows: np.ndarray, thread: np.ndarray, when: np.ndarray
) -> np.ndarray:
    """For each instant ``when[k]`` on ``thread[k]``, the innermost of ``rows`` (events of the
    aligned ``starts``, ``ends``, ``tids``) open at it on that thread, or -1.

    The innermost is the one a sweep with a stack finds (events pushed in (thread, start,
    -end) order, each popping those that ended at or before its start; at an instant, those
    ended before it popped; the top is the answer). That is the latest event in that order
    that has started by the instant and not ended before it. Two steps find it: the last event
    started by the instant (one sort of events and instants together); where that one ended
    before the instant, the last event before it that ends at or after the instant
    (:func:`last_reaching`: log n rounds, however deep the nesting).
    """
    out = np.full(len(when), -1, dtype=np.int64)
    if not rows.size or not when.size:
        return out
    order = rows[np.lexsort((-ends[rows], starts[rows], tids[rows]))]  # stable: ties by row
    s, e, t = starts[order], ends[order], tids[order]
    m = order.size

    # The last event started at or before each instant (events first on a tie), on its thread.
    is_instant = np.concatenate([np.zeros(m, dtype=bool), np.ones(when.size, dtype=bool)])
    merged = np.lexsort((is_instant, np.concatenate([s, when]), np.concatenate([t, thread])))
    last = np.maximum.accumulate(np.where(is_instant[merged], -1, merged))
    at = np.empty(when.size, dtype=np.int64)
    at[merged[is_instant[merged]] - m] = last[is_instant[merged]]
    at[(at < 0) | (t[np.maximum(at, 0)] != thread)] = -1

    # Where that one ended before the instant: the last one before it, on its thread, that
    # ends at or after the instant (any between ended before it, or closed inside that one).
    climb = np.flatnonzero((at >= 0) & (e[np.maximum(at, 0)] < when))
    if climb.size:
        up = last_reaching(e, at[climb], when[climb])
        at[climb] = np.where((up >= 0) & (t[np.maximum(up, 0)] == thread[climb]), up, -1)
    found = at >= 0
    out[found] = order[at[found]]
    return out


def enclosing(
    table: EventTable, rows: Iterable[int] | None = None, opens: Callable[[int], bool] | None = None
) -> Iterator[tuple[int, list[int]]]:
    """Each of ``rows`` (default: every row) in start order per thread, outer events first, with
    the rows of ``rows`` open around it, outermost first; with ``opens``, only those for which
    it is true (the rest are yielded, never on the stack: a reader that wants the innermost
    region reads the stack's top, not back through events nested thousands deep). The list is
    the walk's own stack, valid until the next step: read it, do not keep it."""
    per_thread: dict[int, list[int]] = {}
    for i in range(len(table)) if rows is None else rows:
        per_thread.setdefault(table.tids[i], []).append(i)
    starts, ends = table.starts, table.ends
    for indices in per_thread.values():
        indices.sort(key=lambda i: (starts[i], -ends[i]))
        stack: list[int] = []
        for i in indices:
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            yield i, stack
            if opens is None or opens(i):
                stack.append(i)


def row_columns(table: EventTable, base: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows from ``base`` on as arrays: starts, ends, thread ids (:func:`as_int64`), kinds."""
    return (
        np.array(table.starts[base:], dtype=np.int64),
        np.array(table.ends[base:], dtype=np.int64),
        as_int64(table.tids[base:]),
        np.array(table.kinds[base:], dtype=np.int8),
    )


def add_inner_range_device_time(
    table: EventTable,
    when: np.ndarray,
    op: np.ndarray,
    device_ns: np.ndarray,
    base: int = 0,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> None:
    """For device work linked to the op that launched it (launched at ``when[k]`` inside row
    ``op[k]``, ``device_ns[k]`` long), add the time to the innermost range open at the launch
    on the op's thread when the range opened inside the op (``nccl:all_reduce`` inside
    ``record_param_comms``): :attr:`EventTable.range_device_ns`. Only rows from ``base`` on
    (ops and ranges alike: one file's) are read; ``columns``: their :func:`row_columns`, where
    the caller has them."""
    if not when.size:
        return
    starts, ends, tids, kinds = columns if columns is not None else row_columns(table, base)
    ranges = np.flatnonzero(kinds == KIND_ANNOTATION)
    if not ranges.size:
        return
    op = op - base
    r = innermost_open(starts, ends, tids, ranges, tids[op], when)
    inside = (r >= 0) & (r != op)
    inside[inside] = starts[r[inside]] >= starts[op[inside]]
    extra = table.range_device_ns
    for row, ns in zip((r[inside] + base).tolist(), device_ns[inside].tolist()):
        extra[row] = extra.get(row, 0) + ns
