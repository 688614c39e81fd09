"""Times you can trust, or are told not to: a capture's profiled wall time against an
unprofiled call of the same code.

A decorated function's (or a windowed region's) warm-up calls run without the capture's
profiler; the newest one that was not observed is the yardstick. Under the default window
(``warmup=1``) the one warm-up call is also the observed one (:mod:`~neuronscope.capture.observe`):
its own time (the observation's start and stop left out) is used, and since the observation's
profiler ran through it, the ratio it gives is a floor: the machine's load shows, the profiler's
own cost may not (``warmup=2`` times an unobserved call). Where the capture's wall time is :data:`DOMINATED` times
it or more, the profiler's own cost (a Python-heavy call pays it per op) or the machine's load
is most of what the capture shows: the result says so with the ratio, and the hints' stated
costs and savings are scaled down by that ratio and never exceed the unprofiled call's time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from neuronscope.units import fmt_us

__all__ = ["DOMINATED", "scale_hints", "wall_notes"]

#: Profiled wall over unprofiled time from which the note is written: at 2x, more than half
#: of what the capture shows is not the call's own time.
DOMINATED = 2.0


def ratio(wall_us: float, unprofiled_us: float) -> float | None:
    """Profiled over unprofiled time, or None where either is unusable."""
    if not unprofiled_us or unprofiled_us <= 0 or wall_us <= 0:
        return None
    return wall_us / unprofiled_us


def wall_notes(wall_us: float, unprofiled_us: float, observed: bool = False) -> list[str]:
    """The note where the profiled time is dominated by the profiler or the load (else none).
    ``observed``: the yardstick is the observed warm-up call (the default window's only one),
    which ran under the observation's profiler: the call's own time is at most that, so the
    ratio is a floor."""
    r = ratio(wall_us, unprofiled_us)
    if r is None or r < DOMINATED:
        return []
    call = (
        "the warm-up call, which neuronscope observed and so is no faster than the call unprofiled"
        if observed
        else "the unprofiled warm-up call"
    )
    floor = "at least " if observed else ""
    note = (
        f"profiled wall {fmt_us(wall_us)} is {floor}{r:.1f}x {call} ({fmt_us(unprofiled_us)}): "
        "the profiler's own cost or the machine's load is most of what these times show. Op times are "
        "inflated alike (their shares still hold); hint costs and savings are scaled to the unprofiled "
        "call. compare() or hint.verify() time the code without the profiler"
    )
    return [note]


def scale_hints(hints: Sequence[Any], wall_us: float, unprofiled_us: float) -> list[Any]:
    """``hints`` (new objects where changed) whose ``time_us`` and ``est_saving_us`` are scaled
    by unprofiled over profiled time where the profiler dominates, and capped at the
    unprofiled call's time in any case; ``details["unprofiled_scale"]`` keeps the factor."""
    r = ratio(wall_us, unprofiled_us)
    if r is None:
        return list(hints)
    factor = 1.0 / r if r >= DOMINATED else 1.0
    out = []
    for h in hints:
        cost = min(h.time_us * factor, unprofiled_us)
        saving = min(h.est_saving_us * factor, cost)
        if cost == h.time_us and saving == h.est_saving_us:
            out.append(h)
            continue
        details = {**h.details, "unprofiled_scale": factor, "profiled_time_us": h.time_us}
        out.append(replace(h, time_us=cost, est_saving_us=saving, details=details))
    return out
