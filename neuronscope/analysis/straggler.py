"""The straggler rule: a rank of a multi-process run much slower than the others.

In data-parallel work every rank waits for the slowest at each collective, so one slow rank
costs all of them. The rule reads the per-rank records rank 0 gathers (a live run) or finds
in a run's sibling directories (a trace), so it takes those records, not a capture.
"""

from __future__ import annotations

import statistics
from typing import Any

from neuronscope.result.hint import Hint
from neuronscope.result.types import ProfileResult
from neuronscope.units import fmt_us

__all__ = ["STRAGGLER_MIN_US", "STRAGGLER_THRESHOLD", "rank_entry", "straggler_hints"]

#: A rank is a straggler when its wall time exceeds the median of all ranks by more than this
#: fraction. In data-parallel work every rank waits for the slowest at each collective, so a
#: rank 20% over the median costs every other rank that much; run-to-run noise of one step on
#: one device is a few percent, well under it.
STRAGGLER_THRESHOLD = 0.20
#: ...and by more than this many microseconds: on captures of a few milliseconds, scheduling
#: jitter alone can be 20%, and a millisecond is not worth a hint.
STRAGGLER_MIN_US = 1_000.0


def straggler_hints(entries: list[dict[str, Any]]) -> list[Hint]:
    """``straggler`` hints: ranks whose wall time exceeds the median of all reporting ranks by
    more than :data:`STRAGGLER_THRESHOLD` and :data:`STRAGGLER_MIN_US`. Needs two ranks."""
    walls = [(int(e["rank"]), float(e["wall_time_us"])) for e in entries if e.get("wall_time_us") is not None]
    if len(walls) < 2:
        return []
    median = statistics.median(w for _, w in walls)
    by_rank = {int(e["rank"]): e for e in entries}
    hints: list[Hint] = []
    for rank, wall in walls:
        excess = wall - median
        if median <= 0 or excess <= STRAGGLER_MIN_US or wall <= median * (1.0 + STRAGGLER_THRESHOLD):
            continue
        e = by_rank[rank]
        top = e.get("top_op")
        top_us = e.get("top_op_us")
        # The hint is the rank's wall time, not an op's: no ops named as costing it. Its
        # busiest op, with that op's own time, is a place to start looking.
        busiest = f"; its busiest op is {top} ({fmt_us(top_us)})" if top and top_us is not None else ""
        hints.append(
            Hint(
                kind="straggler",
                pattern="slow_rank",
                ops=[],
                calls=1,
                time_us=wall,
                est_saving_us=excess,
                suggestion=(
                    f"rank {rank} took {wall / median:.2f}x the median wall time of {len(walls)} ranks; the others "
                    f"wait for it at every collective: look for uneven data or sequence lengths, a busier host "
                    f"or device, or extra work on that rank{busiest}; open its run ({e.get('run_dir') or 'not exported'})"
                ),
                location=None,
                confidence="measured",
                details={
                    "rank": rank,
                    "wall_time_us": wall,
                    "median_wall_time_us": median,
                    "ratio": wall / median,
                    "threshold": STRAGGLER_THRESHOLD,
                    "total_op_us": e.get("total_op_us"),
                    "top_op": top,
                    "top_op_us": top_us,
                    "run_dir": e.get("run_dir"),
                },
            )
        )
    return hints


def rank_entry(rank: int, result: ProfileResult, run_dir: Any = None) -> dict[str, Any]:
    """One row of ``ranks``: what rank 0 shows for a rank, and what this rule reads."""
    top = result.top_op
    return {
        "rank": rank,
        "wall_time_us": result.wall_time_us,
        "total_op_us": result.total_op_us,
        "top_op": top.name if top is not None else None,
        "top_op_us": top.time_us if top is not None else None,
        "run_dir": None if run_dir is None else str(run_dir),
        "status": result.status,
    }

