"""A newcomer's round on families no other test covers (u37): a nanoGPT-style training model
with a hand-written cross-entropy over ``[B, T, V]`` logits and a ``1 + weight`` RMSNorm, and
MPT (ALiBi bias added, then ``masked_fill``) from transformers, built from config.

Each hint is applied as written in place of the function or module it names and checked
against what the code computes, live and from the user's own ``torch.profiler``.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from neuronscope import from_profiler, profile_on_neuron
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
    if how == "decorated":
        f = profile_on_neuron(hand_cross_entropy, export=False, backend="cpu")
        f(logits, y)
        f(logits, y)
        hints = f.last_result.hints
    else:
        with torch.profiler.profile(record_shapes=True) as prof:
            hand_cross_entropy(logits, y)
        hints = from_profiler(prof).hints
    hint = _one(hints, "log_softmax")
    assert hint.details.get("loss") == "gather", hint.details
    call = _call(hint.suggestion, "cross_entropy")
    got = eval(call, {"torch": torch}, {"x": logits, "target": y})  # our own text
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
