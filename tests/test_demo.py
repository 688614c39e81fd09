"""The demo answers its question first; `ls` shows a comparison's verdict and its real total."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from neuronscope import Comparison, compare
from neuronscope.cli import main
from neuronscope.demo import CPU_DIFFERS, STUDY, answer, render_demo
from neuronscope.result.comparison import ComparisonRow

SHAPE = (2, 16, 64)


def _row(label: str, speedup: float, low: float | None, high: float | None, verdict: str, ops: int, all_ops: int, top: str) -> ComparisonRow:
    return ComparisonRow(
        label=label, time_us=100.0 / speedup, op_count=ops, top_op=top, speedup=speedup, speedup_low=low,
        speedup_high=high, verdict=verdict, all_op_count=all_ops, repeats=50,
    )


def _study(compiled_verdict: str = "faster", fused_verdict: str = "faster") -> Comparison:
    rows = [
        _row("naive", 1.0, None, None, "baseline", 6, 20, "aten::mul"),
        _row("fused", 1.52, 1.41, 1.66, fused_verdict, 1, 26, "aten::rms_norm"),
        _row("compiled", 2.10, 1.90, 2.30, compiled_verdict, 1, 2, "Torch-Compiled Region: 0/0"),
    ]
    return Comparison(name="rms_norm_demo", backend="cpu", timing={"confidence": 0.99}, rows=rows)


def test_the_answer_names_the_fastest_by_how_much_and_why() -> None:
    text = answer(_study())
    first = text.split(". ")[0]
    assert first.startswith("Answer on this CPU: compiled is fastest, 2.10x the speed of naive (99% interval 1.90-2.30")
    assert "fused 1.52x [1.41-1.66]" in text
    assert "Why: ops dispatched per call by each variant's own code: naive 6 (20 with the ops nested in them), fused 1" in text
    # torch.rms_norm on a CPU is one op with 26 inside it: said, so the op table cannot contradict the row.
    assert "Here fused's one op, aten::rms_norm, is no single kernel: it runs 26 ops inside it." in text
    assert "Here compiled" not in text  # 2 ops inside, fewer than naive's 6: a fused kernel indeed
    assert "2,355 us" in text and "403.3 us" in text and "375.5 us" in text and STUDY in text
    assert CPU_DIFFERS in text
    assert "\n" not in text  # one paragraph


def test_the_answer_says_when_nothing_is_told_apart() -> None:
    cmp = _study(compiled_verdict="noise", fused_verdict="noise")
    rows = [cmp.rows[0], replace(cmp.rows[1], speedup_low=0.9), replace(cmp.rows[2], speedup_low=0.8)]
    cmp = replace(cmp, rows=rows)
    text = answer(cmp)
    assert text.startswith("Answer on this CPU: no variant is told apart as faster than naive")
    assert "(noise)" in text and "within the machine's noise" in text
    assert answer(Comparison(name="empty")) == "The comparison holds no variant."
    gpu = _study()
    gpu = replace(gpu, backend="cuda")
    assert "Slower" not in answer(gpu)
    assert CPU_DIFFERS not in answer(gpu) and answer(gpu).startswith("Answer on this GPU")


def test_the_answer_says_which_variant_is_slower_and_by_how_much() -> None:
    # torch.compile's RMSNorm measured 2.6x slower than the hand-written form on a quiet 2-core CPU.
    cmp = _study(fused_verdict="noise")
    rows = [
        cmp.rows[0],
        replace(cmp.rows[1], speedup=1.12, speedup_low=0.95, speedup_high=1.31),
        replace(cmp.rows[2], speedup=0.38, speedup_low=0.34, speedup_high=0.49, verdict="slower"),
    ]
    cmp = replace(cmp, rows=rows)
    text = answer(cmp)
    assert text.startswith("Answer on this CPU: no variant is told apart as faster than naive")
    assert "Slower: compiled takes 2.63x naive's time." in text
    assert "within the machine's noise" not in text  # a difference was told apart


def test_render_demo_puts_the_answer_before_the_table() -> None:
    cmp = _study()
    text = render_demo(cmp)
    assert text.index("Answer on this CPU") < text.index("Variant") < text.index("Ops/call: ops the variant's own code")


def _demo(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from neuronscope import demo

    monkeypatch.setattr(demo, "DEMO_SHAPE", SHAPE)
    code = main(["demo", "--no-compile", "--backend", "cpu", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_prints_the_answer_then_the_table_and_op_tables_only_when_verbose(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="neuronscope"):
        code, out, _ = _demo(["--no-export"], monkeypatch, capsys)
    assert code == 0
    assert out.startswith("Answer on this CPU: ")
    assert out.index("Answer") < out.index("neuronscope compare: rms_norm_demo [cpu]")
    assert "Self CPU" not in out  # no per-variant op tables
    said = [r.getMessage() for r in caplog.records]
    assert "neuronscope demo: hand-written RMSNorm vs torch.rms_norm on a 2x16x64 tensor on cpu" in said[0]
    code, out, _ = _demo(["--no-export", "--verbose"], monkeypatch, capsys)
    assert code == 0 and out.count("Self CPU") >= 2


def test_ls_keeps_the_noise_mark_and_shows_the_comparisons_own_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = [0.0]

    def variant(x: torch.Tensor) -> torch.Tensor:
        clock[0] += 0.004  # two identical variants on an exact clock: noise, certainly
        return x

    cmp = compare(
        {"a": variant, "b": variant}, torch.ones(2), timer=lambda: clock[0], output_dir=str(tmp_path), rounds=4, active=1
    )
    assert cmp.row("b").verdict == "noise" and cmp.wall_time_us is not None
    assert main(["ls", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fastest: " in out and "(noise)" in out
    assert main(["ls", str(tmp_path), "--json"]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    (row,) = [r for r in rows if r["kind"] == "comparison"]
    assert row["total_us"] == pytest.approx(cmp.wall_time_us)
    assert row["total_us"] != pytest.approx(sum(r.time_us for r in cmp.rows))
