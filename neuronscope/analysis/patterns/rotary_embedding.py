"""Rotary position embedding written out: ``x * cos + rotate_half(x) * sin``, or its two halves
rotated apart and concatenated.
"""

from __future__ import annotations

from typing import Any

from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.spelling import Spelling

__all__ = ["ROTARY_EMBEDDING"]


def _spelling(t: Any, rotate: str, rotated_first: bool) -> Any:
    """``x * cos + rotate_half(x) * sin``: Llama's ``rotate_half`` (``cat((-x2, x1))``) or GPT-J's
    interleaved ``rotate_every_two`` (``stack((-x2, x1), -1).flatten(-2)``), made after
    ``x * cos`` or before (RoFormer; what op order shows); or each half
    rotated on its own and the two concatenated, ``cat((x1 * cos - x2 * sin, x2 * cos + x1 *
    sin))`` with cos and sin of half the size (DeepSeek-V3, from-scratch Llamas), the halves
    split or interleaved: there ``x`` is a half (the hint's shape), as no op reads the whole."""
    import torch

    x = t.x
    if rotate == "halves":  # ``up``: the second half, shaped as ``x``
        x1, x2 = x, t.up
        return torch.cat((x1 * t.cos - x2 * t.sin, x2 * t.cos + x1 * t.sin), dim=t.dim)

    def rotated(x: Any) -> Any:
        if rotate == "half":
            x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
            return torch.cat((-x2, x1), dim=t.dim)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=t.dim).flatten(-2)

    if rotated_first:
        r = rotated(x)
        return (x * t.cos) + (r * t.sin)
    return (x * t.cos) + (rotated(x) * t.sin)


SPELLINGS = (
    Spelling(_spelling, {"rotate": ("half", "every_two"), "rotated_first": (False, True)}, broadcast=("cos", "sin")),
    Spelling(_spelling, {"rotate": ("halves",), "rotated_first": (False,)}, broadcast=("cos", "sin")),
)


def _suggest(m: Match, backend: str) -> str:
    kernel = "the Neuron fused rotary kernel" if backend == "neuron" else "a fused rotary kernel"
    # Compiled alone, a function pays compiled code's entry on every call (on a CPU, more than
    # the rotary's few ops save): the saving is the enclosing module's, compiled as a whole.
    return f"torch.compile the module that applies the rotary embedding (the layer or the model), or {kernel}"


ROTARY_EMBEDDING = Pattern(
    name="rotary_embedding",
    spellings=SPELLINGS,
    suggest=_suggest,
    eager_replacement=False,
    one_hint_per_shape=False,
)
