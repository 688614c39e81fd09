"""Softmax written out: ``exp(x - max(x)) / sum(exp(...))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuronscope.analysis.opgraph import VIEW_OPS, OpGraph, OpNode, TensorArg
from neuronscope.analysis.patterns.base import Match, Pattern, input_from, same_value
from neuronscope.analysis.patterns.spelling import Spelling, builder

__all__ = ["SOFTMAX", "UNKNOWN_DIM", "match_softmax", "reduced_dims", "written_softmax"]


def written_softmax(t: Any, shift: str | None, form: str) -> Any:
    """Softmax written out: ``exp(x - max) / sum``, the shift by ``max`` / ``amax`` or none, the
    exp once or twice (``exp(z) / exp(z).sum()``), or ``e * (1 / sum)``."""
    import torch

    x = t.x
    dim = t.dim
    z = {None: lambda: x, "max": lambda: x - x.max(dim=dim, keepdim=True).values, "amax": lambda: x - x.amax(dim, keepdim=True)}[shift]()
    if form == "twice":
        return torch.exp(z) / torch.exp(z).sum(dim, keepdim=True)
    e = torch.exp(z)
    return e * e.sum(dim, keepdim=True).reciprocal() if form == "reciprocal" else e / e.sum(dim, keepdim=True)


def _replacement(t: Any, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    return "torch.softmax", lambda: torch.softmax(t.x, t.dim)


SPELLINGS = (Spelling(written_softmax, {"shift": (None, "max", "amax"), "form": ("div", "twice", "reciprocal")}),)


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
    # The sum's result as its consumer reads it (the division, or the reciprocal), straight from
    # the sum: a view between them (``.T``, ``unsqueeze`` after a sum without keepdim) moves
    # the dims, and the shapes no longer tell which one was summed.
    consumer = extra[0] if n.op == "mul" else n
    k = input_from(consumer, s)
    if k is None or any(m.op in VIEW_OPS and input_from(m, s) is not None for m in g.nodes[s.index + 1 : consumer.index]):
        return None  # on a square x, ``sum(0).unsqueeze(1)`` has ``sum(1, keepdim=True)``'s shape
    dims = reduced_dims(s, consumer.inputs[k])
    if dims is not None and len(dims) != 1:
        return None  # a sum over several dims: no softmax
    nodes = [n, e, s, *extra]
    x = e.inputs[0] if e.inputs else None
    sub = g.producer(e, 0)
    if sub is not None and sub.op == "sub" and len(sub.inputs) == 2:
        mx = g.producer(sub, 1)
        if mx is not None and mx.op in ("max", "amax") and mx.inputs and same_value(g, mx, 0, sub, 0):
            if dims is not None and reduced_dims(mx, sub.inputs[1]) not in (dims, None):
                return None  # the max of another dim: no softmax
            nodes += [sub, mx]
            x = sub.inputs[0]
    return Match("softmax", sorted(set(nodes), key=lambda m: m.index), x, {"dim": dims[0] if dims else None})


#: What the suggestion says where the shapes were not recorded: the user knows the dim.
UNKNOWN_DIM = "<the dim your code sums over>"


def reduced_dims(reduction: OpNode, result: TensorArg) -> tuple[int, ...] | None:
    """The dims a keepdim reduction ran over, counted from the end (-1: the last), from its
    input's and its result's shapes (where the result has 1 and the input not); None where the
    shapes do not tell (not recorded, or no dim changed)."""
    if not reduction.inputs:
        return None
    xs, rs = reduction.inputs[0].sizes, result.sizes
    if not xs or len(xs) != len(rs):
        return None
    dims = tuple(i - len(xs) for i, (a, b) in enumerate(zip(xs, rs)) if a != b)
    if any(rs[d] != 1 for d in dims):
        return ()  # not a keepdim reduction's result: no softmax's either
    return dims or None


def _suggest(m: Match, backend: str) -> str:
    dim = m.params.get("dim")
    return f"use torch.softmax(x, dim={UNKNOWN_DIM if dim is None else dim})"


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    """A trace's softmax: over the last dim where shapes were recorded (the sequence's shape
    check takes per-row statistics only), else not known."""
    return {"dim": -1} if all(m.inputs for m in members) else {}


SOFTMAX = Pattern(
    name="softmax",
    match=match_softmax,
    spellings=SPELLINGS,
    sequence_shapes="row",
    fused_passes=2,
    suggest=_suggest,
    verify=builder(SPELLINGS, _replacement),
    sequence_params=_sequence_params,
)
