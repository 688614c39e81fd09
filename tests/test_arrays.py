"""neuronscope.events.arrays: np.unique and np.setdiff1d by sorting give numpy's results."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from neuronscope.events.arrays import setdiff_sorted, unique_first_inverse, unique_sorted

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


@given(st.one_of(ints, small), st.one_of(ints, small))
def test_setdiff_same_as_np_setdiff1d(values: list[int], exclude: list[int]) -> None:
    a, b = np.array(values, dtype=np.int64), np.array(exclude, dtype=np.int64)
    assert np.array_equal(setdiff_sorted(a, b), np.setdiff1d(a, b))
