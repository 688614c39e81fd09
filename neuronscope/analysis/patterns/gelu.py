"""GELU written out: the tanh formula (GPT-2's GELU-new) or the erf one (BERT).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import Match, Pattern, input_from, only_big, root_value, single_consumer
from neuronscope.analysis.patterns.spelling import Spelling, builder

__all__ = ["GELU"]


_C = math.sqrt(2.0 / math.pi)


def _spelling(t: Any, half: str, inner: str) -> Any:
    """GELU written out: ``0.5 * x * (1 + tanh(...))`` or ``x * 0.5 * (1 + erf(...))`` (or the
    halving last: ``x * (1 + erf(...)) / 2``), the argument as GPT-2's NewGELU writes it
    (``c * (x + 0.044715 * x**3)``), FastGELU / Bloom (``x * c * (1 + 0.044715 * x * x)``), with
    a square (``c * x * (1 + 0.044715 * x**2)``), divided by ``sqrt(pi / 2)``, or BERT's
    ``x / sqrt(2)`` / ``x * (1 / sqrt(2))`` under erf."""
    import torch

    x = t.x
    head = {"0.5 * x": lambda: 0.5 * x, "x * 0.5": lambda: x * 0.5, "last": lambda: x}[half]()
    u = {
        "cubic": lambda: torch.tanh(_C * (x + 0.044715 * torch.pow(x, 3.0))),
        "fast": lambda: torch.tanh(x * _C * (1.0 + 0.044715 * x * x)),
        "bloom": lambda: torch.tanh(_C * x * (1 + 0.044715 * x * x)),
        "square": lambda: torch.tanh(_C * x * (1 + 0.044715 * x**2)),
        "root_divided": lambda: torch.tanh((x + 0.044715 * x**3) / math.sqrt(math.pi / 2)),
        "erf_div": lambda: torch.erf(x / math.sqrt(2.0)),
        "erf_mul": lambda: torch.erf(x * (1.0 / math.sqrt(2.0))),
    }[inner]()
    y = head * (1.0 + u)
    return y / 2 if half == "last" else y


def _replacement(t: Any, inner: str, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    F = torch.nn.functional
    if inner.startswith("erf"):
        return "torch.nn.functional.gelu", lambda: F.gelu(t.x)
    return 'torch.nn.functional.gelu(approximate="tanh")', lambda: F.gelu(t.x, approximate="tanh")


SPELLINGS = (
    Spelling(_spelling, {"half": ("0.5 * x", "x * 0.5"), "inner": ("cubic", "fast", "bloom", "square", "root_divided", "erf_div", "erf_mul")}),
    Spelling(_spelling, {"half": ("last",), "inner": ("erf_div", "erf_mul")}),
)


#: Most ops in the polynomial inside a GELU's tanh/erf (``x + 0.044715 * x**3`` scaled, or
#: ``x * c * (1 + 0.044715 * x * x)``: five ops at most in the spellings seen in the wild).
MAX_GELU_CONE = 8


def match_gelu(g: OpGraph, t: OpNode) -> Match | None:
    """``0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3)))`` or ``x * 0.5 * (1 + erf(x / sqrt 2))``."""
    if t.op not in ("tanh", "erf") or not t.inputs:
        return None
    a = single_consumer(g, t)
    if a is None or a.op != "add" or len(a.big_inputs()) != 1:
        return None
    f = single_consumer(g, a)
    if f is None or f.op != "mul" or len(f.inputs) != 2:
        return None
    hk = 1 - (input_from(f, a) or 0)
    h = g.producer(f, hk)
    nodes: dict[int, OpNode] = {t.index: t, a.index: a, f.index: f}
    x_val: tuple[int, int]
    xk = only_big(h) if h is not None and h.op in ("mul", "div") else None
    if h is not None and xk is not None:  # ``0.5 * x`` or ``x / 2`` on the outside
        x_val = root_value(g, h, xk)
        x = h.inputs[xk]
        nodes[h.index] = h
    else:
        x_val = root_value(g, f, hk)
        x = f.inputs[hk]
    # The polynomial under tanh/erf may only read x and constants.
    cone: list[OpNode] = []
    todo = [(t, 0)]
    while todo:
        node, k = todo.pop()
        if root_value(g, node, k) == x_val:
            continue
        p = g.producer(node, k)
        # No sub: GELU's argument only adds terms (``c * (x - 0.044715 * x**3)`` is another function).
        if p is None or p.op not in ("mul", "add", "div", "pow") or p.index in nodes:
            return None
        nodes[p.index] = p
        cone.append(p)
        if len(cone) > MAX_GELU_CONE:
            return None
        todo.extend((p, pk) for pk in p.big_inputs())
    if not cone:
        return None
    # What is under tanh/erf must be GELU's argument: cubic in x under tanh, linear under erf
    # (``x * 0.5 * (1 + tanh(x / 2))`` is SiLU, not a GELU), with GELU's constants where the
    # observation pass recorded the user's numbers.
    degree = _degree(g, t, 0, x_val)
    if degree is not None and degree != (3 if t.op == "tanh" else 1):
        return None
    if t.op == "tanh" and not any(p.op == "add" for p in cone):
        return None  # tanh(c * x**3): GELU's argument has the linear term too
    if not _has_gelu_constants(cone, t.op) or not _all_close(a.consts, 1.0):
        return None  # ... and ``1 + tanh``, not ``2 + tanh``
    # The halving: ``0.5 * x`` outside, or a trailing ``/ 2`` (``x * (1 + erf(...)) / 2``);
    # without one it is twice a GELU.
    halving = h if h is not None and xk is not None else None
    if halving is None:
        last = single_consumer(g, f)
        if (
            last is not None
            and last.op in ("mul", "div")
            and only_big(last) is not None
            and last.index not in nodes
            and (len(last.inputs) == 1 or any(not i.sizes for i in last.inputs) or last.scalars)
        ):
            halving = nodes[last.index] = last
    if halving is None or not _all_close(halving.consts, 0.5 if halving.op == "mul" else 2.0):
        return None
    return Match(
        "gelu", sorted(nodes.values(), key=lambda m: m.index), x, {"approximate": "tanh" if t.op == "tanh" else "none"}
    )



#: GELU's constants under tanh: sqrt(2/pi), and the cubic term's 0.044715 (or, multiplied
#: out, 0.044715 * sqrt(2/pi)); under erf: x * 1/sqrt(2) (``x / sqrt(2)`` read as its inverse).
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = (0.044715, 0.044715 * _SQRT_2_OVER_PI)
_ERF_CONSTANTS = (1.0 / math.sqrt(2.0),)


def _close(v: float, *want: float) -> bool:
    return any(math.isclose(v, c, rel_tol=1e-3) for c in want)


def _all_close(values: tuple[float, ...], want: float) -> bool:
    """Every number recorded for an op is ``want`` (True where none was recorded)."""
    return all(_close(v, want) for v in values)


def _degree(g: OpGraph, node: OpNode, k: int, x_val: tuple[int, int]) -> float | None:
    """The degree in x of input ``k`` of ``node`` (a polynomial of x and constants), or None
    where it cannot be told (a power whose exponent was not recorded)."""
    if root_value(g, node, k) == x_val:
        return 1
    p = g.producer(node, k)
    if not node.inputs[k].sizes or p is None:
        return 0  # a Python number, or a tensor from outside: a constant
    big = p.big_inputs()
    parts = [_degree(g, p, pk, x_val) for pk in big]
    if any(d is None for d in parts):
        return None
    degs = [d for d in parts if d is not None]
    if p.op == "mul":
        return sum(degs)
    if p.op == "div":
        return (degs[0] if 0 in big else 0) - (degs[-1] if len(p.inputs) > 1 and 1 in big else 0)
    if p.op == "pow":
        exps = [v for v in (*p.scalars, *p.consts) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return degs[0] * exps[0] if exps and degs else None
    return max(degs, default=0)  # add, sub


def _has_gelu_constants(cone: list[OpNode], op: str) -> bool:
    """True unless the user's numbers under tanh/erf were recorded and are not GELU's. A
    number divided by counts as its inverse (``x / sqrt(2)``, ``u / sqrt(pi / 2)``); a power's
    exponent is the degree's business. Every recorded number must be one of GELU's (or 1.0, of
    ``1 + 0.044715 * x * x``); where every scalar operand was recorded, GELU's own must all be
    there too (a numpy or tensor constant is not recorded: then they cannot be asked for)."""
    seen: list[float] = []
    complete = True
    for n in cone:
        if n.op == "pow":
            continue
        scalars = sum(1 for t in n.inputs if not t.sizes)
        complete = complete and len(n.consts) >= scalars
        seen += [1.0 / v if n.op == "div" and v else v for v in n.consts]
    if op == "erf":
        return all(_close(v, *_ERF_CONSTANTS) for v in seen) and (not complete or bool(seen))
    if not all(_close(v, _SQRT_2_OVER_PI, *_CUBIC, 1.0) for v in seen):
        return False
    if not complete:
        return True
    scaled = any(_close(v, _CUBIC[1]) for v in seen)  # sqrt(2/pi) multiplied into the cubic term
    return (scaled or any(_close(v, _SQRT_2_OVER_PI) for v in seen)) and any(_close(v, *_CUBIC) for v in seen)


def _suggest(m: Match, backend: str) -> str:
    if m.params.get("approximate") == "tanh":
        return 'use torch.nn.functional.gelu(x, approximate="tanh")'
    return "use torch.nn.functional.gelu(x)"


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    return {"approximate": "tanh" if any(m.op == "tanh" for m in members) else "none"}


GELU = Pattern(
    name="gelu",
    match=match_gelu,
    spellings=SPELLINGS,
    suggest=_suggest,
    verify=builder(SPELLINGS, _replacement),
    sequence_params=_sequence_params,
)
