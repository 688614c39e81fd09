"""Fusion candidates (placeholder; the detector lands with issue 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..result import Hint

if TYPE_CHECKING:
    from . import AnalysisContext


def fusion_hints(ctx: AnalysisContext) -> list[Hint]:
    return []
