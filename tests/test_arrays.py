"""neuronscope.events.arrays: np.unique by sorting gives numpy's results; runs of positions and
ids beyond int64 as their docstrings say."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from neuronscope.events.arrays import as_int64, runs_concatenated, unique_first_inverse, unique_sorted

ints = st.lists(st.integers(min_value=-(2**62), max_value=2**62), max_size=200)
small = st.lists(st.integers(min_value=-3, max_value=3), max_size=200)  # many repeats


@given(st.one_of(ints, small))
def test_same_as_np_unique(values: list[int]) -> None:
    a = np.array(values, dtype=np.int64)
    assert np.array_equal(unique_sorted(a), np.unique(a))
    uniq, first, inverse = unique_first_inverse(a)
    want_u, want_first, want_inv = np.unique(a, return_index=True, return_inverse=True)
    assert np.array_equal(uniq, want_u) and np.array_equal(first, want_first)
    assert np.array_equal(inverse, want_inv.reshape(-1))
    assert np.array_equal(uniq[inverse], a)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5)), max_size=30))
def test_runs_concatenated_is_the_aranges_joined(runs: list[tuple[int, int]]) -> None:
    lo = np.array([a for a, _ in runs], dtype=np.int64)
    hi = lo + np.array([n for _, n in runs], dtype=np.int64)
    want = [i for a, b in zip(lo.tolist(), hi.tolist()) for i in range(a, b)]
    assert runs_concatenated(lo, hi).tolist() == want


@given(st.lists(st.one_of(st.integers(0, 5), st.integers(2**63, 2**64 - 1)), max_size=50))
def test_ids_beyond_int64_keep_their_equalities(ids: list[int]) -> None:
    got = as_int64(ids).tolist()
    assert all((got[i] == got[j]) == (ids[i] == ids[j]) for i in range(len(ids)) for j in range(len(ids)))
    if all(v < 2**63 for v in ids):
        assert got == ids
