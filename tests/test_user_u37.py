"""A newcomer's round on families no other test covers (u37): a nanoGPT-style training model
with a hand-written cross-entropy over ``[B, T, V]`` logits and a ``1 + weight`` RMSNorm, and
MPT (ALiBi bias added, then ``masked_fill``) from transformers, built from config.

Each hint is applied as written in place of the function or module it names and checked
against what the code computes, live and from the user's own ``torch.profiler``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fusion_cases import LayerNorm2d, hints_by
from torch import nn

from neuronscope import from_profiler, profile_on_neuron
from neuronscope.analysis.patterns.attention import UNKNOWN_SCALE
from neuronscope.analysis.patterns.base import UNKNOWN_EPS
from neuronscope.result.hint import Hint

B, T, C, H, V = 2, 16, 64, 4, 96


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def hand_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """nanoGPT-variant loss written out over ``[B, T, V]`` logits."""
    z = logits - logits.max(-1, keepdim=True).values
    logp = z - torch.log(torch.exp(z).sum(-1, keepdim=True))
    return -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).mean()


def _one(hints: list[Hint], pattern: str) -> Hint:
    (hint,) = [h for h in hints if h.pattern == pattern]
    return hint


def _call(text: str, fn: str) -> str:
    (call,) = re.findall(rf"torch\.nn\.functional\.{fn}\((?:[^()]|\([^()]*\))*\)", text)
    return call


@pytest.mark.parametrize("how", ["decorated", "from_profiler"])
def test_a_cross_entropy_over_3d_logits_is_applied_as_written(how: str) -> None:
    """The hint said ``cross_entropy(x, target)``: on ``[B, T, V]`` logits that takes dim 1 as
    the classes and raises (``Expected target size [2, 96], got [2, 16]``; silently wrong
    where T == V). The suggested call takes the rows, as its verify already did, and applied
    in place of the loss gives the loss."""
    torch.manual_seed(0)
    logits, y = torch.randn(B, T, V), torch.randint(0, V, (B, T))
    expected = hand_cross_entropy(logits, y)
    hint = _one(hints_by(how, hand_cross_entropy, logits, y), "log_softmax")
    assert hint.details.get("loss") == "gather", hint.details
    call = _call(hint.suggestion, "cross_entropy")
    per_row = eval(call, {"torch": torch}, {"x": logits, "target": y})  # our own text
    # One loss a row: the code's own reduction (a mean here; a sum elsewhere) comes after.
    assert per_row.shape == (B * T,), per_row.shape
    torch.testing.assert_close(per_row.mean(), expected, atol=1e-5, rtol=1e-4)


def test_a_summed_nll_loss_cross_entropy_says_to_keep_its_reduction() -> None:
    """``nll_loss(log(softmax(x)), reduction="sum")`` is found as a cross-entropy (by op order
    the reduction is not recorded at all); ``cross_entropy``'s default mean would be another
    loss, so the hint says to pass the code's reduction, and so applied it gives the loss."""
    torch.manual_seed(0)
    logits, y = torch.randn(B, T, V), torch.randint(0, V, (B, T))

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.nll_loss(torch.log(torch.softmax(x, -1)).flatten(0, 1), t.flatten(), reduction="sum")

    with torch.profiler.profile(record_shapes=True) as prof:
        expected = loss(logits, y)
    hint = _one(from_profiler(prof).hints, "log_softmax")
    assert "nll_loss's reduction" in hint.suggestion, hint.suggestion
    call = _call(hint.suggestion, "cross_entropy")[:-1] + ', reduction="sum")'  # as the hint says
    got = eval(call, {"torch": torch}, {"x": logits, "target": y})  # our own text
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def _mpt() -> tuple[nn.Module, torch.Tensor]:
    from transformers import MptConfig, MptForCausalLM

    torch.manual_seed(0)
    cfg = MptConfig(d_model=C, n_heads=H, n_layers=1, expansion_ratio=2, max_seq_len=64, vocab_size=128)
    return MptForCausalLM(cfg).eval(), torch.randint(0, 128, (B, T))


def _mpt_sdpa_forward(attn: nn.Module, call: str) -> Any:
    """MptAttention.forward with its scores, bias, mask and softmax replaced by ``call``, the
    hint's text: q, k, v as the code projects them, ``mask`` the bias it adds with -inf where
    its masked_fill masks (what the hint says that one float tensor is)."""

    def forward(hidden_states: torch.Tensor, position_bias: torch.Tensor, cache: Any = None, attention_mask: Any = None, **_: Any) -> Any:
        q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in attn.Wqkv(hidden_states).chunk(3, dim=2))
        mask = position_bias[:, -T:, -T:].expand(B, H, T, T).masked_fill(attention_mask, float("-inf"))
        out = eval(call, {"torch": torch}, {"q": q, "k": k, "v": v, "mask": mask})  # our own text
        return attn.out_proj(out.permute(0, 2, 1, 3).reshape(B, T, C)), None

    return forward


def test_mpt_attention_by_op_order_is_the_live_one_and_equivalent() -> None:
    """MPT scales the scores, adds its ALiBi position bias, then ``masked_fill``s them: live
    the attention was found (6 ops), by op order (the user's profiler, a trace) not at all, as
    no declared spelling added a bias and then filled a mask. Both hints now hold the same
    ops, and the call they suggest, applied in place of MptAttention's forward, gives the
    model's logits."""
    model, ids = _mpt()
    f = profile_on_neuron(model.forward, export=False, backend="cpu")
    with torch.no_grad():
        expected = f(ids).logits
        f(ids)
        with torch.profiler.profile(record_shapes=True) as prof:
            model(ids)
    live = _one(f.last_result.hints, "attention")
    seq = _one(from_profiler(prof).hints, "attention")
    assert seq.ops == live.ops and seq.calls == live.calls, (seq.ops, live.ops)
    for hint in (live, seq):
        # A trace records no numbers: the op-order hint names the scale for the user to fill in.
        call = _call(hint.suggestion, "scaled_dot_product_attention").replace(UNKNOWN_SCALE, repr((C // H) ** -0.5))
        for block in model.transformer.blocks:
            block.attn.forward = _mpt_sdpa_forward(block.attn, call)
        with torch.no_grad():
            got = model(ids).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


class InlineMaskAttention(nn.Module):
    """nanoGPT's attention with its causal mask built in the forward, not kept as a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.o = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return self.o((att @ v).transpose(1, 2).contiguous().view(B, T, C))


def test_inline_mask_attention_live_suggestion_is_equivalent() -> None:
    """Live, the hint is found and its ``attn_mask=~cond`` (cond: what masked_fill fills) gives
    the block's output."""
    torch.manual_seed(0)
    attn, x = InlineMaskAttention().eval(), torch.randn(B, T, C)
    f = profile_on_neuron(attn.forward, export=False, backend="cpu")
    with torch.no_grad():
        expected = f(x)
        f(x)
    hint = _one(f.last_result.hints, "attention")
    # Where torch.compile ran earlier in the process the observation records no numbers, and
    # the hint names the scale for the user to fill in (tests/test_user_u35.py).
    call = _call(hint.suggestion, "scaled_dot_product_attention").replace(UNKNOWN_SCALE, repr((C // H) ** -0.5))
    with torch.no_grad():
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in attn.qkv(x).split(C, dim=2))
        cond = torch.tril(torch.ones(T, T)) == 0
        got = eval(call, {"torch": torch}, {"q": q, "k": k, "v": v, "cond": cond})  # our own text
        got = attn.o(got.transpose(1, 2).contiguous().view(B, T, C))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_inline_mask_attention_is_found_by_op_order() -> None:
    """A causal mask built inside the forward (``torch.tril(torch.ones(T, T)) == 0``) puts
    ``ones``, ``tril`` and ``eq`` between the scale and ``masked_fill`` in op order: the
    attention is found from the user's profiler too, those ops left out, as live."""
    torch.manual_seed(0)
    attn, x = InlineMaskAttention().eval(), torch.randn(B, T, C)
    with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
        attn(x)
    _one(from_profiler(prof).hints, "attention")


def test_channels_first_layer_norm_is_a_layer_norm_hint() -> None:
    """A LayerNorm by hand over dim 1 of [N, C, H, W] was only an elementwise_chain of its last
    6 ops; it is a layer_norm over that dim, applied as written (tests/test_channels_first_norms.py)."""
    torch.manual_seed(0)
    norm, x = LayerNorm2d(32).eval(), torch.randn(B, 32, 8, 8)
    f = profile_on_neuron(norm.forward, export=False, backend="cpu")
    with torch.no_grad():
        expected = f(x)
        f(x)
    hint = _one(f.last_result.hints, "layer_norm")
    assert hint.details["dim"] == 1
    assert "elementwise_chain" not in {h.pattern for h in f.last_result.hints}
    (call,) = re.findall(r"torch\.nn\.functional\.layer_norm\((?:[^()]|\([^()]*\))*\)\.movedim\(-1, 1\)", hint.suggestion)
    with torch.no_grad():
        # No eps recorded where torch.compile ran earlier in the process (tests/test_user_u35.py).
        got = eval(call.replace(UNKNOWN_EPS, "1e-06"), {"torch": torch}, {"x": x, "weight": norm.weight, "bias": norm.bias})
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
