"""What the hint rules may look at: :class:`AnalysisContext`, and the shape of a rule.

Its own module so that the rules (:mod:`.fusion`, :mod:`.compile`, :mod:`.launch`) and the
module that runs them (:mod:`.rules`) both import it, and neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neuronscope.events import EventTable
from neuronscope.result.hint import Hint
from neuronscope.result.summary import Summary

__all__ = ["AnalysisContext", "Rule"]


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
