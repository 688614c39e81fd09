"""LayerNorm written out: ``(x - mean) / sqrt(var + eps) * weight + bias``, from ``mean``/``var``,
``var_mean``, ``std`` or the centred square.
"""

from __future__ import annotations

from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import Match, Pattern, dims
from neuronscope.analysis.patterns.norm import UNKNOWN_BIAS, UNKNOWN_EPS, UNKNOWN_WEIGHT, match_norm, param_text
from neuronscope.capture import idioms

__all__ = ["LAYER_NORM"]

#: Epsilon of the rebuilt chains in hint.verify().



def _match(g: OpGraph, n: OpNode) -> Match | None:
    m = match_norm(g, n)
    return m if m is not None and m.pattern == "layer_norm" else None


def _suggest(m: Match, backend: str) -> str:
    eps = m.params.get("eps")
    eps_text = f"eps={eps!r}" if eps is not None else f"eps={UNKNOWN_EPS}"
    weight = param_text(m.params.get("weight"), "weight", UNKNOWN_WEIGHT)
    bias = param_text(m.params.get("bias"), "bias", UNKNOWN_BIAS)
    call = f"use torch.nn.functional.layer_norm(x, ({dims(m)},), {weight}, {bias}, {eps_text})"
    return call + _differences(m)


def _differences(m: Match) -> str:
    """What layer_norm computes differently from the user's code: said, not hidden, since the
    user's model was trained with their formula."""
    notes = []
    c = m.params.get("correction")
    if c:
        c_text = f"{c:g}"
        n = m.x.sizes[-1] if m.x is not None and m.x.sizes else None
        size = f" (x{(n / (n - c)) ** 0.5:.4f} at {n})" if n and n > c else ""
        notes.append(
            f"your code divides by the spread with N - {c_text} (var/std default: N - 1); layer_norm's is biased (N): "
            f"outputs differ by the factor sqrt(N/(N-{c_text})){size}"
        )
    if m.params.get("eps_outside_root"):
        notes.append("your eps is added outside the root (std + eps); layer_norm adds it inside, sqrt(var + eps)")
    return "; not identical: " + "; ".join(notes) if notes else ""


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    """What a trace's shapes show of the norm: a weight is a multiply, a bias an add, with a
    1-D operand of the last dim's size, in whatever order the code applies them (the eps add
    works on the per-row statistic and a scalar). The eps is not in a trace (a 0-dim tensor to
    the profiler). Without shapes, both unknown (None)."""
    x = members[0].inputs[0].sizes if members[0].inputs else None
    if not x or len(x) < 2 or not all(n.inputs for n in members):
        # A 1-D x is itself of the last dim's size: its own ops would read as a weight and bias.
        return {"weight": None, "bias": None}
    row = (x[-1],)

    def applies_vector(op: str) -> bool:
        return any(n.op == op and any(t.sizes == row for t in n.inputs) for n in members)

    return {"weight": applies_vector("mul"), "bias": applies_vector("add")}


LAYER_NORM = Pattern(
    name="layer_norm",
    match=_match,
    sequence=(
        r"(?:mean (?:sub (?:pow|square|mul) mean (?:sub )?|var (?:sub )?|std (?:sub )?(?:mul )?)|var_mean (?:sub )?)"
    r"add (?:(?:sqrt|rsqrt) (?:sub )?(?:div |mul ))?(?:div )?(?:mul )?(?:add )?"
    ),
    sequence_shapes="row",
    fused_passes=2,
    suggest=_suggest,
    verify=idioms.layer_norm,
    sequence_params=_sequence_params,
)
