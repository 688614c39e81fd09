"""CUDA's repeated profiler sessions: kernel records on another clock (pytorch/pytorch#192021).

The documented symptom, in synthetic traces and live events: in the k-th session of a
process, k kernel records at the head of the buffer carry CUPTI's default clock, about 1e14 ns
off, while their cudaLaunchKernel records stay right; such a kernel "starts" long before its
own launch. They must never be device time nor stretch the step breakdown: left out, counted,
said in a note. No GPU here: the live path is exercised with stand-in raw events (the
accessors torch's _KinetoEvent has), the trace path with Chrome-trace files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from test_events import _Fake, _FakeProf

from neuronscope import from_trace
from neuronscope.events import table_from_profiler
from neuronscope.events.clocks import FAR_OUTSIDE_NS, off_clock
from neuronscope.result.summary import summarize

OFF_NS = 10**14  # the documented offset (about 1.2 days)
KERNEL_US = 50
N = 10


def _session_trace(bad_head: int, after: int = 0) -> dict[str, Any]:
    """One step of N (op, launch, kernel) triples; the first ``bad_head`` kernels on another
    clock (1e14 ns early), and ``after`` more far after the capture."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 900, "dur": 5000},
    ]
    for i in range(N):
        t = 1000 + 400 * i
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 100, "args": {"External id": i + 1}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 10, "dur": 5, "args": {"correlation": 100 + i, "External id": i + 1}})
        start = t + 20
        if i < bad_head:
            start -= OFF_NS // 1000
        elif i >= N - after:
            start += OFF_NS // 1000
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": start, "dur": KERNEL_US, "args": {"correlation": 100 + i, "External id": i + 1, "device": 0, "stream": 7}})
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}


def _write(tmp_path: Path, trace: dict[str, Any], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("session", [1, 2, 3])
def test_kernels_of_a_later_session_on_another_clock_are_left_out(tmp_path, session):
    """Session k: k - 1 bad head records (the first session is right)."""
    bad = session - 1
    result = from_trace(_write(tmp_path, _session_trace(bad)))
    mm = result.op("aten::mm")
    assert mm.device_total_us == pytest.approx((N - bad) * KERNEL_US)
    assert result.device_unattributed_us == 0
    bd = result.breakdown
    assert bd["window_us"] < 10_000  # not a day
    assert bd["busy_us"] == pytest.approx((N - bad) * KERNEL_US)
    notes = [n for n in result.notes if "192021" in n]
    assert (len(notes) == 1) == (bad > 0)
    if bad:
        assert f"{bad:,} device record(s) ({bad * KERNEL_US:,.1f} us) were left out" in notes[0]


def test_records_far_outside_the_capture_are_left_out(tmp_path):
    result = from_trace(_write(tmp_path, _session_trace(0, after=2)))
    assert result.op("aten::mm").device_total_us == pytest.approx((N - 2) * KERNEL_US)
    assert result.breakdown["window_us"] < 10_000
    assert any("2 device record(s)" in n for n in result.notes)


def test_a_first_session_and_real_traces_lose_nothing(tmp_path):
    result = from_trace(_write(tmp_path, _session_trace(0)))
    assert not any("192021" in n for n in result.notes)
    data = Path(__file__).resolve().parent / "data" / "traces"
    for name in ("a100_training_step.json.gz", "mi300_bert_inference.json.gz", "mtia_inference.json.gz"):
        assert not any("192021" in n for n in from_trace(data / name).notes), name


def test_live_records_on_another_clock_are_left_out():
    cuda = torch.autograd.DeviceType.CUDA
    events = [_Fake("step", "user_annotation", 1, 0, 10_000, corr=1)]
    for i in range(4):
        t = 1000 + 2000 * i
        events.append(_Fake("aten::mm", "cpu_op", 1, t, t + 500, corr=10 + i))
        events.append(_Fake("cudaLaunchKernel", "cuda_runtime", 1, t + 10, t + 40, corr=100 + i, linked=10 + i))
        start = t + 100 - (OFF_NS if i == 0 else 0)
        events.append(_Fake("gemm", "kernel", 7, start, start + 300, corr=100 + i, linked=10 + i, device=cuda))
    table = table_from_profiler(_FakeProf(events))
    assert table.off_clock_device == 1 and table.off_clock_device_ns == 300
    assert sum(table.device_ns) == 3 * 300 and table.device_event_count == 3
    assert table.device is not None and min(table.device.starts) > 0
    assert any("192021" in n for n in summarize(table).notes)


def test_the_rule():
    bad = off_clock([0, 5_000_000, -OFF_NS, 10], [10, 5_000_010, -OFF_NS + 5, 2 * FAR_OUTSIDE_NS], [-1, 8_000_000, -1, -1], (0, 100))
    assert bad.tolist() == [False, True, True, True]
    assert not off_clock([1], [2], [3], None).any()  # within the slack before its launch
