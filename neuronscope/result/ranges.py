"""The ranges around each event: which labelled ranges (regions) hold an op, and the device
time of an op with the ops nested in it, for :func:`neuronscope.result.summary.summarize`.

An event climbs from range to range a level at a time (:data:`_CLIMB_LEVELS`); ranges nested
deeper than that (hostile traces) are taken as whole subtrees instead, in chunks of at most
:data:`PAIRS_PER_CHUNK` (range, event) pairs, so no nesting makes the work or the memory blow up.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from neuronscope.events.arrays import runs_concatenated, unique_first_inverse, unique_sorted
from neuronscope.events.nesting import last_reaching, subtree_ends
from neuronscope.events.table import KIND_ANNOTATION

__all__ = ["PAIRS_PER_CHUNK", "RangesAround", "device_totals", "grouped_sums", "inside_named_range", "region_ops"]


#: Levels :func:`device_totals` and :func:`region_ops` climb one at a time before they take
#: whole subtrees instead: real nestings are shallower, and a climb is cheaper than the
#: subtrees' search.
_CLIMB_LEVELS = 32


def device_totals(parent: np.ndarray, own: np.ndarray, legacy: np.ndarray) -> np.ndarray:
    """Each event's device time with its descendants' (events in the order of
    :func:`~.nesting.parents`), as ``key_averages`` counts it: an event flagged ``legacy`` (its
    device time from the op itself) takes none of its descendants' time, nor passes it up.

    The time climbs the links a level a round; where it has not reached the top after
    :data:`_CLIMB_LEVELS` (a nesting that deep is hostile), every total is made from the
    subtrees instead, runs of positions in this order: prefix sums, less what a legacy event
    holds back from its ancestors up to the nearest legacy one above it."""
    total = own.copy()
    pos = np.flatnonzero(own)
    w = own[pos]
    for _ in range(_CLIMB_LEVELS):
        if not pos.size:
            return total
        up = parent[pos]
        keep = up >= 0
        keep[keep] = ~legacy[up[keep]]
        pos, w = up[keep], w[keep]
        np.add.at(total, pos, w)
    if not pos.size:
        return total
    last = subtree_ends(parent)
    first = np.arange(parent.size)

    def subtree_sum(values: np.ndarray) -> np.ndarray:
        before = np.concatenate(([0], np.cumsum(values)))
        return before[last + 1] - before[first]

    total = subtree_sum(own)
    held = np.flatnonzero(legacy)
    if held.size:
        back = total[held] - own[held]  # what a legacy event holds back: its descendants'
        # Taken from each ancestor up to the nearest legacy one above (which holds it back too).
        above = last_reaching(np.where(legacy, last, -1), held - 1, held)
        marks = np.zeros(parent.size, dtype=np.int64)
        marks[held] = back
        np.subtract.at(marks, above[above >= 0], back[above >= 0])
        total -= subtree_sum(marks)
        total[held] = own[held]
    return total


#: Most (range name, op) pairs made at once for the regions' op tables: ranges of distinct
#: names nested a thousand deep around 50,000 ops make 5 x 10^7 of them (3 GiB at once).
PAIRS_PER_CHUNK = 1 << 20


class _Outermost(NamedTuple):
    """The ranges inside no other range of their name, by name, then position."""

    positions: np.ndarray
    #: the last position inside each: a run of positions (the order of
    #: :func:`~.nesting.parents` is a preorder)
    last: np.ndarray
    names: np.ndarray
    #: above every position: ``names * stride + positions`` orders them as they are
    stride: int


class RangesAround:
    """The ranges around each event of a nesting (events in the order of
    :func:`~.nesting.parents`, their kinds and name codes), each view made once, when first
    asked for."""

    def __init__(self, parent: np.ndarray, kind: np.ndarray, code: np.ndarray) -> None:
        self.parent, self.kind, self.code = parent, kind, code

    @functools.cached_property
    def near(self) -> np.ndarray:
        """The innermost range around each event (-1 for none), by pointer jumping over the
        parents that are not ranges."""
        is_ann = self.kind == KIND_ANNOTATION
        near = self.parent.copy()
        todo = np.flatnonzero(near >= 0)
        todo = todo[~is_ann[near[todo]]]
        while todo.size:
            near[todo] = near[near[todo]]
            nt = near[todo]
            todo = todo[nt >= 0]
            todo = todo[~is_ann[near[todo]]]
        return near

    @functools.cached_property
    def outermost(self) -> _Outermost:
        """An event is inside a range name where it is inside the outermost range of that name
        around it: these, found for all names at once (for nestings too deep to climb)."""
        code = self.code
        ranges = np.flatnonzero(self.kind == KIND_ANNOTATION)
        ranges = ranges[np.argsort(code[ranges], kind="stable")]
        names, last = code[ranges], subtree_ends(self.parent, ranges)
        # Within a name the positions grow: a range is inside an earlier one of its name where
        # it starts at or before the furthest end so far. Each name's keys lie above every
        # position of the names before it, so the running maximum starts afresh at each name.
        stride = self.parent.size + 1
        furthest = np.maximum.accumulate(names * stride + last)
        outer = np.ones(ranges.size, dtype=bool)
        outer[1:] = names[1:] * stride + ranges[1:] > furthest[:-1]
        return _Outermost(ranges[outer], last[outer], names[outer], stride)


#: Events whose ranges :func:`region_ops` finds at once: a few ranges around each (the usual
#: nesting) keep a chunk's pairs at a few megabytes however many events a trace holds.
_EVENTS_PER_CHUNK = PAIRS_PER_CHUNK >> 4


def region_ops(around: RangesAround, positions: np.ndarray, n_codes: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(region code, event position) for each of the ascending ``positions`` and each
    distinct range name around it, in chunks of at most about :data:`PAIRS_PER_CHUNK` pairs.

    Each event climbs from range to range (:attr:`RangesAround.near`), at most
    :data:`_CLIMB_LEVELS` levels. Ranges nested deeper (hostile: a pair per level, 2 x 10^8 of
    them for 20,000 levels) go by :func:`_in_outermost_ranges`, as much work as pairs. An
    event's pairs depend on it alone: the events go :data:`_EVENTS_PER_CHUNK` at a time.
    """
    for k in range(0, positions.size, _EVENTS_PER_CHUNK):
        yield from _climbed(around, positions[k : k + _EVENTS_PER_CHUNK], n_codes)


def _climbed(around: RangesAround, positions: np.ndarray, n_codes: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`region_ops` of some events."""
    near, code = around.near, around.code
    ev_parts: list[np.ndarray] = []
    reg_parts: list[np.ndarray] = []
    ev = positions
    cur = near[positions]
    for _ in range(_CLIMB_LEVELS):
        live = cur >= 0
        ev, cur = ev[live], cur[live]
        if not ev.size:
            break
        ev_parts.append(ev)
        reg_parts.append(code[cur])
        cur = near[cur]
    if (cur >= 0).any():
        return _in_outermost_ranges(around.outermost, positions)
    if not ev_parts:
        return iter(())
    ev_all = np.concatenate(ev_parts)
    reg_all = np.concatenate(reg_parts)
    if len(ev_parts) > 1:  # ranges of one name nested: count the event once for that name
        pair = unique_sorted(ev_all * n_codes + reg_all)
        ev_all, reg_all = np.divmod(pair, n_codes)
    return iter([(reg_all, ev_all)])


def inside_named_range(around: RangesAround, names: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Whether each event ``positions[k]`` is inside a range named ``names[k]`` on its own
    thread: a climb from range to range, at most :data:`_CLIMB_LEVELS` levels, then (ranges
    nested deeper) the outermost ranges of the names."""
    near, code = around.near, around.code
    found = np.zeros(positions.size, dtype=bool)
    asked = np.arange(positions.size)
    cur = near[positions]
    for _ in range(_CLIMB_LEVELS):
        live = cur >= 0
        asked, cur = asked[live], cur[live]
        if not asked.size:
            return found
        hit = code[cur] == names[asked]
        found[asked[hit]] = True
        asked, cur = asked[~hit], near[cur[~hit]]
    left = asked[cur >= 0]
    if left.size:
        outer = around.outermost
        keys = outer.names * outer.stride + outer.positions
        # The last outermost range of the name before the event: it holds the event, or none does.
        k = np.searchsorted(keys, names[left] * outer.stride + positions[left], side="left") - 1
        ok = k >= 0
        ok[ok] = (outer.names[k[ok]] == names[left[ok]]) & (outer.last[k[ok]] >= positions[left[ok]])
        found[left] = ok
    return found


def _in_outermost_ranges(outer: _Outermost, positions: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`region_ops` however deep ranges nest: the events of the ascending ``positions``
    in the run of each outermost range (less the range itself), by binary search; a chunk of
    ranges at a time."""
    lo = np.searchsorted(positions, outer.positions, side="right")  # a range is not inside itself
    hi = np.searchsorted(positions, outer.last, side="right")
    ends = np.cumsum(hi - lo)
    done = 0
    while done < lo.size:
        # The ranges whose pairs fit in a chunk (at least one, however many pairs it has).
        upto = max(done + 1, int(np.searchsorted(ends, (ends[done - 1] if done else 0) + PAIRS_PER_CHUNK, side="right")))
        a, b = lo[done:upto], hi[done:upto]
        if (b > a).any():
            yield np.repeat(outer.names[done:upto], b - a), positions[runs_concatenated(a, b)]
        done = upto


def grouped_sums(
    pairs: Iterable[tuple[np.ndarray, np.ndarray]], code: np.ndarray, n_codes: int, columns: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None:
    """Per (region code, op code) key, ascending: the events' count and each column's sum over
    the (region code, event position) ``pairs``, chunk by chunk, so that memory holds one
    chunk's pairs. None where there are none."""
    keys_parts: list[np.ndarray] = []
    sums_parts: list[list[np.ndarray]] = []
    for reg, ev in pairs:
        if not ev.size:
            continue
        uniq, _, inv = unique_first_inverse(reg * n_codes + code[ev])
        keys_parts.append(uniq)
        sums_parts.append([np.bincount(inv, minlength=uniq.size)] + [np.bincount(inv, weights=c[ev], minlength=uniq.size) for c in columns])
    if not keys_parts:
        return None
    if len(keys_parts) == 1:
        return keys_parts[0], sums_parts[0][0], sums_parts[0][1:]
    # A key may come in several chunks: add them up.
    uniq, _, inv = unique_first_inverse(np.concatenate(keys_parts))
    merged = [np.bincount(inv, weights=np.concatenate(part), minlength=uniq.size) for part in zip(*sums_parts)]
    return uniq, merged[0].astype(np.int64), merged[1:]
