"""Hints: pure functions over what a capture measured.

Each rule takes an :class:`~neuronscope.analysis.context.AnalysisContext` and returns a list of :class:`~neuronscope.result.Hint`.
:func:`analyze` runs every rule; a rule that fails is logged and skipped, because analysis
must never cost the user the measurement it analyses.
"""

from __future__ import annotations

import logging

from neuronscope.analysis.compile import compile_hints
from neuronscope.analysis.context import AnalysisContext, Rule
from neuronscope.analysis.fusion import fusion_hints
from neuronscope.analysis.launch import launch_hints
from neuronscope.events import gc_paused
from neuronscope.result.hint import Hint

__all__ = ["RULES", "analyze"]

log = logging.getLogger("neuronscope")

RULES: tuple[Rule, ...] = (fusion_hints, compile_hints, launch_hints)


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
    hints.sort(key=lambda h: h.est_saving_us, reverse=True)
    return hints
