"""Attention by op order checks the dims its spellings' products relate by, where a trace
recorded input shapes: ``q [.., L, E] @ k^T [.., E, S]``, the scores ``[.., L, S]`` on to the
softmax, the weights the FIRST operand of ``@ v [.., S, D]``, one size per dim over the match
(derived from the spellings run on examples whose L, S, E and D differ). Ops in attention's
order on tensors that do not relate so are no attention; attention of L != S and E != D is
found in the trace as live.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from user_rounds import live_and_traced

pytestmark = pytest.mark.usefixtures("one_torch_thread")

_G = torch.Generator().manual_seed(0)
#: Cross-attention's q, k and v: L = 6 queries, S = 10 keys, E = 16, D = 12.
Q, K, V = torch.randn(2, 4, 6, 16, generator=_G), torch.randn(2, 4, 10, 16, generator=_G), torch.randn(2, 4, 10, 12, generator=_G)
MASK = torch.randn(2, 1, 1, 10, generator=_G)


def test_cross_attention_of_other_dims_is_found_in_the_trace_as_live(tmp_path: Path) -> None:
    def cross(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.softmax(q @ k.transpose(-2, -1) * 0.25 + MASK, dim=-1) @ v

    live, traced = live_and_traced(cross, (Q, K, V), tmp_path, "attention")
    assert [h.ops for h in live] == [h.ops for h in traced] and len(live) == 1


def test_a_softmax_of_another_tensor_between_the_products_is_no_attention(tmp_path: Path) -> None:
    """Scores made and kept, then a softmax of another tensor ``[.., L, S']`` and its product
    with ``[.., S', D]``: matmul, softmax, matmul in op order, but the softmax reads no scores."""
    other = torch.randn(2, 4, 6, 12, generator=_G)

    def unrelated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = q @ k.transpose(-2, -1)
        return F.softmax(other, dim=-1) @ v.transpose(-2, -1)[..., :12, :], s

    live, traced = live_and_traced(unrelated, (Q, K, V), tmp_path, "attention")
    assert live == [] and traced == [], [h.suggestion for h in traced]


def test_weights_as_the_second_operand_are_no_sdpa_by_op_order(tmp_path: Path) -> None:
    """``bmm(v^T, w^T)`` (DDPM's ``bmm(v, w.permute(0, 2, 1))``): the weights are the second
    operand, sdpa(q, k, v) computes ``w @ v``: no attention, in the trace as live."""

    def transposed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q3, k3, v3 = q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)
        w = F.softmax(torch.bmm(q3, k3.transpose(1, 2)), dim=-1)
        return torch.bmm(v3.transpose(1, 2), w.transpose(1, 2))

    live, traced = live_and_traced(transposed, (Q, K, V), tmp_path, "attention")
    assert live == [] and traced == [], [h.suggestion for h in traced]
