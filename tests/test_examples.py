"""The examples run as a user would run them, in fresh processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import neuronscope

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(script: str, runs: Path, *args: str) -> str:
    env = {**os.environ, "NEURONSCOPE_OUTPUT_DIR": str(runs), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], check=False, capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "USDT" not in proc.stderr  # the CPU build's profiler_start/stop lines are silenced
    return proc.stdout


def test_transformer_block_example(runs_dir: Path) -> None:
    out = _run("transformer_block.py", runs_dir)
    assert "aten::mm" in out or "aten::linear" in out
    runs = list((runs_dir / "Block.forward").iterdir())
    assert len(runs) == 1  # five forward calls, one capture
    assert neuronscope.load(runs[0]).name == "Block.forward"


def test_training_loop_example(runs_dir: Path) -> None:
    out = _run("training_loop.py", runs_dir)
    for name in ("forward", "backward", "optimizer"):
        assert f"{name}:" in out
    runs = list((runs_dir / "train_step").iterdir())
    assert len(runs) == 1
    result = neuronscope.load(runs[0])
    assert {"forward", "backward", "optimizer"} <= set(result.regions)


@pytest.mark.slow
def test_rms_norm_study_example(runs_dir: Path) -> None:
    out = _run("rms_norm_study.py", runs_dir)
    for label in ("naive", "fused", "compiled"):
        assert label in out
    runs = list((runs_dir / "rms_norm_study").iterdir())
    assert len(runs) == 1
    cmp = neuronscope.load(runs[0])
    assert isinstance(cmp, neuronscope.Comparison)
    assert [r.label for r in cmp.rows] == ["naive", "fused", "compiled"]
    for row in cmp.rows[1:]:  # each speedup with its interval and verdict, printed and saved
        assert row.verdict in ("faster", "slower", "noise", "unsure") and row.speedup_low is not None
        assert f"{row.label}: {row.verdict}, {row.speedup_text(cmp.rows[0])} against naive" in out
