"""The user-level ops of an event table (``dataflow._user_ops``), against a plain reference.

``_user_ops`` is vectorised with numpy; the reference below is the rule written as a loop: in
(thread, start, -end) order, an op is user-level when it starts at or after the end of the last
user-level op on its thread; the ops until the next one are its inside (their device time and
copies count for it); ops under a compiled region, and the region itself, are left out.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from neuronscope.analysis.dataflow import _user_ops
from neuronscope.analysis.opgraph import COPY_MARKERS
from neuronscope.events import KIND_ANNOTATION, KIND_OP, EventTable
from neuronscope.events.table import COMPILED_EVENT_PREFIXES as COMPILED_REGION_PREFIXES

EPOCH_NS = 1_700_000_000_000_000_000


def reference(table: EventTable) -> list[tuple[int, int, int, bool]]:
    threads = list(dict.fromkeys(table.tids))  # in order of appearance
    rows = sorted(range(len(table)), key=lambda i: (threads.index(table.tids[i]), table.starts[i], -table.ends[i]))
    out: list[tuple[int, int, int, bool]] = []
    top = -1
    top_end = compiled_end = 0
    dev = 0
    copied = emit = False
    tid = None
    for i in rows:
        if table.tids[i] != tid:  # a new thread: close the last one's op
            if emit:
                out.append((top, table.ends[top] - table.starts[top], dev, copied))
            tid, top, emit, top_end, compiled_end = table.tids[i], -1, False, -(2**63), -(2**63)
        name = table.names[i]
        if table.kinds[i] != KIND_OP:
            if name.startswith(COMPILED_REGION_PREFIXES):
                compiled_end = max(compiled_end, table.ends[i])
            continue
        if table.starts[i] < top_end:
            dev += table.device_ns[i]
            copied = copied or name in COPY_MARKERS
            continue
        if emit:
            out.append((top, table.ends[top] - table.starts[top], dev, copied))
        top, top_end, dev, copied = i, table.ends[i], table.device_ns[i], False
        emit = table.starts[i] >= compiled_end and not name.startswith(COMPILED_REGION_PREFIXES)
    if emit:
        out.append((top, table.ends[top] - table.starts[top], dev, copied))
    return sorted(out, key=lambda t: table.starts[t[0]])  # stable: ties keep thread order


def ours(table: EventTable) -> list[tuple[int, int, int, bool]]:
    return [tuple(t) for t in _user_ops(table)]  # type: ignore[misc]


def table_of(*events: tuple[str, int, int, int, int]) -> EventTable:
    t = EventTable()
    for name, kind, tid, start, end in events:
        t.append(name, kind, tid, start, end, device=7 if name == "aten::mm" else 0)
    return t


def test_nesting_copies_and_compiled_regions() -> None:
    t = table_of(
        ("step", KIND_ANNOTATION, 1, 0, 100),
        ("aten::to", KIND_OP, 1, 1, 10),
        ("aten::_to_copy", KIND_OP, 1, 2, 9),  # a copy inside .to(): it copied
        ("aten::linear", KIND_OP, 1, 10, 30),
        ("aten::mm", KIND_OP, 1, 11, 29),  # device time counts for linear
        ("Torch-Compiled Region: 0/0", KIND_ANNOTATION, 1, 40, 60),
        ("aten::mul", KIND_OP, 1, 41, 50),  # inside compiled code: left out
        ("aten::add", KIND_OP, 1, 60, 70),
    )
    assert ours(t) == reference(t) == [(1, 9, 0, True), (3, 20, 7, False), (7, 10, 0, False)]


def test_a_child_that_outlives_its_parent_does_not_swallow_the_next_op() -> None:
    """Rounded trace timestamps: addmm ends 1 ns after linear, relu starts as linear ends."""
    t = table_of(("aten::linear", KIND_OP, 1, 0, 10), ("aten::addmm", KIND_OP, 1, 5, 11), ("aten::relu", KIND_OP, 1, 10, 20))
    assert ours(t) == reference(t) == [(0, 10, 0, False), (2, 10, 0, False)]


def test_epoch_timestamps_with_a_zero_on_many_threads() -> None:
    events = [("aten::add", KIND_OP, tid, EPOCH_NS + 10 * k, EPOCH_NS + 10 * k + 5) for tid in range(7) for k in range(3)]
    events.append(("aten::mul", KIND_OP, 3, 0, 1))
    t = table_of(*events)
    assert ours(t) == reference(t) and len(ours(t)) == 22


def test_equal_starts_on_two_threads_keep_the_order_threads_appeared_in() -> None:
    t = table_of(("aten::add", KIND_OP, 5, 100, 110), ("aten::mul", KIND_OP, 2, 100, 120))
    assert [r[0] for r in ours(t)] == [0, 1] == [r[0] for r in reference(t)]


def test_nothing_to_find() -> None:
    assert _user_ops(EventTable()) == []
    assert _user_ops(table_of(("step", KIND_ANNOTATION, 1, 0, 10))) == []


NAMES = ["aten::add", "aten::to", "aten::_to_copy", "aten::mm", "step", "Torch-Compiled Region: 0/0", "aten::clone"]
event = st.tuples(
    st.sampled_from(NAMES),
    st.sampled_from([KIND_OP, KIND_OP, KIND_ANNOTATION]),
    st.sampled_from([1, 2, 9]),
    st.integers(0, 60),
    st.integers(0, 25),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(event, max_size=40), st.sampled_from([0, EPOCH_NS]))
def test_same_as_the_reference_on_any_table(events: list[tuple[str, int, int, int, int]], base: int) -> None:
    """Random tables: nested, overlapping, outliving, zero-length and equal-start events."""
    t = table_of(*[(n, k, tid, base + s, base + s + d) for n, k, tid, s, d in events])
    assert ours(t) == reference(t)
