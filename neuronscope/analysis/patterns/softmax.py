"""Softmax written out: ``exp(x - max(x)) / sum(exp(...))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..dataflow import OpGraph, OpNode
from .base import Builders, Match, Pattern, same_value

if TYPE_CHECKING:
    from ...result import Hint

__all__ = ["SOFTMAX", "match_softmax"]


def match_softmax(g: OpGraph, n: OpNode) -> Match | None:
    """``exp(x - max(x)) / sum(exp(...))``, the max-subtraction optional, ``* (1/sum)`` too."""
    if n.op not in ("div", "mul") or len(n.inputs) != 2:
        return None
    e = g.producer(n, 0)
    s = g.producer(n, 1)
    extra: list[OpNode] = []
    if n.op == "mul":
        if e is not None and e.op == "reciprocal":
            e, s = s, e
        if s is None or s.op != "reciprocal":
            return None
        extra.append(s)
        s = g.producer(s, 0)
    if e is None or s is None or e.op != "exp" or s.op != "sum" or not s.inputs:
        return None
    e2 = g.producer(s, 0)
    if e2 is None or e2.op != "exp":
        return None
    if e2 is not e:
        if not same_value(g, e2, 0, e, 0):
            return None
        extra.append(e2)
    nodes = [n, e, s, *extra]
    x = e.inputs[0] if e.inputs else None
    sub = g.producer(e, 0)
    if sub is not None and sub.op == "sub" and len(sub.inputs) == 2:
        mx = g.producer(sub, 1)
        if mx is not None and mx.op in ("max", "amax") and mx.inputs and same_value(g, mx, 0, sub, 0):
            nodes += [sub, mx]
            x = sub.inputs[0]
    return Match("softmax", sorted(set(nodes), key=lambda m: m.index), x, {"dim": -1})



def _suggest(m: Match, backend: str) -> str:
    return "use torch.softmax(x, dim=-1)"


def _verify(hint: Hint, x: Any, device: Any) -> Builders:
    import torch


    def chain() -> Any:
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    return chain, (lambda: torch.softmax(x, -1)), "torch.softmax"


SOFTMAX = Pattern(
    name="softmax",
    match=match_softmax,
    sequence=r"(?:(?:max|amax) sub )?exp (?:exp )?sum (?:div |reciprocal mul )",
    sequence_shapes="row",
    fused_passes=2,
    suggest=_suggest,
    verify=_verify,
)
