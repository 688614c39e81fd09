"""The matcher RMSNorm and LayerNorm share: both end in a normalising ``mul``/``div`` of a
last-dim statistic, and one walk back from it tells them apart.
"""

from __future__ import annotations

import math
from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg
from neuronscope.analysis.patterns.base import (
    CASTS,
    ROOTS,
    Match,
    const_of,
    input_from,
    is_scalar_pow,
    only_big,
    param_like,
    root_value,
    same_value,
    single_consumer,
    square_of,
)

__all__ = ['MAX_NORM_TAIL', 'MAX_NORM_TRAILING', 'UNKNOWN_BIAS', 'UNKNOWN_EPS', 'UNKNOWN_WEIGHT', 'match_norm', 'param_text']

#: What an equivalent call needs that the evidence did not show: the user carries it over.
UNKNOWN_EPS = "<the eps your code uses>"
UNKNOWN_WEIGHT = "<weight, if your code multiplies by one>"
UNKNOWN_BIAS = "<bias, if your code adds one>"


def param_text(present: bool | None, name: str, unknown: str) -> str:
    """An affine parameter as a suggested call passes it: ``name``, ``None``, or ``unknown``
    (a trace without shapes cannot tell)."""
    return unknown if present is None else (name if present else "None")

#: Most ops walked from a norm's normalising op back to its reduction (``add eps``, ``sqrt``,
#: ``reciprocal``, a scale, a cast): longer chains are some other computation.
MAX_NORM_TAIL = 6
#: Most ops absorbed after a norm's normalising op (weight multiply, bias add, casts).
MAX_NORM_TRAILING = 3
_NORM_TAIL_OPS = frozenset({"add", "rsqrt", "sqrt", "reciprocal", "pow", "mul", "div", "clamp", "clamp_min", "to", "_to_copy"})


def match_norm(g: OpGraph, n: OpNode) -> Match | None:
    """A normalising ``mul``/``div``: ``a * rsqrt(stat + eps)`` or ``a / sqrt(stat + eps)``
    where ``stat`` reduces ``a``'s square (RMSNorm) or ``a`` is centred and ``stat`` is its
    variance (LayerNorm)."""
    if n.op not in ("mul", "div") or len(n.inputs) != 2 or len(n.big_inputs()) != 2:
        return None
    orders = ((0, 1),) if n.op == "div" else ((0, 1), (1, 0))
    for ak, bk in orders:
        m = _norm_with(g, n, ak, bk)
        if m is not None:
            return m
    return None


def _norm_with(g: OpGraph, n: OpNode, ak: int, bk: int) -> Match | None:
    chain: list[OpNode] = []
    has_root = False
    cur = g.producer(n, bk)
    red: OpNode | None = None
    while cur is not None and len(chain) <= MAX_NORM_TAIL:
        if cur.op in ("mean", "var", "std", "var_mean", "norm", "linalg_vector_norm"):
            red = cur
            break
        k = only_big(cur)
        if cur.op not in _NORM_TAIL_OPS or k is None:
            return None
        if cur.op in ROOTS or is_scalar_pow(cur, 0.5, -0.5):
            has_root = True
        chain.append(cur)
        cur = g.producer(cur, k)
    if red is None or not red.inputs:
        return None
    if red.op in ("std", "norm", "linalg_vector_norm"):
        has_root = True
    # The reduction must be over the last dim: its output is x's shape with the last dim 1.
    out_user = chain[-1] if chain else n
    out_k = input_from(out_user, red)
    if out_k is None:
        return None
    out_sizes, x_sizes = out_user.inputs[out_k].sizes, red.inputs[0].sizes
    if not (len(out_sizes) == len(x_sizes) and out_sizes[-1:] == (1,) and out_sizes[:-1] == x_sizes[:-1]):
        return None

    extra: list[OpNode] = []
    # ``a`` may carry a weight already (``w * (x - mean) / (std + eps)``).
    a_node, a_k = n, ak
    pa = g.producer(n, ak)
    if pa is not None and pa.op == "mul" and len(pa.inputs) == 2:
        for wk in (0, 1):
            if pa.inputs[wk].sizes == x_sizes[-1:] and param_like(g, pa, wk, extra):
                extra.append(pa)
                a_node, a_k = pa, 1 - wk
                break
    a_prod = g.producer(a_node, a_k)

    pattern = ""
    root_is_reduction = red.op == "std"
    x: TensorArg | None = None
    params: dict[str, Any] = {}
    a_centred = _centred(g, a_node, a_k)
    sq = square_of(g, g.producer(red, 0)) if red.op == "mean" else None
    if sq is not None:
        sq_node, tk = sq
        extra.append(sq_node)
        t_centred = _centred(g, sq_node, tk)
        if t_centred is not None:  # mean((x - mu)^2): a LayerNorm
            if a_centred is None or not same_value(g, a_centred[0], 0, t_centred[0], 0):
                return None
            extra += [*t_centred, *a_centred]
            pattern, x = "layer_norm", t_centred[0].inputs[0]
            casts_src = (t_centred[0], 0)
        else:
            if root_value(g, sq_node, tk) != root_value(g, a_node, a_k):
                return None
            pattern, x = "rms_norm", sq_node.inputs[tk]
            casts_src = (sq_node, tk)
    elif red.op in ("norm", "linalg_vector_norm"):  # norm(x) * d**-0.5: the RMS from a norm
        if root_value(g, red, 0) != root_value(g, a_node, a_k):
            return None
        pattern, x = "rms_norm", red.inputs[0]
        casts_src = (red, 0)
    else:
        # x - mean(x) over var(x) / std(x) / var_mean(x), the two statistics of x in either
        # order: the pair is checked as a set, one mean, one spread, of the same x.
        if a_centred is None or not same_value(g, a_centred[0], 0, red, 0):
            return None
        stats = {red.op, a_centred[1].op}
        if not (stats == {"var_mean"} or ("mean" in stats and stats & {"var", "std", "var_mean"})):
            return None
        has_root = has_root or "std" in stats
        # Either of the two statistics may be the one reached first: the root is the std of the pair.
        root_is_reduction = "std" in stats
        extra += list(a_centred)
        pattern, x = "layer_norm", red.inputs[0]
        casts_src = (red, 0)
        spread = red if red.op != "mean" else a_centred[1]
        correction = _correction(spread)
        if correction:  # x.var() / x.std() default to N - 1: not layer_norm's variance
            params["unbiased"] = True
            params["correction"] = correction
    if not has_root:  # a mean square without a root is a variance, not a norm
        return None
    if pattern == "layer_norm":
        power = _power_of_variance(chain, 0.5 if root_is_reduction else 1.0)
        if power is not None and power != (0.5 if n.op == "div" else -0.5):
            return None  # divided by the variance, a fourth root, a scaled variance: another function
        if _eps_outside_root(chain, root_is_reduction):
            params["eps_outside_root"] = True  # (std + eps): layer_norm takes sqrt(var + eps)
    # Leading casts (``x.to(torch.float32)``) belong to the norm.
    lead: list[OpNode] = []
    root_value(g, casts_src[0], casts_src[1], lead)
    if lead:
        x = lead[-1].inputs[0]
    if a_prod is not None and a_prod.op in CASTS:
        lead.append(a_prod)

    nodes = {m.index: m for m in [n, red, *chain, *extra, *lead]}
    # Trailing weight, bias and casts.
    cur = n
    steps = 0
    while steps < MAX_NORM_TRAILING:
        nxt = single_consumer(g, cur)
        if nxt is None or nxt.index in nodes:
            break
        if nxt.op in CASTS:
            pass
        elif nxt.op in ("mul", "add") and len(nxt.inputs) == 2 and (pattern == "layer_norm" or nxt.op == "mul"):
            k = input_from(nxt, cur)
            more: list[OpNode] = []
            if k is None or not nxt.inputs[1 - k].sizes or nxt.inputs[1 - k].sizes != x.sizes[-1:]:
                break
            if not param_like(g, nxt, 1 - k, more):
                break
            for mnode in more:
                nodes[mnode.index] = mnode
            params["bias" if nxt.op == "add" else "weight"] = True
        else:
            break
        nodes[nxt.index] = nxt
        cur = nxt
        steps += 1
    if a_node is not n:  # ``w * (x - mean)`` before the division
        params["weight"] = True
    if any(e.op in ("add", "rsub") and all(q < 0 for q in e.producers) for e in nodes.values()):
        params["weight_plus_one"] = True  # Gemma's ``x * (1 + weight)``
    eps = const_of(chain, "add")
    if eps is not None:
        params["eps"] = eps
    params.setdefault("weight", False)
    params.setdefault("bias", False)
    return Match(pattern, sorted(nodes.values(), key=lambda m: m.index), x, params)


def _correction(spread: OpNode) -> float:
    """What a ``var`` / ``std`` / ``var_mean`` subtracts from N (1 by default: N - 1), from the
    arguments the profiler recorded after the dims: ``unbiased`` (a bool) or ``correction``
    (a number; None is the default, 1). 0 where nothing was recorded."""
    if spread.op not in ("var", "std", "var_mean") or len(spread.scalars) < 3:
        return 0
    flag = spread.scalars[1]
    if isinstance(flag, bool):
        return 1 if flag else 0
    if flag is None:
        return 1
    return float(flag) if isinstance(flag, (int, float)) else 0


def _power_of_variance(chain: list[OpNode], power: float) -> float | None:
    """The power of the variance the normalising op divides by (0.5: the standard deviation)
    or multiplies with (-0.5), walking the chain up from the reduction (whose own power is
    ``power``: 0.5 for ``std``, 1 for a variance); the eps add, casts and a scale by 1.0 change
    nothing, another scale is no norm's (NaN). None where a power's exponent or a scale's
    number was not recorded."""
    previous = ""
    for c in reversed(chain):
        op, previous = previous, c.op  # op: the one below c in the chain
        if c.op == "sqrt":
            power *= 0.5
        elif c.op == "rsqrt":
            power *= -0.5
        elif c.op == "reciprocal":
            power = -power
        elif c.op == "pow":
            exps = [v for v in c.scalars if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if not exps:
                return None
            power *= exps[0]
        elif c.op in ("mul", "div"):
            # ``1.0 / sqrt(var + eps)`` runs reciprocal, then a multiply by 1.0: where the
            # number was not recorded, a multiply right after a reciprocal is taken for it.
            if c.consts and any(v != 1.0 for v in c.consts):
                return math.nan  # ``sqrt(2 * var + eps)``: a scaled variance
            if not c.consts and not (c.op == "mul" and op == "reciprocal"):
                return math.nan  # a scale of unknown size: no norm claimed on it
    return power


def _eps_outside_root(chain: list[OpNode], reduction_is_root: bool) -> bool:
    """``a / (sqrt(var) + eps)`` or ``a / (std + eps)``: walking back from the division, the
    eps add comes before the root (a sqrt in the chain, else a ``std`` reduction)."""
    ops = [c.op for c in chain]
    adds = [i for i, op in enumerate(ops) if op == "add"]
    roots = [i for i, op in enumerate(ops) if op in ("sqrt", "rsqrt")]
    root = roots[0] if roots else (len(ops) if reduction_is_root else -1)
    return bool(adds) and adds[0] < root


def _centred(g: OpGraph, n: OpNode, k: int) -> tuple[OpNode, OpNode] | None:
    """If input ``k`` of ``n`` is ``x - stat(x)`` for a last-dim statistic of the same ``x``
    (a mean, or an output of ``var_mean``): (the ``sub`` node, the statistic's node)."""
    c = g.producer(n, k)
    if c is None or c.op != "sub" or len(c.inputs) != 2:
        return None
    mu = g.producer(c, 1)
    if mu is None or not mu.inputs or mu.op not in ("mean", "var", "std", "var_mean"):
        return None
    return (c, mu) if same_value(g, mu, 0, c, 0) else None


