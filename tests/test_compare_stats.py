"""The statistics and the interleaved timing behind compare(), on synthetic timings: exact fake
clocks and injected timing functions, so that no assertion depends on this machine's speed."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from neuronscope import compare
from neuronscope.capture.timing import (
    FLOOR_ROUNDS,
    MAX_CALLS_PER_SAMPLE,
    MAX_ROUNDS,
    MIN_ROUNDS,
    SAMPLES_PER_ROUND,
    block_timer,
    budget_note,
    calibrate,
    calls_per_sample,
    plan_rounds,
    run_rounds,
)
from neuronscope.compare import intervals as stats
from neuronscope.units import fmt_us


# ---- stats -------------------------------------------------------------------------------------
def test_paired_speedup_is_the_median_of_the_per_round_ratios() -> None:
    base = [10.0, 12.0, 30.0, 11.0, 10.0]
    other = [5.0, 6.0, 15.0, 5.5, 5.0]  # half the time in every round, load or not
    speedup, low, high = stats.paired_speedup(base, other)
    assert speedup == pytest.approx(2.0) and low == pytest.approx(2.0) and high == pytest.approx(2.0)
    assert stats.verdict(low, high) == "faster"


def test_pairing_cancels_a_load_that_hit_whole_rounds() -> None:
    rng = random.Random(1)
    load = [rng.choice([1.0, 1.0, 8.0, 30.0]) for _ in range(40)]  # some rounds 8-30x slower
    base = [100.0 * f * rng.uniform(0.95, 1.05) for f in load]
    same = [100.0 * f * rng.uniform(0.95, 1.05) for f in load]
    half = [50.0 * f * rng.uniform(0.95, 1.05) for f in load]
    _, low, high = stats.paired_speedup(base, same)
    assert low <= 1.0 <= high and stats.verdict(low, high) == "noise"
    assert high - low < 0.1  # the load itself does not widen the interval
    speedup, low, high = stats.paired_speedup(base, half)
    assert 1.9 < low <= speedup <= high < 2.1 and stats.verdict(low, high) == "faster"
    assert stats.verdict(*stats.paired_speedup(half, base)[1:]) == "slower"


def test_the_interval_is_reproducible_and_the_seed_is_used() -> None:
    rng = random.Random(7)
    base = [rng.lognormvariate(0, 0.3) for _ in range(25)]
    other = [rng.lognormvariate(0, 0.3) for _ in range(25)]
    assert stats.paired_speedup(base, other, seed=3) == stats.paired_speedup(base, other, seed=3)
    # With few resamples the seed shows (with the default 2000 the order statistics the tails
    # land on rarely move).
    intervals = {stats.paired_speedup(base, other, resamples=20, seed=s)[1:] for s in range(5)}
    assert len(intervals) > 1
    narrow = stats.paired_speedup(base, other, confidence=0.5)
    wide = stats.paired_speedup(base, other, confidence=0.99)
    assert wide[1] <= narrow[1] <= narrow[2] <= wide[2]


@pytest.mark.parametrize(
    ("base", "other", "kwargs"),
    [([], [], {}), ([1.0], [1.0, 2.0], {}), ([1.0, 0.0], [1.0, 1.0], {}), ([1.0], [1.0], {"confidence": 1.0})],
)
def test_paired_speedup_refuses_what_it_cannot_use(base: list[float], other: list[float], kwargs: Any) -> None:
    with pytest.raises(ValueError):
        stats.paired_speedup(base, other, **kwargs)


def test_verdicts() -> None:
    assert stats.verdict(1.1, 1.3) == "faster"
    assert stats.verdict(0.5, 0.9) == "slower"
    assert stats.verdict(0.9, 1.1) == stats.verdict(1.0, 1.0) == "noise"
    assert set(stats.VERDICTS) == {"baseline", "faster", "slower", "noise", "unsure"}
    # Within 2 % of 1.0 is noise whatever the interval; past it the interval decides.
    assert stats.verdict(0.97, 0.9999, 0.99) == "noise"
    assert stats.verdict(1.001, 1.03, 1.015) == "noise"
    assert stats.verdict(1.01, 1.05, 1.03) == "faster"
    assert stats.verdict(0.9, 1.1, 1.05) == "noise"
    # Medians (baseline's, variant's) that point the other way make it noise.
    assert stats.verdict(1.1, 1.3, 1.2, medians=(10.0, 8.0)) == "faster"
    assert stats.verdict(1.1, 1.3, 1.2, medians=(10.0, 10.5)) == "noise"
    assert stats.verdict(1.1, 1.3, 1.2, medians=(10.0, 10.0)) == "noise"
    assert stats.verdict(0.5, 0.9, 0.7, medians=(10.0, 14.0)) == "slower"
    assert stats.verdict(0.5, 0.9, 0.7, medians=(10.0, 9.0)) == "noise"


def test_a_speedup_the_medians_contradict_is_not_called_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per round (us): 15 rounds where both are quick and the variant quicker, 35 where it is
    three times slower, 50 where the baseline is slow and the variant less so. Paired, the
    variant wins 65 rounds of 100 (1.25x, an interval above 1); yet its median time is the
    higher. The demo once showed such a row "1.75x [1.01-2.10]" beside a higher time."""
    import importlib

    from neuronscope.capture.timing import Rounds

    compare_module = importlib.import_module("neuronscope.compare.variants")  # the package's name is the function

    base = [1.0] * 15 + [2.0] * 35 + [10.0] * 50
    variant = [0.5] * 15 + [6.0] * 35 + [8.0] * 50
    rounds = Rounds(calls={"a": 1, "b": 1}, per_call_us={"a": base, "b": variant}, seconds=1.0)
    monkeypatch.setattr(compare_module, "_time_variants", lambda *args, **kwargs: rounds)
    cmp = compare({"a": lambda x: x, "b": lambda x: x}, torch.ones(2), export=False, enabled=False, rounds=100)
    row = cmp.rows[1]
    assert row.speedup == pytest.approx(1.25) and row.speedup_low is not None and row.speedup_low > 1.0
    assert row.time_us > cmp.rows[0].time_us
    assert row.verdict == "noise" and row.speedup_text(cmp.rows[0]).endswith("(noise)")
    (note,) = [n for n in cmp.notes if "is not called faster" in n]
    assert "it was faster in 65 of 100 rounds" in note  # the rounds it won, as the claim withheld says
    assert f"({fmt_us(7.0)}) is not below that of 'a' ({fmt_us(6.0)})" in note
    # Consistent medians: the same rounds with the variant's slow rounds quick give "faster".
    rounds.per_call_us["b"] = [0.5] * 15 + [1.5] * 35 + [8.0] * 50
    cmp = compare({"a": lambda x: x, "b": lambda x: x}, torch.ones(2), export=False, enabled=False, rounds=100)
    assert cmp.rows[1].verdict == "faster" and not any("is not called" in n for n in cmp.notes)


def test_half_iqr() -> None:
    assert stats.half_iqr([1.0]) is None
    assert stats.half_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(1.0)


def test_spread_note_flags_measurements_far_apart() -> None:
    # The decorated-function case of issue 16: captures of one 0.65 ms step.
    captures = [91_283.0, 64_202.0, 5_846.0, 83_192.0, 64_882.0]
    note = stats.spread_note(captures, "the 5 captures of step", fmt_us)
    assert note is not None and note.startswith("times far apart: the 5 captures of step range from 5.85 ms to 91.28 ms")
    assert "15.6x apart" in note and "not reliable" in note
    assert stats.spread_note([100.0, 120.0, 250.0], "x", fmt_us) is None  # within 3x
    assert stats.spread_note([100.0], "x", fmt_us) is None
    assert stats.spread_note([0.0, 5.0], "x", fmt_us) is None  # nothing measured to compare with
    assert stats.spread_note([100.0, 250.0], "x", fmt_us, factor=2.0) is not None


# ---- timing ------------------------------------------------------------------------------------
def test_rounds_run_each_variant_once_per_pass_in_a_shuffled_seeded_order() -> None:
    order: list[str] = []

    def timer(label: str) -> Callable[[int], float]:
        def run(n: int) -> float:
            order.append(label)
            return 0.001 * n

        return run

    timers = {k: timer(k) for k in "abc"}
    out = run_rounds(timers, {"a": 1, "b": 2, "c": 1}, 30, seed=5)
    assert len(order) == 30 * SAMPLES_PER_ROUND * 3
    passes = ["".join(order[i : i + 3]) for i in range(0, len(order), 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in passes)  # each variant once per pass
    # No variant always follows the same neighbour: every ordered pair occurs.
    pairs = {(x[i], x[i + 1]) for x in passes for i in range(2)}
    assert pairs == {(x, y) for x in "abc" for y in "abc" if x != y}
    assert out.count == 30 and out.per_call_us == {k: [1000.0] * 30 for k in "abc"}
    assert out.calls == {"a": 1, "b": 2, "c": 1}
    first = order[:]
    order.clear()
    run_rounds(timers, {"a": 1, "b": 2, "c": 1}, 30, seed=5)
    assert order == first  # seeded: the same order again
    order.clear()
    run_rounds(timers, {"a": 1, "b": 2, "c": 1}, 30, seed=6)
    assert order != first


def test_a_round_keeps_each_variants_quickest_sample() -> None:
    """Load only adds time: of a round's samples, the quickest is the least disturbed one."""
    seconds = {"a": iter([0.005, 0.001, 0.009, 0.002, 0.002, 0.002]), "b": iter([0.004, 0.006, 0.003, 0.008, 0.002, 0.030])}

    def timer(label: str) -> Callable[[int], float]:
        return lambda n: next(seconds[label]) * n

    out = run_rounds({k: timer(k) for k in "ab"}, {"a": 2, "b": 1}, 2, samples=3)
    assert out.per_call_us == {"a": [1000.0, 2000.0], "b": [3000.0, 2000.0]}


def test_rounds_stop_at_the_budget_once_enough_ran() -> None:
    clock = [0.0]

    def sampler(seconds: float) -> Callable[[int], float]:
        def run(n: int) -> float:
            clock[0] += seconds  # the (fake) time one sample takes
            return seconds

        return run

    # Rounds of 3 passes x 2 variants x 1/48 s = 1/8 s: the 2 s budget is spent after 16 rounds.
    fast = sampler(1 / 48)
    out = run_rounds({"a": fast, "b": fast}, {"a": 1, "b": 1}, 500, budget_s=2.0, now=lambda: clock[0])
    assert out.count == MIN_ROUNDS and out.seconds == pytest.approx(2.5)  # MIN_ROUNDS is the least run
    assert budget_note(out.count, out.seconds, 2.0) is not None  # 25 % past the budget: said
    clock[0] = 0.0
    out = run_rounds({"a": fast, "b": fast}, {"a": 1, "b": 1}, 500, budget_s=5.0, now=lambda: clock[0])
    assert out.count == 41 and budget_note(out.count, out.seconds, 5.0) is None  # ran until the budget was spent
    clock[0] = 0.0
    slow = sampler(1 / 3)  # rounds of 2 s against a 1 s budget: three budgets spent by round 2
    out = run_rounds({"a": slow, "b": slow}, {"a": 1, "b": 1}, 500, budget_s=1.0, now=lambda: clock[0])
    assert out.count == FLOOR_ROUNDS
    assert "only 5 timing rounds ran" in (budget_note(out.count, out.seconds, 1.0) or "")
    assert budget_note(MIN_ROUNDS, 9.0, 10.0) is None
    clock[0] = 0.0
    out = run_rounds({"a": fast}, {"a": 1}, 7, budget_s=None, now=lambda: clock[0])
    assert out.count == 7


def test_planned_rounds_follow_the_budget() -> None:
    assert plan_rounds(0.125, 10.0) == 80
    assert plan_rounds(0.001, 10.0) == MAX_ROUNDS
    assert plan_rounds(5.0, 10.0) == MIN_ROUNDS
    assert plan_rounds(5.0, 10.0, rounds=3) == 3
    assert plan_rounds(0.0, 10.0) == MAX_ROUNDS


def test_calls_per_sample() -> None:
    assert calls_per_sample(0.010) == 1
    assert calls_per_sample(0.0001) == 32  # 20 wanted, rounded up to a power of two
    # About the same speed, the same count: 1.1 and 1.5 ms (1.82 and 1.33 calls wanted) both give 2.
    assert calls_per_sample(0.0011) == calls_per_sample(0.0015) == 2
    assert calls_per_sample(0.0) == MAX_CALLS_PER_SAMPLE
    assert calls_per_sample(1e-12) == MAX_CALLS_PER_SAMPLE
    assert calls_per_sample(float("nan")) == 1


def test_calibration_takes_the_least_disturbed_call() -> None:
    seen = iter([0.050, 0.001, 0.004])
    assert calibrate(lambda n: next(seen)) == 0.001


def test_the_device_is_synchronised_before_every_clock_read() -> None:
    events: list[str] = []
    clock = [0.0]

    def fn(x: int, y: int = 0) -> None:
        events.append(f"call {x} {y}")
        clock[0] += 0.5

    def sync() -> None:
        events.append("sync")

    def read() -> float:
        events.append("clock")
        return clock[0]

    seconds = block_timer(fn, (1,), {"y": 2}, sync, read)(3)
    assert seconds == pytest.approx(1.5)
    assert events == ["sync", "clock", "call 1 2", "call 1 2", "call 1 2", "sync", "clock"]


# ---- compare() end to end with an injected clock -------------------------------------------------
class FakeMachine:
    """A clock that the variants advance: ``cost`` seconds per call, times a load factor that
    changes from round to round, as a shared machine's does."""

    def __init__(self, load: Callable[[float], float] = lambda now: 1.0) -> None:
        self.now = 0.0
        self.load = load

    def variant(self, cost: float) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(x: torch.Tensor) -> torch.Tensor:
            self.now += cost * self.load(self.now)
            return x

        return run

    def clock(self) -> float:
        return self.now


def test_compare_with_an_exact_clock_finds_2x_and_calls_identical_noise(caplog: pytest.LogCaptureFixture) -> None:
    m = FakeMachine()
    x = torch.ones(2)
    with caplog.at_level(logging.INFO, logger="neuronscope"):
        cmp = compare(
            {"base": m.variant(0.004), "same": m.variant(0.004), "double": m.variant(0.008), "half": m.variant(0.002)},
            x, timer=m.clock, export=False, enabled=False, time_budget=2.0,
        )
    # Said before the rounds: they run until the budget is spent; the calibration's plan is a guess.
    assert f"in interleaved rounds of unprofiled calls until time_budget=2 s is spent ({MIN_ROUNDS} to {MAX_ROUNDS} rounds; about 37 fit" in caplog.text
    rows = {r.label: r for r in cmp.rows}
    assert rows["base"].verdict == "baseline" and rows["base"].time_us == pytest.approx(4000.0)
    assert rows["same"].verdict == "noise" and rows["same"].speedup == pytest.approx(1.0)
    assert (rows["same"].speedup_low, rows["same"].speedup_high) == (pytest.approx(1.0), pytest.approx(1.0))
    assert rows["double"].verdict == "slower" and rows["double"].speedup == pytest.approx(0.5)
    assert rows["half"].verdict == "faster" and rows["half"].speedup == pytest.approx(2.0)
    assert rows["half"].time_us == pytest.approx(2000.0)
    assert rows["half"].speedup_text(rows["base"]) == "2.00x [2.00-2.00]"
    assert rows["same"].speedup_text(rows["base"]) == "1.00x [1.00-1.00] (noise)"
    # The budget is fake seconds here too: a round's three passes cost 3 x 18 ms of fake time,
    # and the rounds stop at the end of the first round past the budget.
    assert cmp.timing["rounds"] == rows["base"].repeats == int(2.0 // 0.054) + 1
    assert cmp.timing["samples_per_round"] == SAMPLES_PER_ROUND
    assert f"interleaved rounds of unprofiled calls, each round's quickest of {SAMPLES_PER_ROUND} samples" in cmp.table()
    cmp = replace(cmp, timing={k: v for k, v in cmp.timing.items() if k != "samples_per_round"})  # saved before
    assert "rounds of unprofiled calls (Spread" in cmp.table()
    assert cmp.timing["confidence"] == stats.DEFAULT_CONFIDENCE and cmp.timing["seed"] == 0


def test_interleaving_keeps_a_drifting_machine_from_faking_a_difference() -> None:
    # The load doubles every 50 ms of (fake) time and falls back: run as blocks, one variant
    # would have caught the slow phase and the other not; interleaved, both see it alike.
    m = FakeMachine(load=lambda now: 3.0 if int(now / 0.05) % 2 else 1.0)
    x = torch.ones(2)
    cmp = compare(
        {"first": m.variant(0.004), "second": m.variant(0.004), "third": m.variant(0.004)},
        x, timer=m.clock, export=False, enabled=False, rounds=40,
    )
    assert [r.verdict for r in cmp.rows] == ["baseline", "noise", "noise"]
    for row in cmp.rows[1:]:
        assert row.speedup_low is not None and row.speedup_high is not None
        assert 0.5 < row.speedup_low <= 1.0 <= row.speedup_high < 2.0


def test_variants_of_about_the_same_speed_share_one_sample_size() -> None:
    # Under load a sample's per-call time depends on its size, so identical variants must be
    # timed in samples of the same size whatever the calibration measured.
    m = FakeMachine()
    cmp = compare(
        {"a": m.variant(0.001), "b": m.variant(0.0015), "quick": m.variant(0.00001)},
        torch.ones(2), timer=m.clock, export=False, enabled=False, rounds=3,
    )
    calls = cmp.timing["calls_per_round"]
    assert calls["a"] == calls["b"] == 2  # from the median variant: 2 ms / 1 ms
    assert calls["quick"] == 32  # 100x quicker: larger samples, at least 0.25 ms each
    assert [r.calls_per_round for r in cmp.rows] == [2, 2, 32]


def test_samples_far_from_their_median_are_noted() -> None:
    # 12 calls warm up and calibrate; then, in the rounds, one sample 20x slower: a busy moment.
    spikes = iter([1.0] * 20 + [20.0] + [1.0] * 1000)

    m = FakeMachine()
    m.load = lambda now: next(spikes)
    cmp = compare({"a": m.variant(0.004), "b": m.variant(0.004)}, torch.ones(2), timer=m.clock, export=False, enabled=False, rounds=10)
    (note,) = [n for n in cmp.notes if "timed samples took over 3x" in n]
    assert note.startswith(f"1 of {10 * SAMPLES_PER_ROUND * 2} timed samples took over 3x their variant's median: the machine was busy")
    assert [r.time_us for r in cmp.rows] == [pytest.approx(4000.0)] * 2  # the round kept a quicker sample
    assert ("torch.set_num_threads(1)" in note) == (torch.get_num_threads() > 1)
    quiet = FakeMachine()
    cmp = compare({"a": quiet.variant(0.004)}, torch.ones(2), timer=quiet.clock, export=False, enabled=False, rounds=5)
    assert not any("timed samples" in n for n in cmp.notes)
