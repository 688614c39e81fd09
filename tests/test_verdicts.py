"""Verdicts that mean something (issue 36, item 5): an interval too wide to act on is
"unsure: the machine was too busy", and a diff of one capture a side says it cannot tell."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from neuronscope import compare
from neuronscope.cli import main as cli_main
from neuronscope.compare import intervals as stats
from neuronscope.export.run_dir import export_result
from neuronscope.report.diff import diff_results, render_diff
from neuronscope.result.comparison import ComparisonRow
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult


class BusyMachine:
    """A clock the variants advance: ``cost`` seconds per call, times a random load factor
    (1x to 40x, as a call that waited for a core on a machine shared by many)."""

    def __init__(self, seed: int = 0) -> None:
        self.now = 0.0
        self.rng = random.Random(seed)

    def variant(self, cost: float) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(x: torch.Tensor) -> torch.Tensor:
            self.now += cost * self.rng.choice([1.0, 1.0, 5.0, 15.0, 40.0])
            return x

        return run

    def clock(self) -> float:
        return self.now


def test_the_demos_busy_interval_is_unsure_not_faster() -> None:
    assert stats.verdict(1.02, 15.81, 1.07) == "unsure"
    assert stats.verdict(1.9, 2.1, 2.0) == "faster" and stats.verdict(0.97, 1.03, 1.0) == "noise"
    row = ComparisonRow("fused", 1.0, 1, None, 1.07, speedup_low=1.02, speedup_high=15.81, verdict="unsure")
    assert row.speedup_text(None) == "1.07x [1.02-15.81] (unsure: the machine was too busy)"
    assert row.within_noise(None)


def test_compare_on_a_busy_machine_says_unsure_with_the_figures() -> None:
    m = BusyMachine()
    cmp = compare(
        {"a": m.variant(0.004), "b": m.variant(0.0038)},
        torch.ones(2), timer=m.clock, export=False, enabled=False, rounds=20,
    )
    row = cmp.row("b")
    assert row.verdict == "unsure", row.speedup_text(None)
    assert row.speedup_high / row.speedup_low > stats.UNSURE_WIDTH
    note = next(n for n in cmp.notes if "unsure" in n)
    assert "the machine was too busy" in note and "ranged from" in note
    assert "unsure" in cmp.table()  # the legend says what it means


def _result(total: float) -> ProfileResult:
    return ProfileResult(name="step", backend="cpu", wall_time_us=total, ops=[OpStat("aten::mm", 1, total, total)])


def test_diff_of_one_capture_each_says_it_cannot_tell() -> None:
    d = diff_results(_result(100.0), _result(41.0))
    assert d["told_apart"] is None and d["captures"] == [1, 1]
    text = render_diff(d)
    assert "B takes 0.41x of A" in text and "not told apart" in text and "capture several" in text


def test_diff_of_several_captures_uses_their_spread() -> None:
    overlapping = diff_results([_result(v) for v in (90, 100, 150)], [_result(v) for v in (80, 95, 120)])
    assert overlapping["told_apart"] is False and "ranges overlap" in render_diff(overlapping)
    apart = diff_results([_result(v) for v in (90, 100, 110)], [_result(v) for v in (40, 45, 50)])
    assert apart["told_apart"] is True and apart["total_ratio"] == 0.45
    assert "not told apart" not in render_diff(apart)


def test_the_diff_command_takes_several_captures_a_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``neuronscope diff A B --also-a A2 --also-b B2``: the spread of each side's captures
    decides whether the change in total is told apart from noise."""

    def saved(total: float) -> str:
        out = export_result(_result(total), tmp_path / "runs", summary="s")
        assert out.run_dir is not None
        return out.run_dir

    a, a2, a3 = saved(90.0), saved(100.0), saved(110.0)
    b, b2, b3 = saved(40.0), saved(45.0), saved(50.0)
    assert cli_main(["diff", a, b, "--also-a", a2, "--also-a", a3, "--also-b", b2, "--also-b", b3, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["captures"] == [3, 3] and d["told_apart"] is True
    assert cli_main(["diff", a, b]) == 0
    assert "not told apart" in capsys.readouterr().out  # one capture a side cannot tell


def test_the_diff_command_refuses_one_capture_given_twice_a_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A capture repeated with ``--also-a`` would count as two and shrink the spread: refused."""
    a = export_result(_result(90.0), tmp_path / "runs", summary="s").run_dir
    b = export_result(_result(40.0), tmp_path / "runs", summary="s").run_dir
    assert a is not None and b is not None
    assert cli_main(["diff", a, b, "--also-a", f"{a}/result.json"]) == 2
    assert "given twice" in capsys.readouterr().err
    assert cli_main(["diff", a, a]) == 0  # a run against itself stays a fine check
