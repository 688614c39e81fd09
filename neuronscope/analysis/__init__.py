"""Hints: pure functions over what a capture measured.

Each rule takes an :class:`AnalysisContext` and returns a list of :class:`~neuronscope.result.Hint`.
:func:`analyze` runs every rule; a rule that fails is logged and skipped, because analysis
must never cost the user the measurement it analyses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from ..events import EventTable, Summary
from ..result import Hint

__all__ = ["AnalysisContext", "Rule", "RULES", "analyze"]

log = logging.getLogger("neuronscope")


@dataclass
class AnalysisContext:
    """What the rules may look at.

    ``profiler`` is the finished live ``torch.profiler.profile`` object when there is one (its
    event tree holds tensor identities and Python call sites); it is None for trace files,
    whose rules work from op order and shapes alone. ``extra`` carries facts gathered around
    the capture (compile counters before and after, for instance).
    """

    table: EventTable
    summary: Summary
    backend: str
    profiler: Any | None = None
    source: str = "live"
    extra: dict[str, Any] = field(default_factory=dict)


Rule = Callable[[AnalysisContext], list[Hint]]


def _rules() -> list[Rule]:
    rules: list[Rule] = []
    try:
        from .fusion import fusion_hints

        rules.append(fusion_hints)
    except ImportError:  # pragma: no cover - the module ships with the package
        pass
    try:
        from .compile import compile_hints

        rules.append(compile_hints)
    except ImportError:  # pragma: no cover - the module ships with the package
        pass
    return rules


RULES: list[Rule] = _rules()


def _rank(h: Hint) -> float:
    return h.est_saving_us


def analyze(ctx: AnalysisContext) -> list[Hint]:
    """Run every rule and return the hints, the largest estimated saving first."""
    hints: list[Hint] = []
    for rule in RULES:
        try:
            hints.extend(rule(ctx))
        except Exception as exc:  # a broken rule must not lose the capture
            log.warning("neuronscope: hint rule %s failed: %s: %s", getattr(rule, "__name__", rule), type(exc).__name__, exc)
    hints.sort(key=_rank, reverse=True)
    return hints
