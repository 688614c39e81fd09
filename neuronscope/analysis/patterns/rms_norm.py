"""RMSNorm written out: ``x * rsqrt(mean(x**2) + eps) * weight``, in the spellings real
models use (casts to float32 and back, ``pow(2)`` or ``x*x``, ``1/sqrt``, Gemma's ``1 + weight``).
"""

from __future__ import annotations

from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import Match, Pattern, dims
from neuronscope.analysis.patterns.norm import UNKNOWN_EPS, UNKNOWN_WEIGHT, match_norm, param_text
from neuronscope.capture import idioms

__all__ = ["RMS_NORM"]

#: Epsilon of the rebuilt chains in hint.verify().



def _match(g: OpGraph, n: OpNode) -> Match | None:
    m = match_norm(g, n)
    return m if m is not None and m.pattern == "rms_norm" else None


def _suggest(m: Match, backend: str) -> str:
    eps = m.params.get("eps")
    eps_text = f"eps={eps!r}" if eps is not None else f"eps={UNKNOWN_EPS}"
    if m.params.get("weight_plus_one"):
        weight = "1 + weight"
    else:  # unknown from a trace without shapes: a trailing mul may be the weight
        weight = param_text(m.params.get("weight"), "weight", UNKNOWN_WEIGHT)
    return f"use torch.nn.functional.rms_norm(x, ({dims(m)},), {weight}, {eps_text}) (or torch.compile the module)"


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    """What a trace's op order and shapes show of the norm: a weight is a multiply after the
    normalising one with a 1-D operand of the last dim's size; the eps is not in a trace (a
    0-dim tensor to the profiler), so it stays unknown. Without shapes, a trailing multiply
    may or may not be a weight: unknown (None)."""
    roots = [i for i, n in enumerate(members) if n.op in ("rsqrt", "sqrt")]
    after = members[roots[0] + 1 :] if roots else []
    norming = next((i for i, n in enumerate(after) if n.op in ("mul", "div")), None)
    trailing = [n for n in after[norming + 1 :] if n.op == "mul"] if norming is not None else []
    if not trailing:
        return {"weight": False}
    x = members[0].inputs[0].sizes if members[0].inputs else None
    if not x or not all(n.inputs for n in trailing):
        return {"weight": None}
    return {"weight": any(len(t.sizes) == 1 and t.sizes[0] == x[-1] for n in trailing for t in n.inputs)}


RMS_NORM = Pattern(
    name="rms_norm",
    match=_match,
    sequence=(
        r"(?:to )?(?:pow|square|mul) mean add (?:rsqrt |sqrt (?:reciprocal )?(?:mul )?)(?:mul |div )(?:to )?(?:mul )?"
    ),
    sequence_shapes="row",
    fused_passes=2,
    suggest=_suggest,
    verify=idioms.rms_norm,
    sequence_params=_sequence_params,
)
