"""compare()'s output check: exact where values are exact, by value for arrays and frames, and
never losing a comparison (issue 36, item 3). Each case once said "agree" wrongly or raised."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from neuronscope import compare
from neuronscope.compare.outputs import outputs_agree


def test_numpy_arrays_differing_in_the_middle_differ() -> None:
    np = pytest.importorskip("numpy")
    a = np.zeros(10_000)
    b = a.copy()
    b[5_000] = 1.0  # hidden in the middle of a shortened repr
    agree, why = outputs_agree(a, b)
    assert agree is False and "max abs difference 1" in why
    assert outputs_agree(a, a.copy()) == (True, "")
    ints = np.arange(10_000)
    assert outputs_agree(ints, ints + (ints == 5_000))[0] is False
    assert outputs_agree(np.array(["a", "b"]), np.array(["a", "c"]))[0] is False
    assert outputs_agree(np.array([1, "x"], dtype=object), np.array([1, "y"], dtype=object))[0] is False


def test_pandas_frames_and_series_are_compared_by_value() -> None:
    pd = pytest.importorskip("pandas")
    a = pd.DataFrame({"x": range(1000), "y": [0.5] * 1000, "name": ["n"] * 1000})
    b = a.copy()
    b.loc[500, "y"] = 0.75
    assert outputs_agree(a, a.copy()) == (True, "")
    assert outputs_agree(a, b)[0] is False
    c = a.copy()
    c.loc[500, "x"] = 501
    assert outputs_agree(a, c)[0] is False
    assert outputs_agree(a["y"], b["y"])[0] is False
    assert outputs_agree(a.rename(columns={"y": "z"}), a)[0] is False


def test_complex_outputs_are_compared_in_both_parts() -> None:
    a = torch.tensor([1 + 1j, 2 + 2j])
    assert outputs_agree(a, torch.tensor([1 + 1j, 2 + 3j]))[0] is False
    assert outputs_agree(a, a.clone())[0] is True
    assert outputs_agree(1 + 1j, 1 + 2j)[0] is False and outputs_agree(1 + 1j, 1 + 1j)[0] is True


def test_integer_outputs_are_compared_exactly() -> None:
    ids = torch.tensor([30000, 1, 2])
    agree, why = outputs_agree(ids, torch.tensor([30029, 1, 2]))
    assert agree is False and "1 of 3 integer values differ" in why
    assert outputs_agree(30000, 30029)[0] is False
    assert outputs_agree(torch.tensor([True]), torch.tensor([False]))[0] is False
    assert outputs_agree(ids, ids.clone())[0] is True


def test_sparse_tensors_are_compared_dense() -> None:
    a = torch.eye(4).to_sparse()
    b = (torch.eye(4) * 2).to_sparse()
    assert outputs_agree(a, a.clone()) == (True, "")
    assert outputs_agree(a, b)[0] is False


def test_deep_and_shared_outputs_are_walked_without_recursion_or_blow_up() -> None:
    deep_a: list[Any] = [1]
    deep_b: list[Any] = [1]
    for _ in range(2_000):
        deep_a, deep_b = [deep_a], [deep_b]
    assert outputs_agree(deep_a, deep_b) == (True, "")
    shared_a: list[Any] = [torch.ones(2)]
    shared_b: list[Any] = [torch.ones(2)]
    for _ in range(20):  # each level holds the one below twice: 2^20 paths, 20 pairs
        shared_a, shared_b = [shared_a, shared_a], [shared_b, shared_b]
    started = time.perf_counter()
    assert outputs_agree(shared_a, shared_b) == (True, "")
    assert time.perf_counter() - started < 5


def test_an_object_that_refuses_inspection_makes_the_check_unsure_not_an_error() -> None:
    class Hostile:
        def __init__(self) -> None:
            self.x = 1

        def __getattribute__(self, name: str) -> Any:
            raise RuntimeError("no")

    agree, why = outputs_agree(Hostile(), Hostile())
    assert agree is None and "could not be compared" in why


def test_a_failing_check_is_noted_and_the_comparison_kept() -> None:
    class Hostile:
        def __getattribute__(self, name: str) -> Any:
            raise RuntimeError("no")

    def f(x: torch.Tensor) -> Any:
        return Hostile()

    def g(x: torch.Tensor) -> Any:
        return Hostile()

    with pytest.warns(UserWarning):
        cmp = compare({"f": f, "g": g}, torch.ones(2), export=False, active=1, warmup=1, rounds=2)
    assert cmp.row("g").outputs_match is None
    assert any("were not checked" in n for n in cmp.notes)
    assert cmp.row("g").time_us is not None
