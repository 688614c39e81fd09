"""The interval maths behind a comparison's verdicts, on plain lists of numbers.

A speedup is the median, over the timing rounds, of the baseline's time over the variant's
time in the same round; its interval is a seeded percentile bootstrap of that median, so the
same timings always give the same interval. "noise" is a speedup whose interval holds 1.0, that
is within 2 % of 1.0, or whose direction the two median times contradict; "unsure" one whose
interval is too wide to act on (see :func:`verdict`).

This module imports nothing from neuronscope, so any stage may use it (the capture stage's
sibling-capture check included).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "FAR_FACTOR",
    "NOISE_BAND",
    "UNSURE_WIDTH",
    "VERDICTS",
    "half_iqr",
    "paired_speedup",
    "spread_note",
    "verdict",
]

#: Two-sided confidence of a speedup's interval. 99 %, not 95 %: a percentile bootstrap of a
#: median over a few dozen rounds is a little too narrow; on a heavily loaded 2-core machine
#: (benchmarks/bench_compare.py, same timings) identical variants were called different in
#: 2 of 31 comparisons at 95 % and in 1 of 31 at 99 %.
DEFAULT_CONFIDENCE = 0.99
#: Bootstrap resamples: enough that the 0.5 % tails hold ten resamples each, cheap enough
#: (about 0.1 s per variant for 100 rounds) to be negligible next to the measurement.
DEFAULT_RESAMPLES = 2000
#: Values that differ by more than this factor (largest over smallest) were not taken under
#: the same conditions: on a shared machine, some of them ran while the CPU was busy.
FAR_FACTOR = 3.0
#: A speedup within this of 1.0 is noise whatever its interval: with a few hundred rounds the
#: interval of identical variants can exclude 1.0 by a hair ("0.99x [0.97-1.00]", 1 of 21 runs
#: of benchmarks/bench_compare.py), and a 2 % difference does not repeat from run to run on a
#: shared machine.
NOISE_BAND = 0.02
#: An interval whose ends are further apart than this factor (high over low) says nothing
#: about the speedup, whatever side of 1.0 it sits: it cannot tell a 2x difference from none,
#: and the verdict is ``unsure`` (the machine was too busy). The demo's busy run called
#: ``1.07x [1.02-15.81]`` faster. benchmarks/bench_compare.py at load average 7.7-13 (40 runs,
#: benchmarks/README.md, "compare verdicts"): intervals of a median width of 85x to 160x, and
#: the old rule called identical variants different in 2 of 40 runs and found the true 2x
#: pair in 16 of 40, with intervals such as [0.00-0.90]; with this rule 1 of 40 identical
#: pairs is still called different ([0.65-1.00]) and the rest say unsure.
UNSURE_WIDTH = 2.0
#: A row's verdict: the first variant is the ``baseline``; the others are ``faster``,
#: ``slower``, ``noise`` (the interval holds 1.0: no difference told apart) or ``unsure``
#: (the interval is too wide to act on: the machine was too busy; see :data:`UNSURE_WIDTH`).
VERDICTS = ("baseline", "faster", "slower", "noise", "unsure")


def paired_speedup(
    base: Sequence[float],
    other: Sequence[float],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The speedup of ``other`` over ``base`` (both times, ``base[i]`` and ``other[i]`` from
    round ``i``) and its ``confidence`` interval: ``(speedup, low, high)``.

    The speedup is the median over the rounds of ``base[i] / other[i]``: the two samples of a
    round were taken moments apart, so a load burst that slowed one mostly slowed the other,
    and their ratio keeps what the variants differ by. The interval is a percentile bootstrap
    of that median (the per-round ratios resampled with replacement, ``seed`` fixed so that the
    same timings always give the same interval). Raises ``ValueError`` for lists of
    different lengths, an empty list, a time that is not positive, or a confidence outside
    (0, 1).
    """
    n = len(base)
    if n == 0 or n != len(other):
        raise ValueError(f"need two non-empty lists of the same length (one value per round), got {n} and {len(other)}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if min(base) <= 0 or min(other) <= 0:
        raise ValueError("times must be positive")
    ratios = [b / o for b, o in zip(base, other)]
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(max(resamples, 1)))
    tail = (1.0 - confidence) / 2
    low = medians[max(0, math.floor(tail * len(medians)))]
    high = medians[min(len(medians) - 1, math.ceil((1.0 - tail) * len(medians)) - 1)]
    return statistics.median(ratios), low, high


def verdict(
    low: float, high: float, speedup: float | None = None, band: float = NOISE_BAND, medians: tuple[float, float] | None = None
) -> str:
    """``"noise"`` when the interval ``[low, high]`` of a speedup holds 1.0, or when the
    ``speedup`` itself is within ``band`` of 1.0; else ``"faster"`` (all of the interval above
    1) or ``"slower"`` (all of it below 1).

    ``medians`` (the baseline's median time, the variant's): a direction they contradict is
    ``"noise"`` too. Faster in most rounds paired, yet with the higher median time, a variant
    was slower in many rounds, and its times split in two (torch.compile's guards failing on
    some calls, a cache that fits on some): which it is depends on the round, not the code.

    ``"unsure"`` comes first: an interval whose ends are more than :data:`UNSURE_WIDTH` apart
    (``[1.02-15.81]``) was measured on a machine too busy to say anything, noise included."""
    if low > 0 and high / low > UNSURE_WIDTH:
        return "unsure"
    if speedup is not None and abs(speedup - 1.0) < band:
        return "noise"
    if low > 1.0:
        return "faster" if medians is None or medians[1] < medians[0] else "noise"
    if high < 1.0:
        return "slower" if medians is None or medians[1] > medians[0] else "noise"
    return "noise"


def half_iqr(values: Sequence[float]) -> float | None:
    """Half the interquartile range: the ``±`` shown beside a median. Robust, as the median
    is, to the one sample the scheduler made slow (torch.utils.benchmark reports the IQR too).
    None for fewer than two values."""
    if len(values) < 2:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / 2


def spread_note(
    values: Sequence[float], what: str, fmt_us: Callable[[float], str], factor: float = FAR_FACTOR
) -> str | None:
    """A caveat when measurements of the same thing (in microseconds) differ by more than
    ``factor``, largest over smallest: the machine was busy during some of them, or the code's
    own time varies from call to call (a variant that sleeps every other call was once said to
    have been measured under load). ``what`` names them (``"the 5 captures of
    train_step"``); ``fmt_us`` formats a time (this module imports nothing from neuronscope).
    None when they agree, or when there are fewer than two positive values."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if len(positive) < 2:
        return None
    low, high = min(positive), max(positive)
    if high <= factor * low:
        return None
    return (
        f"times far apart: {what} range from {fmt_us(low)} to {fmt_us(high)} ({high / low:.1f}x apart, "
        f"median {fmt_us(statistics.median(positive))}); the machine was busy during some of them, or the "
        "code's own time varies from call to call (a cache, a data-dependent branch, a sleep), so their "
        "times, and savings computed from them, are not reliable: measure again on a quiet machine"
    )

