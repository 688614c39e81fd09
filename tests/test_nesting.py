"""The nesting in array operations agrees with the sweep with a stack it stands for: random
tables (partial overlaps, ties, zero-length events, several threads, deep nesting), each
event's parent and each instant's innermost open event checked against a plain Python sweep;
the tree of maxima against a plain search; the range names around each event against a climb
up the links; nestings 100,000 deep (ops) and 20,000 deep (ranges) read in linear time."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from neuronscope.events import EventTable, nesting
from neuronscope.events.nesting import add_inner_range_device_time, innermost_open, last_reaching, parents, subtree_ends
from neuronscope.events.table import KIND_ANNOTATION, KIND_OP
from neuronscope.result import ranges, summary


def _swept(starts: list[int], ends: list[int], tids: list[int], rows: list[int], instants: list[tuple[int, int]]) -> list[int]:
    """The reference: per thread, rows pushed by (start, -end), each popping those that ended
    at or before its start; at an instant (in time order), those that ended before it popped,
    and the top is the innermost open."""
    out = {}
    for thread in {tids[r] for r in rows} | {t for t, _ in instants}:
        mine = sorted((r for r in rows if tids[r] == thread), key=lambda r: (starts[r], -ends[r], r))
        stack: list[int] = []
        j = 0
        for k in sorted((k for k, (t, _) in enumerate(instants) if t == thread), key=lambda k: instants[k][1]):
            when = instants[k][1]
            while j < len(mine) and starts[mine[j]] <= when:
                while stack and ends[stack[-1]] <= starts[mine[j]]:
                    stack.pop()
                stack.append(mine[j])
                j += 1
            while stack and ends[stack[-1]] < when:
                stack.pop()
            out[k] = stack[-1] if stack else -1
    return [out[k] for k in range(len(instants))]


def arr(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _random_table(rng: random.Random, n: int, span: int, threads: int) -> tuple[list[int], list[int], list[int]]:
    starts = [rng.randrange(span) for _ in range(n)]
    ends = [s + rng.choice([0, 0, 1, rng.randrange(span // 4 + 1), rng.randrange(span)]) for s in starts]
    tids = [rng.randrange(threads) for _ in range(n)]
    return starts, ends, tids


def _sorted_random_table(rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    starts, ends, tids = _random_table(rng, rng.choice([1, 2, 5, 20, 300]), rng.choice([3, 10, 1000]), rng.choice([1, 2, 3]))
    rows = sorted(range(len(starts)), key=lambda i: (tids[i], starts[i], -ends[i]))
    return [starts[i] for i in rows], [ends[i] for i in rows], [tids[i] for i in rows]


def _vectorised(starts: list[int], ends: list[int], tids: list[int], rows: list[int], instants: list[tuple[int, int]]) -> list[int]:
    return innermost_open(
        arr(starts), arr(ends), arr(tids), arr(rows), arr([t for t, _ in instants]), arr([w for _, w in instants])
    ).tolist()


@pytest.mark.parametrize("seed", range(300))
def test_innermost_open_is_the_stack_sweeps(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 5, 20, 200])
    span = rng.choice([3, 10, 1000])
    starts, ends, tids = _random_table(rng, n, span, rng.choice([1, 2, 3]))
    rows = sorted(rng.sample(range(n), rng.randrange(n + 1)))
    instants = [(rng.randrange(3), rng.randrange(-2, span + span // 2)) for _ in range(rng.choice([1, 10, 100]))]
    assert _vectorised(starts, ends, tids, rows, instants) == _swept(starts, ends, tids, rows, instants)


def test_innermost_open_climbs_a_deep_nesting() -> None:
    # 3,000 events nested one in the next, each instant after some of the inner ones closed:
    # the answer is the depth-th event, thousands of links up from the last one started.
    depth = 3000
    starts = list(range(depth))
    ends = [2 * depth - i for i in range(depth)]
    tids = [0] * depth
    rows = list(range(depth))
    instants = [(0, w) for w in range(depth - 1, 2 * depth + 8, 7)] + [(1, 5)]
    got = _vectorised(starts, ends, tids, rows, instants)
    assert got == _swept(starts, ends, tids, rows, instants)
    assert got[-1] == -1 and got[0] == depth - 1 and -1 in got[:-1]


def test_a_range_opened_inside_the_launching_op_gets_the_device_time() -> None:
    # record_param_comms (op, row 0) holds nccl:all_reduce (range, row 1) which launched the
    # kernel; a range around the op (row 2, opened before it) does not get it from here.
    table = EventTable()
    for name, kind, s, e in [("c10d::allreduce_", KIND_OP, 100, 200), ("nccl:all_reduce", KIND_ANNOTATION, 120, 180), ("step", KIND_ANNOTATION, 50, 300)]:
        table.names.append(name)
        table.kinds.append(kind)
        table.tids.append(0)
        table.starts.append(s)
        table.ends.append(e)
        table.device_ns.append(0)
    # Launched inside the range, before it opened, after it closed.
    add_inner_range_device_time(table, arr([150, 110, 190]), arr([0, 0, 0]), arr([7, 5, 3]))
    assert table.range_device_ns == {1: 7}


# ---- parents: key_averages' stack, and the tree of maxima for what pointer jumping leaves ----
def _stack_parents(starts: list[int], ends: list[int], tids: list[int]) -> list[int]:
    """The reference, events in (thread, start, -end) order: each pops the open ones that end
    before its threshold (its end; start + 1 for an instant), its parent is the top."""
    out, stack = [], []
    for i, (s, e, t) in enumerate(zip(starts, ends, tids)):
        if i and t != tids[i - 1]:
            stack = []
        thr = e if e > s else s + 1
        while stack and ends[stack[-1]] < thr:
            stack.pop()
        out.append(stack[-1] if stack else -1)
        stack.append(i)
    return out


def _parents(starts: list[int], ends: list[int], tids: list[int]) -> list[int]:
    t = arr(tids)
    new_thread = np.ones(len(t), dtype=bool)
    new_thread[1:] = t[1:] != t[:-1]
    return parents(arr(starts), arr(ends), new_thread).tolist()


@pytest.mark.parametrize("jump_rounds", [0, 1, 24])
@pytest.mark.parametrize("seed", range(100))
def test_parents_are_the_stack_sweeps(seed: int, jump_rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # No rounds of pointer jumping: the tree of maxima finds every parent; one round: most.
    monkeypatch.setattr(nesting, "_JUMP_ROUNDS", jump_rounds)
    starts, ends, tids = _sorted_random_table(random.Random(seed))
    assert _parents(starts, ends, tids) == _stack_parents(starts, ends, tids)


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Count the calls of ``module.name`` (still calling it): that a deep nesting took the
    path made for it, and did not merely finish in the end."""
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_nesting_100000_deep_takes_no_round_per_level(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ops nested 100,000 deep, op i over [i, 4d - 2i]; after the inner ones closed, an instant
    # in each, at 4d - 2i - 1, in time order (the innermost op's first). Pointer jumping
    # carries each instant down the others' to the innermost op, then one level a round: a
    # round per level (most of a minute here); the tree of maxima finds them in a fraction of a second.
    d = 100_000
    starts = list(range(d)) + [4 * d - 2 * i - 1 for i in reversed(range(d))]
    ends = [4 * d - 2 * i for i in range(d)] + starts[d:]
    searched = _spy(monkeypatch, nesting, "last_reaching")
    got = _parents(starts, ends, [0] * (2 * d))
    assert searched  # the tree of maxima took over from pointer jumping
    assert got[:d] == list(range(-1, d - 1))
    assert got[d:] == list(reversed(range(d)))  # each instant's parent: the op it is in


@pytest.mark.parametrize("seed", range(50))
def test_last_reaching_is_a_plain_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(-5, 20, rng.integers(1, 80))
    upto = rng.integers(-2, values.size, 40)
    at_least = rng.integers(-6, 22, 40)
    expected = [max((j for j in range(u + 1) if values[j] >= a), default=-1) for u, a in zip(upto, at_least)]
    assert last_reaching(values, upto, at_least).tolist() == expected


# ---- subtrees and device totals: runs of positions, sums up the links ---------------------------
def _summed_up(parent: list[int], own: list[int], legacy: list[bool]) -> list[int]:
    """The reference: children after parents, each adds its total to its parent's unless the
    parent is legacy (which keeps its own time only)."""
    total = list(own)
    for i in reversed(range(len(parent))):
        if parent[i] >= 0 and not legacy[parent[i]]:
            total[parent[i]] += total[i]
    return total


@pytest.mark.parametrize("climb_levels", [0, 2, 32])
@pytest.mark.parametrize("seed", range(100))
def test_device_totals_are_sums_up_the_links(seed: int, climb_levels: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # No levels climbed: every total from the subtrees; two: most tables switch part way.
    monkeypatch.setattr(ranges, "_CLIMB_LEVELS", climb_levels)
    rng = random.Random(seed)
    starts, ends, tids = _sorted_random_table(rng)
    parent = _parents(starts, ends, tids)
    own = [rng.choice([0, 0, rng.randrange(1000)]) for _ in parent]
    legacy = [rng.random() < 0.2 for _ in parent]
    got = ranges.device_totals(arr(parent), arr(own), np.array(legacy, dtype=bool))
    assert got.tolist() == _summed_up(parent, own, legacy)
    # Each subtree is the run from the event to its last descendant.
    last = subtree_ends(arr(parent)).tolist()
    for i in range(len(parent)):
        inside = [j for j in range(len(parent)) if j == i or _is_below(parent, j, i)]
        assert inside == list(range(i, last[i] + 1))


def _is_below(parent: list[int], j: int, i: int) -> bool:
    while parent[j] >= 0:
        j = parent[j]
        if j == i:
            return True
    return False


# ---- regions: the range names around each event -------------------------------------------------
def _names_up_the_links(parent: list[int], is_range: list[bool], code: list[int], positions: list[int]) -> set[tuple[int, int, int]]:
    """The reference: each event climbs its links, one pair per distinct range name above it."""
    pairs = set()
    for p in positions:
        j = parent[p]
        while j >= 0:
            if is_range[j]:
                pairs.add((code[j], code[p], p))
            j = parent[j]
    return pairs


@pytest.mark.parametrize("climb_levels", [0, 1, 32])
@pytest.mark.parametrize("seed", range(100))
def test_region_ops_are_the_range_names_up_the_links(seed: int, climb_levels: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # No levels climbed: every pair from the outermost ranges, in chunks of a few pairs; one:
    # most tables switch.
    monkeypatch.setattr(ranges, "_CLIMB_LEVELS", climb_levels)
    monkeypatch.setattr(ranges, "PAIRS_PER_CHUNK", 3)
    # Events a few at a time, or all at once: an event's pairs are its own.
    monkeypatch.setattr(ranges, "_EVENTS_PER_CHUNK", (1, 2, 1 << 18)[seed % 3])
    rng = random.Random(seed)
    starts, ends, tids = _sorted_random_table(rng)
    parent = _parents(starts, ends, tids)
    is_range = [rng.random() < 0.4 for _ in parent]
    code = [rng.randrange(3) for _ in parent]  # few names: ranges of one name nest
    positions = sorted(rng.sample(range(len(parent)), rng.randrange(len(parent) + 1)))
    kind = np.array([KIND_ANNOTATION if r else KIND_OP for r in is_range], dtype=np.int8)
    around = ranges.RangesAround(arr(parent), kind, arr(code))
    chunks = list(ranges.region_ops(around, arr(positions), 3))
    pairs = {(r, code[e], e) for reg, ev in chunks for r, e in zip(reg.tolist(), ev.tolist())}
    assert len(pairs) == sum(ev.size for _, ev in chunks)  # each pair once
    assert pairs == _names_up_the_links(parent, is_range, code, positions)
    # Whether an event is inside a range of a given name: the same pairs, asked one by one.
    asked = [(c, p) for p in range(len(parent)) for c in range(3)]
    inside = ranges.inside_named_range(around, arr([c for c, _ in asked]), arr([p for _, p in asked]))
    every = _names_up_the_links(parent, is_range, code, list(range(len(parent))))
    assert [(c, code[p], p) in every for c, p in asked] == inside.tolist()


def test_ranges_nested_20000_deep_are_summarised_without_a_pair_per_level(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ranges of 7 names nested 20,000 deep, range i over [i, 4d - 2i]; after the inner ones
    # closed, op i inside range i. Climbing from range to range made an (op, range) pair per
    # level: 2 x 10^8 pairs, 40 s and 9 GiB; the outermost range of each name is all it takes.
    d = 20_000
    op_starts = [4 * d - 2 * i - 1 for i in range(d)]
    table = EventTable(
        names=[f"r{i % 7}" for i in range(d)] + [f"aten::op{i % 5}" for i in range(d)],
        kinds=[KIND_ANNOTATION] * d + [KIND_OP] * d,
        tids=[0] * (2 * d),
        starts=list(range(d)) + op_starts,
        ends=[4 * d - 2 * i for i in range(d)] + [s + 1 for s in op_starts],
        device_ns=[0] * (2 * d),
    )
    outermost = _spy(monkeypatch, ranges, "_in_outermost_ranges")
    regions = summary.summarize(table).regions
    assert outermost  # the outermost ranges took over from the climb
    for c in range(7):
        # Op i is inside ranges 0..i: inside a range named r{c} where i >= c.
        calls = {f"aten::op{o}": sum(1 for i in range(c, d) if i % 5 == o) for o in range(5)}
        assert regions[f"r{c}"].calls == len(range(c, d, 7))
        assert {op.name: op.calls for op in regions[f"r{c}"].ops} == calls


@pytest.mark.parametrize("seed", range(60))
def test_other_threads_work_is_each_event_started_in_another_threads_range(seed: int) -> None:
    rng = random.Random(seed)
    starts, ends, tids = _sorted_random_table(rng)
    m = len(starts)
    kind = np.array([KIND_ANNOTATION if rng.random() < 0.4 else KIND_OP for _ in range(m)], dtype=np.int8)
    processes = {t: rng.choice(["pid 1", "pid 2"]) for t in set(tids) if rng.random() < 0.8}  # some unknown
    order, n_main = arr(rng.sample(range(m), m)), rng.randint(0, m)  # rows past n_main: not the table's own
    got = summary._other_thread_work(arr(starts), arr(ends), arr(tids), kind, processes, n_main, order)
    pairs = set() if got is None else set(zip(*(a.tolist() for a in got)))
    expected = {
        (r, x)
        for r in range(m)
        for x in range(m)
        if kind[r] == KIND_ANNOTATION
        and order[r] < n_main
        and order[x] < n_main
        and tids[x] != tids[r]
        and processes.get(tids[x], 0) == processes.get(tids[r], 0)
        and starts[r] <= starts[x] < ends[r]
    }
    assert pairs == expected and (got is None or got[0].size == len(pairs))
