"""A trace's per-op scalar arguments (``Concrete Inputs``, ``Input type``): read as the live
capture reads them, so that a trace file and the user's own profiler give the same hints.

Every trace here but the hostile one is written by torch's profiler (``record_shapes=True``,
``export_chrome_trace``)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from neuronscope import from_profiler, from_trace
from neuronscope.events.op_scalars import op_scalars, scalar_value
from neuronscope.events.trace_reader import read_files
from neuronscope.result.types import ProfileResult

torch.manual_seed(0)
X, W, B = torch.randn(4, 16, 32), torch.randn(32), torch.randn(32)
Q, K, V = (torch.randn(4, 16, 32) for _ in range(3))
ALIBI = torch.randn(4, 1, 16)


def _both(fn: Callable[[], Any], tmp_path: Path) -> tuple[ProfileResult, ProfileResult]:
    """``fn`` profiled by the user (``from_profiler``) and read back from the trace it exported."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return from_profiler(prof), from_trace(path)


def _bloom_attention() -> torch.Tensor:
    scores = torch.baddbmm(ALIBI, Q, K.transpose(1, 2), beta=1.0, alpha=0.3)
    return torch.bmm(torch.softmax(scores, -1), V)


def test_a_baddbmm_alpha_read_from_a_trace_is_the_scale_from_profiler_reads(tmp_path: Path) -> None:
    """Bloom's ``baddbmm(alibi, q, k^T, alpha=s)``: the scale is its alpha. The trace holds it in
    ``Concrete Inputs``; before, the reader left it out and the trace's hint said the scale was
    unknown where the user's own profiler said 0.3."""
    live, traced = _both(_bloom_attention, tmp_path)
    (h_live,) = [h for h in live.fusion_hints if h.pattern == "attention"]
    (h_trace,) = [h for h in traced.fusion_hints if h.pattern == "attention"]
    assert h_live.details["scale"] == pytest.approx(0.3)
    assert h_trace.details["scale"] == h_live.details["scale"]


def _rms_norm() -> torch.Tensor:
    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-5) * W


def _layer_norm(unbiased: bool) -> Callable[[], torch.Tensor]:
    def layer_norm() -> torch.Tensor:
        mean, var = X.mean(-1, keepdim=True), X.var(-1, unbiased=unbiased, keepdim=True)
        return (X - mean) / torch.sqrt(var + 1e-5) * W + B

    return layer_norm


def _annotated_layer_norm() -> torch.Tensor:  # the Annotated Transformer's: std, N - 1
    mean, std = X.mean(-1, keepdim=True), X.std(-1, keepdim=True)
    return W * (X - mean) / (std + 1e-6) + B


def _attention(dim: int) -> Callable[[], torch.Tensor]:
    def attention() -> torch.Tensor:
        return torch.matmul(torch.softmax(torch.matmul(Q, K.transpose(-1, -2)) / 8.0, dim=dim), V)

    return attention


#: Hint details a trace tells otherwise for reasons of its own, not its scalars: it records no
#: dtypes, and its input shapes list a scalar argument's ``[]``.
_NOT_FROM_SCALARS = frozenset({"dtype", "dtypes", "input_shapes"})


def _hints(result: ProfileResult) -> list[tuple[Any, ...]]:
    return sorted(
        (h.pattern, tuple(h.ops), json.dumps({k: v for k, v in h.details.items() if k not in _NOT_FROM_SCALARS}, sort_keys=True, default=str))
        for h in result.fusion_hints
    )


@pytest.mark.parametrize(
    ("idiom", "pattern"),
    [
        (_rms_norm, "rms_norm"),
        (_layer_norm(False), "layer_norm"),
        (_layer_norm(True), "layer_norm"),  # var's N - 1: not layer_norm's variance
        (_annotated_layer_norm, "layer_norm"),
        (_attention(-1), "attention"),
        (_attention(1), None),  # over the queries: no sdpa
        (_bloom_attention, "attention"),
    ],
    ids=["rms_norm_eps", "layer_norm_var_biased", "layer_norm_var_unbiased", "layer_norm_std", "softmax_last_dim", "softmax_dim_1", "baddbmm_alpha"],
)
def test_a_trace_gives_the_hints_its_profiler_gives(tmp_path: Path, idiom: Callable[[], torch.Tensor], pattern: str | None) -> None:
    """Hand-written idioms whose hints read their ops' scalars (a var's ``unbiased``, a std's
    correction, a softmax's dim, a baddbmm's alpha): the same hints, with the same details,
    from the trace file as from the profiler that wrote it. Before, a trace read none of them."""
    live, traced = _both(idiom, tmp_path)
    assert [h.pattern for h in live.fusion_hints] == ([pattern] if pattern else [])
    assert _hints(traced) == _hints(live)


def _live_scalars(prof: Any) -> Counter[tuple[str, str]]:
    """Each op's scalar arguments as the live path reads them (analysis.dataflow)."""
    out: Counter[tuple[str, str]] = Counter()
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        if ev.tag == torch._C._profiler._EventType.TorchOp:  # a test's read of torch internals
            args = [a for a in ev.extra_fields.inputs if a.__class__ is not list and not hasattr(a, "sizes")]
            out[(ev.name, repr(args))] += 1
    return out


def test_every_ops_scalars_in_a_trace_are_the_live_captures(tmp_path: Path) -> None:
    """Op for op (each op's name and scalars, counted), the table's scalars column of a real
    trace is what the live event tree holds: ints, floats (``1.`` is 1.0), bools, None for a
    None, a string and a list of numbers (the live profiler keeps no lists), none for tensors,
    lists of tensors and storage-less tensors (``arange``'s empty ``out=``)."""
    def work() -> Any:
        y = torch.nn.functional.layer_norm(X, (32,), W, None, 1e-5)
        y = torch.nn.functional.gelu(y, approximate="tanh").clamp(-1e-30, 1e30)
        z = torch.cat([y, y], dim=-1).sum(dim=(0, 1)).std(correction=0)
        m = torch.where(X > 0, X, float("nan")).masked_fill(X < -3, float("-inf"))
        return z, m.reshape(-1), torch.arange(5), torch.full((2,), 1.5 - 2j), X.add(W, alpha=2**62), X.div(3, rounding_mode="floor")

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        work()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    table, _ = read_files([path])
    traced = Counter(
        (name, repr(list(s) if s is not None else []))
        for name, kind, s in zip(table.names, table.kinds, table.scalars)
        if kind == 0  # ops (ranges record no arguments)
    )
    live = _live_scalars(prof)
    assert traced == live, (traced - live, live - traced)
    assert ("aten::clamp", "[-1e-30, 1e+30]") in traced and ("aten::full", "[None, (1.5-2j), None, None, None, False]") in traced


# ---- hostile "Concrete Inputs" ------------------------------------------------------------------


def test_scalar_texts_torch_writes_and_texts_it_does_not() -> None:
    assert [scalar_value(t) for t in ("1", "-1", "0.125", "1.", "1e+30", "True", "False", "-inf", "1.5-2.j")] == [
        1, -1, 0.125, 1.0, 1e30, True, False, -math.inf, 1.5 - 2j,
    ]
    assert math.isnan(scalar_value("nan"))
    for text in ("", "x", "1_0", " 1", "[1]", "9" * 20, "9" * 5000, "1" * 100 + ".5", "True ", "0x10", "1e", "--1", "nanj"):
        assert scalar_value(text) is None, text
    assert scalar_value("1e999") == math.inf  # as float() reads a double past its range
    assert op_scalars(["float", "Scalar", "", "ScalarList", "TensorList"], ["", "2", "", "[1, 2]", ""]) == (2, None, None)
    for types, concrete in ((["Scalar"], ["1", "2"]), ("Scalar", "1"), (["Scalar"], [1]), ([None], ["1"]), ({}, [])):
        assert op_scalars(types, concrete) is None


def _event(ts: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5, "args": args}


@pytest.mark.parametrize("nan_literal", [False, True], ids=["msgspec", "stdlib_fallback"])
def test_hostile_concrete_inputs_read_as_unknown(tmp_path: Path, nan_literal: bool) -> None:
    """Wrong lengths, no lists, garbage strings, numbers where strings go, huge numbers, NaN:
    the trace still reads and analyses; what cannot be a value torch wrote is unknown (None,
    or no scalars for the op). A bare ``NaN`` in the file sends it to the standard library's
    reading, where the args are values, not texts."""
    shape = [[4, 16, 16], [], []]
    events = [
        _event(0, "aten::softmax", {"Input Dims": shape, "Input type": ["float", "Scalar", ""], "Concrete Inputs": ["", "1", ""]}),
        _event(10, "aten::softmax", {"Input Dims": shape, "Input type": ["float", "Scalar"], "Concrete Inputs": ["", "1", ""]}),
        _event(20, "aten::softmax", {"Input Dims": shape, "Input type": "float", "Concrete Inputs": {"a": 1}}),
        _event(30, "aten::softmax", {"Input Dims": shape, "Input type": ["float", "Scalar", ""], "Concrete Inputs": ["", "banana", ""]}),
        _event(40, "aten::softmax", {"Input Dims": shape, "Input type": ["float", "Scalar", ""], "Concrete Inputs": ["", 1, None]}),
        _event(50, "aten::softmax", {"Input Dims": shape, "Input type": ["float", "Scalar", 7], "Concrete Inputs": ["", "9" * 4400, ""]}),
        _event(60, "aten::mul", {"Input Dims": [[4], []], "Input type": ["float", "Scalar"], "Concrete Inputs": ["", "nan"]}),
        _event(70, "aten::mul", {"Input Dims": [[4], []], "Input type": None, "Concrete Inputs": "1e999"}),
        _event(80, "aten::mul", {"Input type": ["Scalar"] * 3, "Concrete Inputs": [["1"], [[]], ""]}),
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events})
    if nan_literal:
        text = text.replace('"dur": 5, "args": {"Input Dims": [[4], []]', '"dur": 5, "extra": NaN, "args": {"Input Dims": [[4], []]', 1)
        assert "NaN" in text
    path = tmp_path / "hostile.json"
    path.write_text(text)
    table, _ = read_files([path])
    got = [None if s is None else list(s) for s in table.scalars]
    assert got[0] == [1, None] and got[1] is None and got[2] is None
    assert got[3] == [None, None] and got[4] is None and got[5] is None
    nan = got[6]
    assert nan is not None and math.isnan(nan[0]) and got[7] is None and got[8] is None
    assert from_trace(path).ops
