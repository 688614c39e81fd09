"""Attention whose code computes an input of one of its ops right before that op, amid the
idiom in op order: ``v = self.value(x)`` between the softmax and ``@ v`` (Karpathy's per-head
``Head``), a relative position bias gathered from its table between the scale and its add
(BEiT, Data2Vec-vision). Where shapes were recorded, the user's own ``torch.profiler`` and its
exported trace find it as live does, the computing ops left out. Ops between that compute
nothing the idiom's op takes as the spelling says (another shape, the scores themselves), or
without recorded shapes, leave op order as it was: no attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from neuronscope import from_profiler, from_trace, profile_on_neuron
from neuronscope.analysis import fusion
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

B, T, C, H = 2, 8, 64, 4
D = C // H


class Head(nn.Module):
    """One head as the nanoGPT lecture writes it: v projected after the softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.key, self.query, self.value = (nn.Linear(C, D, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wei = self.query(x) @ self.key(x).transpose(-2, -1) * D**-0.5
        wei = F.softmax(wei, dim=-1)
        v = self.value(x)
        return wei @ v


class RelativeBias(nn.Module):
    """BEiT's relative position bias: gathered from a table, reshaped and added to the scaled
    scores, all between the scale and the add."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.o = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.table = nn.Parameter(torch.randn(2 * T - 1, H))
        pos = torch.arange(T)
        self.register_buffer("index", (pos[:, None] - pos[None, :] + T - 1).flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        bias = self.table[self.index].view(T, T, H).permute(2, 0, 1).contiguous()
        p = F.softmax(s + bias.unsqueeze(0), dim=-1)
        return self.o((p @ v).transpose(1, 2).reshape(B, T, C))


def _keys(hints: list[Hint]) -> list[tuple[str, tuple[str, ...], int]]:
    return sorted((h.pattern, tuple(h.ops), h.calls) for h in hints if h.kind == "fusion" and h.pattern != "elementwise_chain")


def _three_ways(fn: Callable[[], Any], tmp_path: Path) -> dict[str, list[Hint]]:
    """The hints on ``fn()`` live (decorated), from the user's own profiler with shapes, and
    from that profiler's exported trace."""
    f = profile_on_neuron(fn, export=False, backend="cpu", print_summary=False)
    with torch.no_grad():
        f()
        f()
        with torch.profiler.profile(record_shapes=True) as prof:
            fn()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    return {"live": f.last_result.hints, "from_profiler": from_profiler(prof).hints, "from_trace": from_trace(trace).hints}


@pytest.mark.parametrize("make", [Head, RelativeBias], ids=["v_projected_after_softmax", "relative_position_bias"])
def test_an_input_computed_amid_attention_is_left_out_as_live(make: type[nn.Module], tmp_path: Path) -> None:
    torch.manual_seed(0)
    module, x = make().eval(), torch.randn(B, T, C)
    hints = _three_ways(lambda: module(x), tmp_path)
    live = [k for k in _keys(hints["live"]) if k[0] == "attention"]
    assert len(live) == 1, _keys(hints["live"])
    for how in ("from_profiler", "from_trace"):
        assert _keys(hints[how]) == _keys(hints["live"]), how
        (att,) = [h for h in hints[how] if h.pattern == "attention"]
        assert att.confidence == "sequence"
        assert "aten::linear" not in att.ops and "aten::index" not in att.ops, att.ops


def _attention_by_op_order(fn: Callable[[], Any], record_shapes: bool = True) -> list[Hint]:
    with torch.no_grad(), torch.profiler.profile(record_shapes=record_shapes) as prof:
        fn()
    return [h for h in from_profiler(prof).hints if h.pattern == "attention"]


def test_a_softmax_then_a_linear_then_a_matmul_of_another_shape_is_no_attention() -> None:
    """Scores, their softmax, an unrelated linear, then a matmul that takes a tensor of another
    shape than the scores first (``u @ p``, ``[..., D, T]``): no ``p @ v``, no attention; nor
    where an op between reads the probabilities (the idiom's tensor went on through it)."""
    torch.manual_seed(0)
    q, k = torch.randn(B, H, T, D), torch.randn(B, H, T, D)
    lin, other = nn.Linear(D, D), torch.randn(B, H, T, D)

    def not_v() -> torch.Tensor:
        p = F.softmax(q @ k.transpose(-2, -1) * D**-0.5, dim=-1)
        u = lin(other).transpose(-2, -1)
        return u @ p

    def scores_read_between() -> torch.Tensor:
        p = F.softmax(q @ k.transpose(-2, -1) * D**-0.5, dim=-1)
        u = lin(other) * p.sum(-1, keepdim=True)  # reads the probabilities: the idiom's chain went on
        return p @ u

    assert _attention_by_op_order(not_v) == []
    assert _attention_by_op_order(scores_read_between) == []


def test_without_shapes_a_computed_input_leaves_op_order_as_it_was() -> None:
    """Without ``record_shapes`` nothing says what the ops between compute: no attention, as
    before (the per-head module's attention is found with shapes, above)."""
    torch.manual_seed(0)
    module, x = Head().eval(), torch.randn(B, T, C)
    assert _attention_by_op_order(lambda: module(x), record_shapes=False) == []


def test_two_attentions_in_a_row_and_the_idioms_around_linears_stay_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attentions one after the other with linears between, a GELU and an RMSNorm next to
    linears: the op-order hints are those found with no run left out as computing an input."""
    torch.manual_seed(0)
    x, w = torch.randn(B, T, C), torch.randn(C)
    heads = [Head().eval() for _ in range(2)]
    up, down = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def block() -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        a = torch.cat([hd(h) for hd in heads], dim=-1).repeat(1, 1, C // (2 * D))
        y = up(a + x)
        y = 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))
        return down(y)

    with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
        block()
    now = _keys(from_profiler(prof).hints)
    with monkeypatch.context() as m:
        m.setattr(fusion, "computed_runs", lambda *a: [])
        before = _keys(from_profiler(prof).hints)
    assert {k[0] for k in before} >= {"rms_norm", "gelu"}, before
    # Only the two heads' attentions are new: each with its own ops, none of the others'.
    assert [k for k in now if k[0] != "attention"] == [k for k in before if k[0] != "attention"]
    assert [k[2] for k in now if k[0] == "attention"] == [2]
