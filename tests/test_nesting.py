"""The nesting in array operations agrees with the sweep with a stack it stands for: random
tables (partial overlaps, ties, zero-length events, several threads, deep nesting), each
instant's innermost open event checked against a plain Python sweep."""

from __future__ import annotations

import random

import numpy as np
import pytest

from neuronscope.events import EventTable
from neuronscope.events.nesting import add_inner_range_device_time, innermost_open
from neuronscope.events.table import KIND_ANNOTATION, KIND_OP


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
    add_inner_range_device_time(table, arr([0, 0, 1]), arr([150, 110, 150]), arr([0, 0, 0]), arr([7, 5, 3]))
    assert table.range_device_ns == {1: 7}
