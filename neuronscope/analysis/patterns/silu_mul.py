"""SwiGLU and GeGLU: ``silu(gate) * up``, ``gate * sigmoid(gate) * up``, ``gelu(gate) * up``, through an activation module too.
"""

from __future__ import annotations

from typing import Any

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.spelling import Spelling, builder

__all__ = ["SILU_MUL"]


def _spelling(t: Any, activation: str, up: str | None) -> Any:
    """The GLU product: ``silu(gate) * up`` (SwiGLU), ``gate * sigmoid(gate) * up``,
    ``gelu(gate) * up`` (GeGLU); the up projection made before it, or between the activation
    and the product (``act(gate_proj(x)) * up_proj(x)``: a trace shows it in between)."""
    import torch

    F = torch.nn.functional
    gate = t.x
    act = {"silu": lambda: F.silu(gate), "gelu": lambda: F.gelu(gate), "sigmoid": lambda: gate * torch.sigmoid(gate)}[activation]()
    other = {None: lambda: t.up, "linear": lambda: F.linear(t.up, t.proj), "matmul": lambda: t.up @ t.proj}[up]()
    return act * other


SPELLINGS = (Spelling(_spelling, {"activation": ("silu", "gelu", "sigmoid"), "up": (None, "linear", "matmul")}, side=("up", "proj")),)


def match_silu_mul(g: OpGraph, n: OpNode) -> Match | None:
    """``silu(gate) * up``, or ``gate * sigmoid(gate) * up`` (SwiGLU)."""
    if n.op != "mul" or len(n.inputs) != 2 or len(n.big_inputs()) != 2:
        return None
    for sk in (0, 1):
        s = g.producer(n, sk)
        if s is None:
            continue
        found: list[OpNode] = []
        gate: tuple[int, int] | None = None
        if s.op in ("silu", "gelu") and s.inputs:  # SwiGLU, or GeGLU (Gemma's gelu(gate) * up)
            found, gate = [s], s.value(0)
        elif s.op == "mul" and len(s.inputs) == 2:
            for gk in (0, 1):
                sig = g.producer(s, gk)
                if sig is not None and sig.op == "sigmoid" and sig.inputs and sig.value(0) == s.value(1 - gk):
                    found, gate = [sig, s], s.value(1 - gk)
                    break
        if gate is None:
            continue
        bk = 1 - sk
        if n.inputs[bk].sizes != n.inputs[sk].sizes:
            continue
        gate_in = found[0].inputs[0]
        if n.value(bk) == gate and n.inputs[bk].impl == gate_in.impl:
            continue  # x * silu(x): no second projection
        activation = "gelu" if found[0].op == "gelu" else "silu"
        return Match("silu_mul", sorted([*found, n], key=lambda m: m.index), n.inputs[sk], {"activation": activation})
    return None



def _suggest(m: Match, backend: str) -> str:
    act = m.params.get("activation", "silu")
    name = "GeGLU" if act == "gelu" else "SwiGLU"
    kernel = f"NKI's fused {name} kernel" if backend == "neuron" else f"a fused {name} kernel"
    return f"torch.compile the MLP block ({act}(gate) * up), or {kernel}"


def _sequence_params(members: list[OpNode]) -> dict[str, Any]:
    """A trace's GLU: which activation, from its op names."""
    return {"activation": "gelu" if members[0].op == "gelu" else "silu"}


SILU_MUL = Pattern(
    name="silu_mul",
    match=match_silu_mul,
    spellings=SPELLINGS,
    suggest=_suggest,
    verify=builder(SPELLINGS, lambda t, **_: None),  # torch has no eager fused GLU: torch.compile is the fix
    eager_replacement=False,
    sequence_params=_sequence_params,
)
