"""RMSNorm written out: ``x * rsqrt(mean(x**2) + eps) * weight``, in the spellings real
models use (casts to float32 and back, ``pow(2)`` or ``x*x``, ``1/sqrt``, Gemma's ``1 + weight``,
the RMS from a vector norm).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import (
    UNKNOWN_EPS,
    UNKNOWN_WEIGHT,
    Match,
    Pattern,
    dim_note,
    fused_call,
    param_text,
    vectors_note,
)
from neuronscope.analysis.patterns.shapes import VECTOR_SHAPES, is_plain_vector, last_dim
from neuronscope.analysis.patterns.spelling import Spelling, named

__all__ = ["RMS_NORM"]

def _spelling(t: Any, root: str, weight: str, cast: str | None, square: str = "pow") -> Any:
    """RMSNorm as models write it: Llama (``pow``, ``rsqrt``, cast to float32 and back before
    ``weight * h``), T5 (only the variance from the cast: ``x * rsqrt(...)``, back before the
    weight), ``x * x`` or ``square``, ``x / sqrt(...)``, ``x * (1 / sqrt(...))``, Gemma's
    ``h * (1 + weight)`` cast back after it; or the RMS as a vector norm scaled by
    ``d ** -0.5``, the eps added to it (as some lucidrains models write it)."""
    import torch

    x = t.x
    h = x.float() if cast else x
    if root == "norm":
        ms = h.norm(dim=t.dim, keepdim=True) * named("scale", h.shape[t.dim] ** -0.5) + t.eps  # p=2, written or not
    else:
        sq = {"pow": lambda: h.pow(2), "square": lambda: h.square(), "mul": lambda: h * h}[square]()
        ms = sq.mean(t.dim, keepdim=True) + t.eps
    if cast == "variance":
        h = x
    if root == "norm":
        h = h / ms
    elif root == "rsqrt":
        h = h * torch.rsqrt(ms)
    elif root == "sqrt":
        h = h / torch.sqrt(ms)
    else:
        h = h * (1.0 / torch.sqrt(ms))
    if cast in ("before weight", "variance"):
        h = h.to(x.dtype)
    if weight == "weight":
        h = t.weight * h
    elif weight == "1 + weight":
        h = h * (1.0 + t.weight)
    return h.type_as(x) if cast == "after weight" else h


def _replacement(t: Any, weight: str | None, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    x, back = last_dim(t)  # over the dim the code normalizes, moved last (as suggested)
    d = x.shape[-1]

    def fused() -> Any:
        w = None if weight == "none" else t.weight if weight == "weight" else 1.0 + t.weight
        if w is not None and not is_plain_vector(tuple(w.shape), tuple(t.x.shape), t.dim):  # after, as suggested
            return back(torch.rms_norm(x, (d,), None, t.eps)) * w
        return back(torch.rms_norm(x, (d,), w if w is None or w.dim() == 1 else w.reshape(d), t.eps))

    return "torch.rms_norm", fused


_WEIGHTS = MappingProxyType({"weight": ("none", "weight", "1 + weight"), "cast": (None, "before weight", "after weight", "variance")})
SPELLINGS = (
    Spelling(_spelling, {"square": ("pow", "square", "mul"), "root": ("rsqrt", "sqrt", "reciprocal"), **_WEIGHTS}, vectors=("weight",), any_dim=True),
    Spelling(_spelling, {"root": ("norm",), **_WEIGHTS}, vectors=("weight",), any_dim=True),
)


def _params(choice: Mapping[str, Any], nodes: list[OpNode]) -> dict[str, Any]:
    """The weight as the spelling applies it (None: not known; the eps the matcher reads from
    the add that takes it)."""
    weight = choice["weight"]
    plus_one = {"weight_plus_one": True} if weight == "1 + weight" else {}
    # the RMS as a vector norm takes its eps outside the root: x / (rms + eps)
    outside = {"eps_outside_root": True} if choice.get("root") == "norm" else {}
    return {"weight": None if weight is None else weight != "none", "bias": False, **plus_one, **outside}


def _suggest(m: Match, backend: str) -> str:
    eps = m.params.get("eps")
    eps_text = f"eps={eps!r}" if eps is not None else f"eps={UNKNOWN_EPS}"
    if m.params.get(VECTOR_SHAPES):
        # rms_norm takes a weight of (d,) only: one of another shape (a per-head
        # [heads, d]) is applied after it, as the code applies it.
        after = " * (1 + weight)" if m.params.get("weight_plus_one") else " * weight"
        call = f"use {fused_call(m, 'rms_norm', eps_text)}{after}"
        return call + vectors_note(m, "rms_norm") + dim_note(m) + " (or torch.compile the module)" + _differences(m)
    if m.params.get("weight_plus_one"):
        weight = "1 + weight"
    else:  # unknown from a trace without shapes: a trailing mul may be the weight
        weight = param_text(m.params.get("weight"), "weight", UNKNOWN_WEIGHT)
    return f"use {fused_call(m, 'rms_norm', f'{weight}, {eps_text}')}{dim_note(m)} (or torch.compile the module)" + _differences(m)


def _differences(m: Match) -> str:
    """What rms_norm computes differently from the user's code: said, since their model was
    trained with their formula (with a tiny eps the two agree; with eps near the RMS, not)."""
    if not m.params.get("eps_outside_root"):
        return ""
    return "; not identical: your eps is added outside the root (rms + eps); rms_norm adds it inside, sqrt(mean(x**2) + eps)"


RMS_NORM = Pattern(
    name="rms_norm",
    spellings=SPELLINGS,
    params=_params,
    fused_passes=2,
    suggest=_suggest,
    replacement=_replacement,
)
