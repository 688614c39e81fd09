"""GELU written out: the tanh formula (GPT-2's GELU-new) or the erf one (BERT).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from neuronscope.analysis.opgraph import OpNode
from neuronscope.analysis.patterns.base import Match, Pattern
from neuronscope.analysis.patterns.spelling import Spelling

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
        "cube_by_muls": lambda: torch.tanh(_C * (x + 0.044715 * x * x * x)),
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


_INNERS = ("cubic", "fast", "bloom", "square", "root_divided", "cube_by_muls", "erf_div", "erf_mul")
#: GELU's numbers are GELU's, as any spelling's: where the user's were recorded, ``x * 0.5 * (1
#: + erf(x / 2))`` or ``tanh(0.5 * (x + 0.044715 * x**3))`` is another function.
SPELLINGS = (Spelling(_spelling, {"half": ("0.5 * x", "x * 0.5", "last"), "inner": _INNERS}),)


def _suggest(m: Match, backend: str) -> str:
    if m.params.get("approximate") == "tanh":
        return 'use torch.nn.functional.gelu(x, approximate="tanh")'
    return "use torch.nn.functional.gelu(x)"


def _params(choice: Mapping[str, Any], nodes: list[OpNode]) -> dict[str, Any]:
    return {"approximate": "tanh" if any(n.op == "tanh" for n in nodes) else "none"}


GELU = Pattern(
    name="gelu",
    spellings=SPELLINGS,
    suggest=_suggest,
    replacement=_replacement,
    params=_params,
)
