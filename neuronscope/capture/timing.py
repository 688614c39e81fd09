"""Unprofiled, interleaved timing of variants: where a comparison's times come from.

Each variant is timed in samples of ``calls`` back-to-back calls (enough calls that a sample
lasts at least :data:`MIN_SAMPLE_S`, so the clock's resolution and the per-sample overhead do
not matter; compare() gives all variants of about the same speed the same count), with the
device synchronised before the clock is read at either end. Variants take turns, round after
round, each pass of a round in a freshly shuffled order, so a load swing on a shared machine
hits all of them alike, and no variant always runs right after the same neighbour. A round
times every variant :data:`SAMPLES_PER_ROUND` times and keeps each variant's quickest sample:
load only ever adds time, and on a busy 2-core machine a sample that waited for a core is
common (see the constant), while one of three rarely all did.

The blocks are run by the standard library's :class:`timeit.Timer` (which pauses the garbage
collector while it times, as torch.utils.benchmark does). torch.utils.benchmark's ``Timer``
is that same timeit loop plus a warm-up of ``max(number // 100, 2)`` calls before every
``timeit()``, which would triple the cost of the one-call samples of a slow variant, and a
``num_threads=1`` default that would time something other than the user's program;
``blocked_autorange`` times one statement for a stretch, the very thing interleaving avoids.
Its device synchronisation is done here by the backend (CUDA, Neuron) before each clock read.
"""

from __future__ import annotations

import math
import random
import time
import timeit
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_TIME_BUDGET_S",
    "MAX_ROUNDS",
    "MIN_ROUNDS",
    "MIN_SAMPLE_S",
    "SAMPLES_PER_ROUND",
    "BlockTimer",
    "Rounds",
    "block_timer",
    "budget_note",
    "calibrate",
    "calls_per_sample",
    "plan_rounds",
    "run_rounds",
]

#: Seconds the timing rounds may take by default (the ``time_budget`` option). The demo's
#: three RMSNorm variants (about 1 ms a call) run the most rounds in about 5 s on a quiet 2-core
#: machine; two variants of 0.5 s per call make rounds of 3 s, and stop at three budgets with
#: about 10 rounds (see MIN_ROUNDS, OVERRUN_FACTOR), which the comparison notes.
DEFAULT_TIME_BUDGET_S = 10.0
#: Rounds below which the intervals get too wide to tell 1.5x apart on a busy 2-core
#: machine: the rounds go on past the budget until there are this many (up to
#: :data:`OVERRUN_FACTOR` times the budget), and the comparison says when they did.
MIN_ROUNDS = 20
#: Rounds never run even when the budget allows: past this the intervals barely narrow.
MAX_ROUNDS = 100
#: Samples of each variant per round, the quickest kept. With three background processes
#: spinning on a 2-core machine (benchmarks/bench_compare.py ``--load 3``), the median sample
#: of a 1 ms call took 1-43 ms (torch's two threads per op waiting for a core) while the
#: quickest of the run stayed within 20 % of the quiet time; keeping one sample per round,
#: the 2x pair was called noise in 1 of 20 runs, the 1.5x pair in 3 of 20.
SAMPLES_PER_ROUND = 3
#: Rounds run whatever the budget: a median and an interval need a few values.
FLOOR_ROUNDS = 5
#: The rounds stop, at :data:`FLOOR_ROUNDS` or more, once they ran this many budgets.
OVERRUN_FACTOR = 3.0
#: A sample lasts at least this long: a clock read and a device sync cost microseconds.
MIN_SAMPLE_S = 0.002
#: Calls per sample never exceed this, however fast the variant (a power of two).
MAX_CALLS_PER_SAMPLE = 8192
#: Single timed calls per variant before the rounds, to choose its calls per sample.
CALIBRATION_CALLS = 3

#: Seconds taken by ``number`` calls of one variant, the device synchronised at both ends.
BlockTimer = Callable[[int], float]


def block_timer(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    synchronize: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> BlockTimer:
    """A :data:`BlockTimer` for ``fn(*args, **kwargs)``: ``clock`` (seconds) is read after
    ``synchronize()`` at the start and at the end of each block, so device work queued by the
    calls lands inside the block. Inject ``clock`` to test with an exact, fake time."""

    def synced_clock() -> float:
        synchronize()
        return clock()

    def call() -> None:
        fn(*args, **kwargs)

    return timeit.Timer(stmt=call, timer=synced_clock).timeit


def calls_per_sample(seconds_per_call: float, min_sample_s: float = MIN_SAMPLE_S) -> int:
    """How many calls make a sample last ``min_sample_s``: a power of two, at least 1, at
    most :data:`MAX_CALLS_PER_SAMPLE`.

    Powers of two, so that variants of about the same speed get the same count: under load a
    sample's per-call time depends on how many calls it holds (a stall spread over two calls
    counts half), and identical variants timed in samples of different sizes would differ."""
    if not seconds_per_call > 0 or not math.isfinite(seconds_per_call):
        return MAX_CALLS_PER_SAMPLE if seconds_per_call == 0 else 1
    wanted = min(MAX_CALLS_PER_SAMPLE, math.ceil(min_sample_s / seconds_per_call))
    return min(MAX_CALLS_PER_SAMPLE, 1 << max(0, math.ceil(math.log2(max(wanted, 1)))))


def calibrate(timer: BlockTimer, tries: int = CALIBRATION_CALLS, calls: int = 1) -> float:
    """Seconds per call: the quickest of ``tries`` timed blocks of ``calls`` calls (load only
    ever adds time, so the quickest is the least disturbed)."""
    return min(timer(calls) for _ in range(max(tries, 1))) / calls


def plan_rounds(round_s: float, budget_s: float, rounds: int | None = None) -> int:
    """Rounds expected to run when one round takes about ``round_s`` seconds: as many as fit
    in ``budget_s``, between :data:`MIN_ROUNDS` and :data:`MAX_ROUNDS`. ``rounds`` (the user's
    explicit choice) wins over the budget. An expectation for the user's information: the
    rounds themselves run until the budget is spent (:func:`run_rounds`), since a calibration
    taken while the machine was busy would plan too few."""
    if rounds is not None:
        return rounds
    fit = int(budget_s // round_s) if round_s > 0 else MAX_ROUNDS
    return max(MIN_ROUNDS, min(MAX_ROUNDS, fit))


def budget_note(done: int, seconds: float, budget_s: float) -> str | None:
    """What the user should know about how the rounds fitted the budget, or None."""
    if done < MIN_ROUNDS:
        return (
            f"only {done} timing rounds ran ({seconds:.1f} s, time_budget={budget_s:g} s): intervals from fewer "
            f"than {MIN_ROUNDS} rounds are wide; pass a larger time_budget (seconds) to tell small differences apart"
        )
    if seconds > 1.2 * budget_s:
        return f"the {done} timing rounds took {seconds:.1f} s, past time_budget={budget_s:g} s: {MIN_ROUNDS} rounds are the least run"
    return None


@dataclass
class Rounds:
    """Per-call times (microseconds) of each variant, one value per round (its quickest
    sample of the round), and how they were taken. ``per_call_us[label][i]`` comes from round
    ``i`` for every label."""

    calls: dict[str, int]
    per_call_us: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0
    #: Every sample's per-call time, the ones a round did not keep included (how busy the
    #: machine was shows in these).
    samples_us: dict[str, list[float]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return min((len(v) for v in self.per_call_us.values()), default=0)


def run_rounds(
    timers: Mapping[str, BlockTimer],
    calls: Mapping[str, int],
    rounds: int,
    budget_s: float | None = None,
    now: Callable[[], float] = time.monotonic,
    seed: int = 0,
    samples: int = SAMPLES_PER_ROUND,
) -> Rounds:
    """Run up to ``rounds`` interleaved rounds. A round makes ``samples`` passes over the
    variants, each pass in an order shuffled afresh (seeded), and keeps each variant's quickest
    sample of the round: a fixed order (A B C, B C A, ...) runs a variant after the
    same neighbour most of the time, and whatever that neighbour leaves behind (the
    allocator's state, the caches) then counts against it alone; with such a rotation,
    identical variants were called different in 3 of 28 runs of benchmarks/bench_compare.py
    (``--threads 1``), shuffled in 0 of 40. With ``budget_s``, stop at a
    round's end once ``now()`` says the budget is spent and :data:`MIN_ROUNDS` rounds ran, or
    once :data:`OVERRUN_FACTOR` budgets are spent and :data:`FLOOR_ROUNDS` ran: the machine got
    slower than the plan assumed. A variant's exception passes through unchanged."""
    labels = list(timers)
    out = Rounds(calls=dict(calls), per_call_us={label: [] for label in labels}, samples_us={label: [] for label in labels})
    rng = random.Random(seed)
    start = now()
    for r in range(rounds):
        quickest = dict.fromkeys(labels, math.inf)
        for _ in range(max(samples, 1)):
            order = labels[:]
            rng.shuffle(order)
            for label in order:
                n = calls[label]
                us = timers[label](n) / n * 1e6
                out.samples_us[label].append(us)
                quickest[label] = min(quickest[label], us)
        for label in labels:
            out.per_call_us[label].append(quickest[label])
        if budget_s is not None:
            spent = now() - start
            if (spent > budget_s and r + 1 >= MIN_ROUNDS) or (spent > OVERRUN_FACTOR * budget_s and r + 1 >= FLOOR_ROUNDS):
                break
    out.seconds = now() - start
    return out
