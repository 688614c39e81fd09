"""Softmax written out: ``exp(x - max(x)) / sum(exp(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.spelling import Spelling, named

__all__ = ["DIMS", "SOFTMAX", "UNKNOWN_DIM", "written_softmax"]


def written_softmax(t: Any, shift: str | None, form: str, dim: int = -1) -> Any:
    """Softmax written out over ``dim``: ``exp(x - max) / sum``, the shift by ``max`` / ``amax``
    or none, the exp once or twice (``exp(z) / exp(z).sum()``), or ``e * (1 / sum)``."""
    import torch

    x, dim = t.x, named("dim", dim)
    z = {None: lambda: x, "max": lambda: x - x.max(dim=dim, keepdim=True).values, "amax": lambda: x - x.amax(dim, keepdim=True)}[shift]()
    if form == "twice":
        return torch.exp(z) / torch.exp(z).sum(dim, keepdim=True)
    e = torch.exp(z)
    return e * e.sum(dim, keepdim=True).reciprocal() if form == "reciprocal" else e / e.sum(dim, keepdim=True)


def _replacement(t: Any, dim: int, **_: Any) -> tuple[str, Callable[[], Any]]:
    import torch

    return "torch.softmax", lambda: torch.softmax(t.x, dim)


#: The dims a written-out softmax is matched over, counted from the end (a sum over two is none).
DIMS = (-1, -2, -3)
SPELLINGS = (Spelling(written_softmax, {"shift": (None, "max", "amax"), "form": ("div", "twice", "reciprocal"), "dim": DIMS}),)


def _params(choice: Mapping[str, Any], nodes: list[OpNode]) -> dict[str, Any]:
    return {"dim": choice["dim"]}


#: What the suggestion says where the shapes were not recorded: the user knows the dim.
UNKNOWN_DIM = "<the dim your code sums over>"


def _suggest(m: Match, backend: str) -> str:
    dim = m.params.get("dim")
    return f"use torch.softmax(x, dim={UNKNOWN_DIM if dim is None else dim})"


SOFTMAX = Pattern(
    name="softmax",
    spellings=SPELLINGS,
    params=_params,
    fused_passes=2,
    suggest=_suggest,
    replacement=_replacement,
)
