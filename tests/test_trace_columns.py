"""A trace's table in int64 columns (issue 39): what they hold, and that linking finds the
same launches as the dict of runtime calls it replaced."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuronscope.drive.traces import from_trace, table_from_trace
from neuronscope.errors import TraceFormatError
from neuronscope.events.arrays import extend_ints, int_column, reordered
from neuronscope.events.trace_link import RuntimeCalls

TRACES = Path(__file__).parent / "data" / "traces"


def _trace(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _x(cat: str, name: str, ts: Any, dur: Any, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_a_traces_timestamps_are_int64_columns_that_read_as_lists() -> None:
    table, _ = table_from_trace(TRACES / "a100_training_step.json.gz")
    for column in (table.starts, table.ends, table.device_ns):
        assert isinstance(column, array) and column.typecode == "q" and len(column) == len(table.names)
    assert table.others is not None and isinstance(table.others.starts, array)
    assert table.device is not None and isinstance(table.device.starts, array)
    starts = np.asarray(table.starts)  # no copy, int64
    assert starts.dtype == np.int64 and (np.diff(starts) >= 0).all()  # by start, as a live capture's
    assert sum(table.device_ns) > 0 and all(e >= s for s, e in zip(table.starts, table.ends))


def test_extend_ints_turns_a_column_into_a_list_beyond_int64() -> None:
    class Owner:
        col = int_column()

    owner = Owner()
    extend_ints(owner, "col", [1, 2])
    assert isinstance(owner.col, array) and list(owner.col) == [1, 2]
    extend_ints(owner, "col", [3, 1 << 70])  # nothing of the chunk is kept twice
    assert owner.col == [1, 2, 3, 1 << 70]
    extend_ints(owner, "col", [4])
    assert owner.col[-1] == 4
    order = np.array([2, 0, 1])
    assert list(reordered(array("q", [5, 6, 7]), order)) == [7, 5, 6]
    assert reordered([5, 6, 7], order) == [7, 5, 6]


def test_a_launch_is_the_last_runtime_call_read_with_its_correlation() -> None:
    calls = RuntimeCalls()
    for corr, thread, start in ((7, 0, 100), (8, 1, 200), (7, 2, 300)):
        calls.corr.append(corr)
        calls.thread.append(thread)
        extend_ints(calls, "start", [start])
        extend_ints(calls, "end", [start + 5])
    spans = calls.launches([7, 8, 9, None, "7"])
    assert spans.tolist() == [[2, 300, 305], [1, 200, 205], [-1, -1, -1], [-1, -1, -1], [-1, -1, -1]]
    calls.corr.append("k")  # a correlation written as text: found as a dict finds it
    calls.thread.append(3)
    extend_ints(calls, "start", [400])
    extend_ints(calls, "end", [401])
    assert calls.launches(["k", 7, True]).tolist() == [[3, 400, 401], [2, 300, 305], [-1, -1, -1]]
    assert calls.launches([8], ("start",)).tolist() == [[200]]


def test_a_repeated_correlation_links_the_kernel_to_the_last_launch(tmp_path: Path) -> None:
    events = [
        _x("cpu_op", "aten::first", 10, 20),
        _x("cuda_runtime", "cudaLaunchKernel", 12, 2, correlation=5),
        _x("cpu_op", "aten::second", 40, 20),
        _x("cuda_runtime", "cudaLaunchKernel", 42, 2, correlation=5),
        _x("kernel", "k", 50, 7, tid=7, correlation=5, device=0),
    ]
    r = from_trace(_trace(tmp_path / "t.json", events), progress=False)
    device = {op.name: op.self_device_us for op in r.ops}
    assert device["aten::second"] == pytest.approx(7.0) and device["aten::first"] == 0


def test_a_timestamp_beyond_int64_is_refused_as_out_of_range(tmp_path: Path) -> None:
    events = [_x("cpu_op", "aten::mm", 10, 5), _x("cpu_op", "aten::add", 10**16, 5)]
    with pytest.raises(TraceFormatError, match="out of range"):
        from_trace(_trace(tmp_path / "t.json", events), progress=False)
