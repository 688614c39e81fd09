"""SwiGLU and GeGLU: ``silu(gate) * up``, ``gate * sigmoid(gate) * up``, ``gelu(gate) * up``, through an activation module too.
"""

from __future__ import annotations

from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.matcher import graph_matcher
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
    match=graph_matcher("silu_mul", SPELLINGS, lambda choice, nodes: {"activation": "gelu" if choice["activation"] == "gelu" else "silu"}),
    spellings=SPELLINGS,
    suggest=_suggest,
    verify=builder(SPELLINGS, lambda t, **_: None),  # torch has no eager fused GLU: torch.compile is the fix
    eager_replacement=False,
    sequence_params=_sequence_params,
)
