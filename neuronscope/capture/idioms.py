"""Where ``hint.verify()`` finds how to rebuild an idiom: a registry of builders, by pattern.

Each idiom is declared once, in PyTorch, in its module of :mod:`neuronscope.analysis.patterns`
(its spellings and its replacement); the builder derived from that declaration registers here
when the patterns are imported, so that :mod:`neuronscope.capture.verify`, which a result's
``Hint`` reaches without importing a later stage, can time the chain and its replacement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["BUILDERS", "Builders", "Evidence", "register"]

#: What a builder returns: the hand-written chain, the replacement (or None) and the
#: replacement's name.
Builders = tuple[Callable[[], Any], "Callable[[], Any] | None", "str | None"]


class Evidence(Protocol):
    """What a builder reads of a hint (a :class:`~neuronscope.result.hint.Hint` is one),
    read-only."""

    @property
    def kind(self) -> str: ...
    @property
    def pattern(self) -> str: ...
    @property
    def ops(self) -> Sequence[str]: ...
    @property
    def calls(self) -> int: ...
    @property
    def est_saving_us(self) -> float: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


#: The builder of each pattern ``hint.verify()`` can rebuild, by pattern name, in the order
#: the patterns registered; filled once, when :mod:`neuronscope.analysis.patterns` is imported
#: (``import neuronscope`` imports it, through the drivers).
BUILDERS: dict[str, Callable[[Evidence, Any, Any], Builders]] = {}


def register(pattern: str, build: Callable[[Evidence, Any, Any], Builders]) -> None:
    """Make pattern ``pattern`` verifiable with ``build(hint, x, device)``."""
    BUILDERS[pattern] = build
