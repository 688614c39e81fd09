"""Attacks on what changed since e9a8561 (k36): norm weights broadcast over ``x`` and applied
after the fused call, the trace attention's look-back for a scale before its scores, and the
op-order arbitration between adjacent idioms.

Real torch profiler (CPU), live (``@profile_on_neuron``), ``from_profiler`` and ``from_trace``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from fusion_cases import attention_blocks

from neuronscope import from_profiler, from_trace, profile_on_neuron
from neuronscope.errors import NeuronscopeError
from neuronscope.result.hint import Hint

B, T, H, D = 2, 4, 3, 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _hints(fn: Any, how: str, tmp_path: Path, *args: torch.Tensor) -> list[Hint]:
    """The fusion hints of ``fn(*args)``: live, from the user's profiler, or from its trace."""
    with torch.no_grad():
        if how == "live":
            f = profile_on_neuron(fn, export=False, backend="cpu")
            f(*args)
            f(*args)
            assert f.last_result is not None
            return f.last_result.hints
        with torch.profiler.profile(record_shapes=True) as prof:
            fn(*args)
    if how == "from_profiler":
        return from_profiler(prof).hints
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return from_trace(str(path)).hints


def _squared_rms(x: torch.Tensor) -> torch.Tensor:
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return x * r * r  # x / mean(x^2): an RMSNorm without a weight, then its statistic once more


@pytest.mark.parametrize("how", ["live", "from_profiler", "from_trace"])
def test_the_norms_own_statistic_is_no_weight(how: str, tmp_path: Path) -> None:
    """A per-row statistic broadcasts onto ``x`` as a per-head weight does. Taken for the
    weight (since weights broadcast over x), the hint covered the second ``* r`` too and said
    ``rms_norm(x, (8,), eps) * weight``: the fused call replaces the ops that make ``r``, so
    there is no "weight" left to multiply by. The second multiply is the code's own again."""
    hints = _hints(_squared_rms, how, tmp_path, torch.randn(B, T, H, D))
    (hint,) = [h for h in hints if h.pattern == "rms_norm"]
    assert "vector_shapes" not in hint.details and "* weight" not in hint.suggestion, hint.suggestion
    assert [o.rsplit("::", 1)[-1] for o in hint.ops] == ["pow", "mean", "add", "rsqrt", "mul"]


def test_a_weight_made_from_the_norms_statistic_is_no_weight(tmp_path: Path) -> None:
    """Live, the graph shows where a weight comes from: one the match's own ops make (here a
    mean of the norm's ``rsqrt`` over the sequence, ``[B, 1, H, 1]``) is gone once the fused
    call replaces them, so it is no weight to apply after it."""

    def f(x: torch.Tensor) -> torch.Tensor:
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x * r * r.mean(1, keepdim=True)

    (hint,) = [h for h in _hints(f, "live", tmp_path, torch.randn(B, T, H, D)) if h.pattern == "rms_norm"]
    assert "vector_shapes" not in hint.details and "* weight" not in hint.suggestion, hint.suggestion


def test_a_layer_norm_that_puts_its_statistics_back_is_no_affine_norm(tmp_path: Path) -> None:
    """``(x - m) / s * s + m`` is ``x``: its "weight" and "bias" are the norm's own ``s`` and
    ``m``. The hint said ``layer_norm(x, (8,), eps) * weight + bias``, of tensors its fused
    call no longer makes."""

    def f(x: torch.Tensor) -> torch.Tensor:
        m = x.mean(-1, keepdim=True)
        s = torch.sqrt((x - m).pow(2).mean(-1, keepdim=True) + 1e-5)
        return (x - m) / s * s + m

    for h in _hints(f, "live", tmp_path, torch.randn(B, T, H, D)):
        assert "vector_shapes" not in h.details and "* weight" not in h.suggestion, h.suggestion


@pytest.mark.parametrize("shape", [[5], [-1], ["a"], [2, 4, 8, 9], [10**6, 10**6]])
def test_verify_refuses_a_weight_shape_that_is_no_weight_of_x(shape: list[Any]) -> None:
    """A result.json edited (or from elsewhere) whose per-head weight shape does not broadcast
    onto the hint's input: verify() raised torch's RuntimeError / TypeError from the timing,
    or tried to allocate 4 TB; now a NeuronscopeError that says what is wrong."""
    h = Hint(
        kind="fusion", pattern="rms_norm", ops=["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"],
        calls=1, time_us=10.0, est_saving_us=5.0, suggestion="use torch.nn.functional.rms_norm(x, (8,), eps=1e-06) * weight",
        details={"shape": [2, 4, 8], "dtype": "float32", "device": "cpu", "weight": True, "vector_shapes": {"weight": shape}},
    )
    with pytest.raises(NeuronscopeError, match="vector_shapes"):
        h.verify(compile=False, repeats=3, min_block_s=0.001)


def test_the_attention_look_back_reads_back_from_each_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each attention match of a trace looks back a few ops for a scale of q or k, from the op
    right before the match, nearest first. It was handed an iterator that first skipped every op
    after the match: quadratic in the thread's ops (40,000 blocks, 120,000 ops: 14.5 s against
    1.75 s before the look-back; 2.2 s now). Timed in ``benchmarks/bench_analysis.py --section 4``;
    here: what each look-back reads first."""
    from neuronscope.analysis import fusion

    g = attention_blocks(50)
    firsts: list[int | None] = []

    def reading(members: list[Any], before: Any, claimed: Any, graph: Any) -> dict[str, Any]:
        first = next(iter(before), None)
        firsts.append(None if first is None else first.index)
        return {}

    registry = fusion.REGISTRY
    monkeypatch.setattr(fusion, "REGISTRY", [dataclasses.replace(p, params_before=reading) if p.name == "attention" else p for p in registry])
    ms = fusion.find_sequence_matches(g)
    assert len(ms) == 50 and firsts == [None, *(m.nodes[0].index - 1 for m in ms[1:])]
    monkeypatch.setattr(fusion, "REGISTRY", registry)
    assert all(m.params["scale"] == 1.0 for m in fusion.find_sequence_matches(attention_blocks(4000)))


def _v_scaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    v = v * 0.5  # a scale of v, right before the scores in op order
    return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


@pytest.mark.parametrize("how", ["from_profiler", "from_trace"])
def test_a_trace_does_not_say_a_scale_before_the_scores_is_of_q_or_k(how: str, tmp_path: Path) -> None:
    """Op order shows a multiply right before the scores, not which tensor it scales. The
    hint said "q, k: before the scale your code multiplies them by; sdpa applies the scale
    itself" with scale=<the scale your code applies>: for ``v * 0.5``, that is
    sdpa(q, k, v, scale=0.5), another attention. Live, the graph shows it is v's (scale=1.0)."""
    q, k, v = (torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    (hint,) = [h for h in _hints(_v_scaled_attention, how, tmp_path, q, k, v) if h.pattern == "attention"]
    assert hint.details.get("scaled_before_scores") and not hint.details.get("scale_on_inputs"), hint.details
    assert "which of q, k and v" in hint.suggestion, hint.suggestion
    (live,) = [h for h in _hints(_v_scaled_attention, "live", tmp_path, q, k, v) if h.pattern == "attention"]
    assert "scale=1.0" in live.suggestion and "aten::mul" not in live.ops, live.suggestion
