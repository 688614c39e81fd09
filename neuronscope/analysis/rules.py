"""Hints: pure functions over what a capture measured.

Each rule takes an :class:`AnalysisContext` and returns a list of :class:`~neuronscope.result.Hint`.
:func:`analyze` runs every rule; a rule that fails is logged and skipped, because analysis
must never cost the user the measurement it analyses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neuronscope.events import EventTable, gc_paused
from neuronscope.result.hint import Hint
from neuronscope.result.summary import Summary

__all__ = ["RULES", "AnalysisContext", "Rule", "analyze"]

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


# The rule modules name AnalysisContext in annotations only, so they import after it.
from neuronscope.analysis.compile import compile_hints
from neuronscope.analysis.fusion import fusion_hints
from neuronscope.analysis.launch import launch_hints

RULES: tuple[Rule, ...] = (fusion_hints, compile_hints, launch_hints)


def _rank(h: Hint) -> float:
    return h.est_saving_us


def analyze(ctx: AnalysisContext) -> list[Hint]:
    """Run every rule and return the hints, the largest estimated saving first."""
    hints: list[Hint] = []
    # The rules build tens of thousands of small objects; with the collector running, each
    # full collection would also walk the capture's own (the table's shapes, the result).
    with gc_paused():
        for rule in RULES:
            try:
                hints.extend(rule(ctx))
            except Exception as exc:  # a broken rule must not lose the capture
                log.warning("neuronscope: hint rule %s failed: %s: %s", getattr(rule, "__name__", rule), type(exc).__name__, exc)
    hints.sort(key=_rank, reverse=True)
    return hints
