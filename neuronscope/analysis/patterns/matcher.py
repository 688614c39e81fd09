"""The graph matcher derived from an idiom's declared spellings: one for every idiom it serves.

Each spelling's op graph (:func:`~.spelling.templates`: its ops, and which op's output or which
example tensor each takes) is looked for in a capture's op graph, anchored at the template's
last op and walked back through the producers of its inputs:

- an op of the template is an op of the same name whose dimensioned inputs are, in order (either
  order for ``add`` and ``mul``), what the template's are;
- an example tensor of the spelling (``x``, ``cos``) is one value of the capture, the same
  wherever the template takes it (a view of it, such as ``x[..., :d]``, is of its storage),
  and different example tensors are different values (``x * silu(x)`` is no GLU: its ``up``
  would be its ``x``);
- a side tensor (attention's mask, a GLU's up projection) is any input, other than the
  example tensors' values.

What a match says (``details``) comes from the spelling choice that ran the template.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg
from neuronscope.analysis.patterns.base import Match, root_value
from neuronscope.analysis.patterns.spelling import Spelling, TemplateOp, templates

__all__ = ["graph_matcher"]

#: Ops whose two dimensioned inputs code writes in either order (``w * h``, ``h * w``).
COMMUTATIVE = frozenset({"add", "mul"})


class _Walk:
    """One attempt to find a template anchored at a node."""

    def __init__(self, g: OpGraph, ops: tuple[TemplateOp, ...]) -> None:
        self.g, self.ops = g, ops
        self.assign: dict[int, OpNode] = {}
        self.bound: dict[str, list[Any]] = {}  # name -> [value, impl or None, TensorArg]
        self.sides: list[tuple[Any, int]] = []

    def _state(self) -> tuple[Any, ...]:
        return dict(self.assign), {k: list(v) for k, v in self.bound.items()}, list(self.sides)

    def _restore(self, state: tuple[Any, ...]) -> None:
        self.assign, self.bound, self.sides = state[0], state[1], state[2]

    def op(self, j: int, node: OpNode) -> bool:
        if j in self.assign:
            return self.assign[j] is node
        t = self.ops[j]
        if node.op != t.op or not node.writes or any(n is node for n in self.assign.values()):
            return False
        big = node.big_inputs()
        if len(big) != len(t.args):
            return False
        for order in (big, big[::-1]) if node.op in COMMUTATIVE and len(big) == 2 else (big,):
            state = self._state()
            self.assign[j] = node
            if all(self.arg(ref, node, k) for ref, k in zip(t.args, order)):
                return True
            self._restore(state)
        return False

    def arg(self, ref: tuple[str, Any, bool], node: OpNode, k: int) -> bool:
        kind, name, direct = ref
        if kind == "op":
            p = self.g.producer(node, k)
            return p is not None and self.op(name, p)
        value, impl = root_value(self.g, node, k), node.inputs[k].impl
        if kind == "side":
            self.sides.append((value, impl))
            return True
        b = self.bound.get(name)
        if b is None:
            self.bound[name] = [value, impl if direct else None, node.inputs[k]]
            return True
        if b[0] != value:
            return False
        if direct:
            if b[1] is None:
                b[1] = impl
            elif b[1] != impl:
                return False
        return True

    def distinct(self) -> bool:
        """Different example tensors are different values, and a side tensor none of them."""
        seen = [(b[0], b[1]) for b in self.bound.values()]
        return len(set(seen)) == len(seen) and not any(s in seen for s in self.sides)


def graph_matcher(
    pattern: str, spellings: tuple[Spelling, ...], params: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> Callable[[OpGraph, OpNode], Match | None]:
    """The ``match(graph, node)`` of an idiom: its largest spelling template anchored at
    ``node``, as a :class:`~.base.Match` of ``pattern`` whose ``x`` is the capture's tensor for
    the spelling's ``x`` and whose params are ``params(choice)``."""

    def match(g: OpGraph, n: OpNode) -> Match | None:
        for ops, choice in templates(spellings):
            if ops[-1].op != n.op:
                continue
            walk = _Walk(g, ops)
            if walk.op(len(ops) - 1, n) and len(walk.assign) == sum(op.own for op in ops) and walk.distinct():
                nodes = sorted((walk.assign[j] for j, op in enumerate(ops) if op.own), key=lambda m: m.index)
                x: TensorArg | None = walk.bound["x"][2] if "x" in walk.bound else None
                return Match(pattern, nodes, x, params(choice))
        return None

    return match
