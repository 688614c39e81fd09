"""SwiGLU and GeGLU: ``silu(gate) * up``, ``gate * sigmoid(gate) * up``, ``gelu(gate) * up``, through an activation module too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.spelling import Spelling

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


def _params(choice: Mapping[str, Any], nodes: list[OpNode]) -> dict[str, Any]:
    """Which activation: ``gate * sigmoid(gate)`` is SiLU written out."""
    return {"activation": "gelu" if choice["activation"] == "gelu" else "silu"}


def _suggest(m: Match, backend: str) -> str:
    act = m.params.get("activation", "silu")
    name = "GeGLU" if act == "gelu" else "SwiGLU"
    kernel = f"NKI's fused {name} kernel" if backend == "neuron" else f"a fused {name} kernel"
    # Not only an MLP's: Mamba gates its scan's output with ``y * silu(z)``.
    return f"torch.compile the code that computes {act}(gate) * up (a gated MLP, or any other gate), or {kernel}"


SILU_MUL = Pattern(
    name="silu_mul",
    params=_params,
    spellings=SPELLINGS,
    suggest=_suggest,
    replacement=lambda t, **_: None,  # torch has no eager fused GLU: torch.compile is the fix
    eager_replacement=False,
)
