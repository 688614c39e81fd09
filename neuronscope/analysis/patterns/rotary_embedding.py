"""Rotary position embedding written out: ``x * cos + rotate_half(x) * sin``.
"""

from __future__ import annotations

from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.spelling import Spelling

__all__ = ["ROTARY_EMBEDDING"]


def _spelling(t: Any, rotate: str) -> Any:
    """``x * cos + rotate_half(x) * sin``: Llama's ``rotate_half`` (``cat((-x2, x1))``) or GPT-J's
    interleaved ``rotate_every_two`` (``stack((-x2, x1), -1).flatten(-2)``)."""
    import torch

    def rotated(x: Any) -> Any:
        if rotate == "half":
            x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
            return torch.cat((-x2, x1), dim=-1)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    return (t.x * t.cos) + (rotated(t.x) * t.sin)


SPELLINGS = (Spelling(_spelling, {"rotate": ("half", "every_two")}),)


def match_rotary(g: OpGraph, n: OpNode) -> Match | None:
    """``x * cos + rotate_half(x) * sin``, rotate_half by ``cat((-x2, x1))`` or an
    interleaved ``stack((-x2, x1), -1).flatten(-2)``."""
    if n.op != "add" or len(n.inputs) != 2:
        return None
    m1, m2 = g.producer(n, 0), g.producer(n, 1)
    if m1 is None or m2 is None or m1.op != "mul" or m2.op != "mul":
        return None
    for mx, mr in ((m1, m2), (m2, m1)):
        for rk in (0, 1):
            r = g.producer(mr, rk)
            if r is None or r.op not in ("cat", "stack", "flatten", "reshape") or len(r.inputs) < 1:
                continue
            r_nodes = [r]
            if r.op in ("flatten", "reshape"):
                r2 = g.producer(r, 0)
                if r2 is None or r2.op not in ("cat", "stack"):
                    continue
                r_nodes.append(r2)
                r = r2
            if len(r.inputs) != 2:
                continue
            neg_k = next((k for k in (0, 1) if (p := g.producer(r, k)) is not None and p.op == "neg"), None)
            if neg_k is None:
                continue
            neg = g.producer(r, neg_k)
            assert neg is not None
            x_val = r.value(1 - neg_k)
            if not neg.inputs or neg.value(0) != x_val:
                continue
            xk = next((k for k in (0, 1) if mx.value(k) == x_val), None)
            if xk is None:
                continue
            nodes = [mx, neg, *r_nodes, mr, n]
            return Match("rotary_embedding", sorted(set(nodes), key=lambda m: m.index), mx.inputs[xk], {})
    return None



def _suggest(m: Match, backend: str) -> str:
    kernel = "the Neuron fused rotary kernel" if backend == "neuron" else "a fused rotary kernel"
    # Compiled alone, a function pays compiled code's entry on every call (on a CPU, more than
    # the rotary's few ops save): the saving is the enclosing module's, compiled as a whole.
    return f"torch.compile the module that applies the rotary embedding (the layer or the model), or {kernel}"


ROTARY_EMBEDDING = Pattern(
    name="rotary_embedding",
    match=match_rotary,
    spellings=SPELLINGS,
    sequence_shapes="rotary",
    suggest=_suggest,
    eager_replacement=False,
    one_hint_per_shape=False,
)
