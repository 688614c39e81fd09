"""LayerNorm written out: ``(x - mean) / sqrt(var + eps) * weight + bias``, from ``mean``/``var``,
``var_mean``, ``std`` or the centred square.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import (
    UNKNOWN_BIAS,
    UNKNOWN_EPS,
    UNKNOWN_WEIGHT,
    Match,
    Pattern,
    dim_note,
    dims,
    fused_call,
    param_text,
    vectors_note,
)
from neuronscope.analysis.patterns.shapes import VECTOR_SHAPES, is_plain_vector, last_dim
from neuronscope.analysis.patterns.spelling import Spelling

__all__ = ["LAYER_NORM"]

def _spelling(t: Any, stats: str, root: str, weight: bool, bias: bool, square: str = "pow", eps: str = "inside", late: bool = False) -> Any:
    """LayerNorm as models write it: BERT's TF-style ``(x - u) / sqrt(mean((x - u)^2) + eps)``
    (``x - u`` once or twice, squared by ``pow`` or ``d * d``), ``mean`` and ``var`` or
    ``var_mean`` with ``rsqrt`` or ``sqrt`` (the centring before the ``var``, after it or, ``late``,
    after the root),
    the eps inside the root or added to it, the Annotated Transformer's ``a * (x - mean) /
    (std + eps) + b`` (or no eps)."""
    import torch

    x = t.x
    if stats == "std":  # the weight multiplies the centred x, before the division
        mean, std = x.mean(t.dim, keepdim=True), x.std(t.dim, keepdim=True, correction=t.correction)
        y = t.weight * (x - mean) if weight else x - mean
        y = y / (std + t.eps) if eps == "outside" else y / std
        return y + t.bias if bias else y
    if stats in ("centred", "centred_twice"):
        mean = x.mean(t.dim, keepdim=True)
        centred = x - mean
        var = (centred.pow(2) if square == "pow" else centred * centred).mean(t.dim, keepdim=True)
        if stats == "centred_twice":
            centred = x - mean
    else:
        if stats == "var_mean":
            var, mean = torch.var_mean(x, dim=t.dim, keepdim=True, correction=t.correction)
        elif stats == "var, centred first":  # one line: (x - x.mean()) / sqrt(x.var() + eps)
            mean = x.mean(t.dim, keepdim=True)
            centred = x - mean
            var = x.var(t.dim, keepdim=True, correction=t.correction)
        else:
            mean, var = x.mean(t.dim, keepdim=True), x.var(t.dim, keepdim=True, correction=t.correction)
        if stats != "var, centred first":
            centred = None if late else x - mean
    if root == "rsqrt":
        r = torch.rsqrt(var + t.eps)
    else:
        r = torch.sqrt(var) + t.eps if eps == "outside" else torch.sqrt(var + t.eps)
    centred = x - mean if centred is None else centred
    y = centred * r if root == "rsqrt" else centred / r
    y = y * t.weight if weight else y
    return y + t.bias if bias else y


def _replacement(t: Any, weight: bool, bias: bool, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    x, back = last_dim(t)  # over the dim the code normalizes, moved last (as suggested)
    d = x.shape[-1]
    w, b = (t.weight if weight else None), (t.bias if bias else None)
    if all(v is None or is_plain_vector(tuple(v.shape), tuple(t.x.shape), t.dim) for v in (w, b)):
        w, b = (v if v is None or v.dim() == 1 else v.reshape(d) for v in (w, b))  # [C, 1, 1]: [C]
        return "torch.nn.functional.layer_norm", lambda: back(torch.nn.functional.layer_norm(x, (d,), w, b, t.eps))

    def after() -> Any:  # a weight or bias of another shape than (d,): applied after, as suggested
        y = back(torch.nn.functional.layer_norm(x, (d,), None, None, t.eps))
        y = y * w if w is not None else y
        return y + b if b is not None else y

    return "torch.nn.functional.layer_norm", after


_AFFINE = MappingProxyType({"weight": (False, True), "bias": (False, True)})
_CENTRED = MappingProxyType({"stats": ("centred", "centred_twice"), "square": ("pow", "mul")})
_VECTORS = ("weight", "bias")
SPELLINGS = (
    Spelling(_spelling, {**_CENTRED, "root": ("rsqrt", "sqrt"), **_AFFINE}, vectors=_VECTORS, any_dim=True),
    Spelling(_spelling, {"stats": ("var", "var_mean", "var, centred first"), "root": ("rsqrt", "sqrt"), **_AFFINE}, vectors=_VECTORS, any_dim=True),
    Spelling(_spelling, {**_CENTRED, "root": ("sqrt",), "eps": ("outside",), **_AFFINE}, vectors=_VECTORS, any_dim=True),
    Spelling(_spelling, {"stats": ("std",), "root": ("none",), "eps": ("outside", "none"), **_AFFINE}, vectors=_VECTORS, any_dim=True),
    Spelling(_spelling, {"stats": ("var", "var_mean"), "root": ("rsqrt", "sqrt"), "late": (True,), **_AFFINE}, vectors=_VECTORS, any_dim=True),
)

#: The statistics of a spread: the op whose recorded arguments say what it subtracts from N.
_SPREADS = frozenset({"var", "std", "var_mean"})


def _params(choice: Mapping[str, Any], nodes: list[OpNode]) -> dict[str, Any]:
    """The weight and bias the spelling applies, where its eps is (the matcher reads its value
    from the add that takes it), and what the spread's op subtracts from N."""
    params: dict[str, Any] = {"weight": choice["weight"], "bias": choice["bias"]}  # None: not known
    if choice.get("eps") == "outside":
        params["eps_outside_root"] = True  # (std + eps): layer_norm takes sqrt(var + eps)
    correction = next((_correction(n) for n in nodes if n.op in _SPREADS), 0)
    if correction:  # x.var() / x.std() default to N - 1: not layer_norm's variance
        params["unbiased"] = True
        params["correction"] = correction
    return params


def _correction(spread: OpNode) -> float:
    """What a ``var`` / ``std`` / ``var_mean`` subtracts from N (1 by default: N - 1), from the
    arguments the profiler recorded after the dims: ``unbiased`` (a bool) or ``correction``
    (a number; None is the default, 1); else from the number the user passed, where an
    observation recorded it. 0 where nothing was recorded."""
    if len(spread.scalars) >= 3:
        flag = spread.scalars[1]
        if isinstance(flag, bool):
            return 1 if flag else 0
        return 1 if flag is None else float(flag) if isinstance(flag, (int, float)) else 0
    return 0


def _suggest(m: Match, backend: str) -> str:
    eps = m.params.get("eps")
    eps_text = f"eps={eps!r}" if eps is not None else f"eps={UNKNOWN_EPS}"
    if m.params.get(VECTOR_SHAPES):
        # layer_norm takes a weight and bias of (d,) only: one of another shape
        # (Cohere's per-head [heads, d]) is applied after it, as the code applies it.
        after = (" * weight" if m.params.get("weight") else "") + (" + bias" if m.params.get("bias") else "")
        call = f"use {fused_call(m, 'layer_norm', eps_text)}{after}"
        return call + vectors_note(m, "layer_norm") + dim_note(m) + _differences(m)
    weight = param_text(m.params.get("weight"), "weight", UNKNOWN_WEIGHT)
    bias = param_text(m.params.get("bias"), "bias", UNKNOWN_BIAS)
    call = f"use {fused_call(m, 'layer_norm', f'{weight}, {bias}, {eps_text}')}"
    return call + dim_note(m) + _differences(m)


def _differences(m: Match) -> str:
    """What layer_norm computes differently from the user's code: said, not hidden, since the
    user's model was trained with their formula."""
    notes = []
    c = m.params.get("correction")
    if c:
        c_text = f"{c:g}"
        n = int(dims(m)) if dims(m).isdigit() else None  # the size of the dim it normalizes
        size = f" (x{(n / (n - c)) ** 0.5:.4f} at {n})" if n and n > c else ""
        notes.append(
            f"your code divides by the spread with N - {c_text} (var/std default: N - 1); layer_norm's is biased (N): "
            f"outputs differ by the factor sqrt(N/(N-{c_text})){size}"
        )
    if m.params.get("eps_outside_root"):
        notes.append("your eps is added outside the root (std + eps); layer_norm adds it inside, sqrt(var + eps)")
    return "; not identical: " + "; ".join(notes) if notes else ""


LAYER_NORM = Pattern(
    name="layer_norm",
    spellings=SPELLINGS,
    params=_params,
    fused_passes=2,
    suggest=_suggest,
    replacement=_replacement,
)
