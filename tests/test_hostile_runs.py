"""Hostile run files (issue 36, item 6): a malformed ``breakdown``, 20,000 step starts, and a
FIFO named result.json, through show, report and diff: exit 2 with one line or a page, never
a traceback or a hang."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from neuronscope.cli import main as cli_main
from neuronscope.export import run_dir as export
from neuronscope.export import runs
from neuronscope.result.stats import OpStat
from neuronscope.result.types import ProfileResult

FIGURES = dict.fromkeys((
    "window_us", "busy_us", "idle_us", "busy_pct", "idle_host_us", "idle_sync_us", "idle_other_us",
    "compute_us", "communication_us", "memory_us", "overlap_compute_communication_us", "overlap_compute_memory_us",
), 1.0)
MALFORMED: list[Any] = [
    "x", 5, [1], {"steps": 5}, {"steps": ["a", None, {"name": 3}]}, {"busy_pct": "high", "chart": 7},
    {**FIGURES, "steps": [{"name": "s", "busy_us": "x"}]},
    {**FIGURES, "chart": {"bin_us": 1.0, "compute": "zz"}}, {**FIGURES, "streams": 5, "launch": {"linked": 3}},
]


def _run_with_breakdown(root: Path, breakdown: Any) -> str:
    out = export.export_result(ProfileResult(name="b", backend="cpu", ops=[OpStat("aten::mm", 1, 1.0, 1.0)]), root, summary="s")
    assert out.run_dir is not None
    path = Path(out.run_dir, "result.json")
    data = json.loads(path.read_text())
    data["breakdown"] = breakdown
    path.write_text(json.dumps(data))
    return out.run_dir


@pytest.mark.parametrize("breakdown", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_breakdown_is_left_out_not_a_traceback(tmp_path: Path, breakdown: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_with_breakdown(tmp_path, breakdown)
    assert cli_main(["show", run]) == 0
    capsys.readouterr()
    pytest.importorskip("matplotlib")
    assert cli_main(["report", run]) == 0


def test_twenty_thousand_step_starts_are_cut_on_load(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    steps = [{"name": f"s{i}", "start_us": float(i), "window_us": 2.0, "busy_us": 1.0, "idle_host_us": 1.0,
              "idle_sync_us": 0.0, "idle_other_us": 0.0} for i in range(20_000)]
    run = _run_with_breakdown(tmp_path, {
        **FIGURES, "device": 0, "steps": steps,
        "chart": {"bin_us": 100.0, "compute": [0.5] * 400, "step_starts_us": [float(i) for i in range(20_000)]},
    })
    started = time.perf_counter()
    assert cli_main(["report", run]) == 0
    assert time.perf_counter() - started < 20  # 33 s before; about 1 s here
    loaded = runs.load(run)
    assert loaded.breakdown is not None and len(loaded.breakdown["steps"]) == 64
    assert loaded.breakdown["steps_left_out"] == 20_000 - 64


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_a_fifo_named_result_json_does_not_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "result.json")
    for args in (["show", str(tmp_path)], ["show", str(tmp_path / "result.json")], ["diff", str(tmp_path), str(tmp_path)], ["report", str(tmp_path)]):
        assert cli_main(args) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_one_device_per_kernel_is_broken_down_in_linear_time(tmp_path: Path) -> None:
    """20,000 kernels, each on a device of its own, once took over 100 s (each device's
    breakdown read every event): the busiest MAX_DEVICES are broken down, the rest counted."""
    from neuronscope import from_trace
    from neuronscope.events.timeline import MAX_DEVICES

    n = 20_000
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": n * 10}]
    events += [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i * 10, "dur": 5, "args": {"device": i, "stream": 7}}
        for i in range(n)
    ]
    path = tmp_path / "many_devices.json"
    path.write_text(json.dumps({"traceEvents": events}))
    started = time.perf_counter()
    bd = from_trace(path).breakdown
    assert time.perf_counter() - started < 60  # about 1 s here
    assert bd is not None and len(bd["devices"]) == MAX_DEVICES and bd["devices_left_out"] == n - MAX_DEVICES


def test_ids_past_int64_are_read_not_an_overflow_error(tmp_path: Path) -> None:
    from neuronscope import from_trace

    big = 2**70
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": big, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": big, "ts": 10, "dur": 5, "args": {"device": 0, "stream": big}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": big, "tid": 3, "ts": 20, "dur": 5, "args": {"device": big, "stream": -big}},
    ]
    path = tmp_path / "big_ids.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = from_trace(path)
    assert [o.name for o in result.ops] == ["aten::mm"] and result.breakdown is not None
