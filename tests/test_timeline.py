"""The step breakdown (device busy / idle, causes, classes, overlap, streams, launches) and the
trace kinds it reads (CUDA, ROCm, MTIA, CUPTI counter mode, torch 1.9).

Expectations on the real traces in ``tests/data/traces`` are derived here from the JSON, with
Holistic Trace Analysis' definitions of its temporal breakdown (``kernel_time`` = first device
event's start to last one's end; idle = that less the union of the device events; compute =
the union of the kernels that are not NCCL, copies, sets or syncs), never from neuronscope's
own output.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from neuronscope.analysis.launch import launch_hints
from neuronscope.drive.traces import from_trace
from neuronscope.events import KIND_ANNOTATION, KIND_OP, EventTable
from neuronscope.events.table import DEVICE_COMM, DEVICE_COMPUTE, DEVICE_MEMCPY, DeviceEvents
from neuronscope.events.timeline import MAX_STEPS, step_breakdown
from neuronscope.result.stats import OpStat
from neuronscope.result.text import render_breakdown, render_ops
from neuronscope.result.types import ProfileResult

TRACES = Path(__file__).resolve().parent / "data" / "traces"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# HTA's compute kernels: not NCCL kernels, copies, sets or syncs (hta/utils/utils.py).
HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def _events(name: str) -> list[dict[str, Any]]:
    with gzip.open(TRACES / name, "rb") as fh:
        return json.loads(fh.read())["traceEvents"]


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _ns(v: float) -> int:
    return int(v * 1000 + 0.5) if isinstance(v, float) else v * 1000


def _hta_reference(name: str, cats: set[str]) -> dict[str, float]:
    """HTA's temporal breakdown, recomputed from the JSON (ns, no rounding to us)."""
    dev = [e for e in _events(name) if e.get("cat") in cats and e.get("ph") == "X" and e.get("dur", 0) > 0]
    iv = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in dev]
    window = max(e for _, e in iv) - min(s for s, _ in iv)
    busy = _union_ns(iv)
    compute = _union_ns([i for i, e in zip(iv, dev) if not HTA_NOT_COMPUTE.match(e["name"])])
    return {"window_us": window / 1e3, "busy_us": busy / 1e3, "idle_us": (window - busy) / 1e3, "compute_us": compute / 1e3}


# ---- the breakdown on hand-made timelines ------------------------------------------------------
def _table(device: list[tuple[int, int, int, int, int, int]], syncs: list[tuple[int, int]] = (), steps=()) -> EventTable:
    """``device``: (start, end, stream, class, launch start, launch end) per device event."""
    t = EventTable()
    for name, s, e in steps:
        t.append(name, KIND_ANNOTATION, 1, s, e)
    d = DeviceEvents()
    for s, e, st, c, ls, le in device:
        d.starts.append(s)
        d.ends.append(e)
        d.streams.append(st)
        d.classes.append(c)
        d.launch_starts.append(ls)
        d.launch_ends.append(le)
    for a, b in syncs:
        d.sync_starts.append(a)
        d.sync_ends.append(b)
    t.device = d
    return t


def test_busy_idle_and_causes_on_a_known_timeline() -> None:
    # Kernel A 0-100; gap 100-300: the next kernel's launch call ran 250-260 (host late until
    # 260, then 40 ns of launch latency: other). Kernel B 300-400; gap 400-600 in which the host
    # was blocked in a sync 400-500, then launched C at 500-520: sync 100, host 20, other 80.
    t = _table(
        [
            (0, 100, 7, DEVICE_COMPUTE, -1, -1),
            (300, 400, 7, DEVICE_COMPUTE, 250, 260),
            (600, 700, 7, DEVICE_COMPUTE, 500, 520),
        ],
        syncs=[(400, 500)],
    )
    bd = step_breakdown(t)
    assert bd is not None
    assert bd["window_us"] == 0.7 and bd["busy_us"] == 0.3 and bd["idle_us"] == 0.4
    assert bd["idle_host_us"] == 0.16 + 0.02
    assert bd["idle_sync_us"] == 0.1
    assert abs(bd["idle_other_us"] - (0.04 + 0.08)) < 1e-9
    assert bd["steps"][0]["name"] == "capture" and bd["steps"][0]["window_us"] == 0.7
    assert bd["streams"] == [{"stream": 7, "events": 3, "busy_us": 0.3}]


def test_classes_overlap_streams_and_launches() -> None:
    t = _table(
        [
            (0, 1000, 7, DEVICE_COMPUTE, 0, 10),  # a long kernel: longer than its launch
            (500, 1500, 20, DEVICE_COMM, 400, 410),  # NCCL on another stream, half overlapped
            (1500, 1505, 7, DEVICE_COMPUTE, 1490, 1500),  # 5 ns kernel, 10 ns launch
            (1600, 1700, 9, DEVICE_MEMCPY, -1, -1),
        ]
    )
    bd = step_breakdown(t)
    assert bd is not None
    assert bd["compute_us"] == 1.005 and bd["communication_us"] == 1.0 and bd["memory_us"] == 0.1
    assert bd["overlap_compute_communication_us"] == 0.5
    assert bd["overlap_compute_memory_us"] == 0.0
    assert bd["busy_us"] == 1.605 and bd["window_us"] == 1.7
    assert [s["stream"] for s in bd["streams"]] == [7, 20, 9]  # busiest first
    la = bd["launch"]
    assert la["kernels"] == 3 and la["linked"] == 3 and la["shorter_than_launch"] == 1


def test_steps_tile_the_device_window() -> None:
    # Step 1 launches two kernels, step 2 one; the device lags the host.
    t = _table(
        [
            (100, 200, 7, DEVICE_COMPUTE, 10, 20),
            (250, 300, 7, DEVICE_COMPUTE, 30, 40),
            (400, 450, 7, DEVICE_COMPUTE, 60, 70),
        ],
        steps=[("ProfilerStep#1", 0, 50), ("ProfilerStep#2", 55, 90)],
    )
    bd = step_breakdown(t)
    assert bd is not None
    s1, s2 = bd["steps"]
    assert (s1["name"], s1["window_us"], s1["busy_us"]) == ("ProfilerStep#1", 0.3, 0.15)
    assert (s2["name"], s2["window_us"], s2["busy_us"]) == ("ProfilerStep#2", 0.05, 0.05)
    assert s1["window_us"] + s2["window_us"] == bd["window_us"]


def test_no_device_events_no_breakdown() -> None:
    assert step_breakdown(EventTable()) is None
    assert from_trace(TRACES / "cpu_only.json.gz").breakdown is None


# ---- the shared traces against HTA's definitions -----------------------------------------------
@pytest.mark.parametrize(
    "name", ["a100_training_step.json.gz", "training_mm_record_shapes.json.gz", "mi300_bert_inference.json.gz"]
)
def test_breakdown_matches_hta_temporal_breakdown(name: str) -> None:
    ref = _hta_reference(name, DEVICE_CATS)
    bd = from_trace(TRACES / name).breakdown
    assert bd is not None
    for key in ("window_us", "busy_us", "idle_us", "compute_us"):
        assert bd[key] == pytest.approx(ref[key], abs=0.002), key
    steps = bd["steps"]
    assert sum(s["window_us"] for s in steps) == pytest.approx(bd["window_us"], abs=0.01)
    assert sum(s["busy_us"] for s in steps) == pytest.approx(bd["busy_us"], abs=0.01)
    assert bd["idle_host_us"] + bd["idle_sync_us"] + bd["idle_other_us"] == pytest.approx(bd["idle_us"], abs=0.01)


def test_breakdown_is_on_the_result_its_dict_and_dataframe() -> None:
    r = from_trace(TRACES / "a100_training_step.json.gz")
    assert r.breakdown is not None and len(r.breakdown["steps"]) == 6
    back = ProfileResult.from_dict(json.loads(r.to_json()))
    assert back.breakdown == json.loads(json.dumps(r.breakdown))
    df = r.to_dataframe("steps")
    assert list(df["name"]) == [s["name"] for s in r.breakdown["steps"]] and df["busy_us"].sum() == pytest.approx(r.breakdown["busy_us"], abs=0.01)
    text = r.table()
    assert "Device: busy 83.6%" in text and "6 steps" in text and "launches:" in text


# ---- trace kinds -------------------------------------------------------------------------------
def test_ranges_inside_an_op_get_the_device_time_launched_in_them() -> None:
    """nccl:* ranges open inside record_param_comms: the NCCL kernels are theirs too."""
    for name in ("a100_training_step.json.gz", "training_mm_record_shapes.json.gz"):
        nccl_ns = sum(_ns(e["dur"]) for e in _events(name) if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
        r = from_trace(TRACES / name)
        ranges = {k: v for k, v in r.regions.items() if k.startswith("nccl:")}
        assert ranges and all(v.device_time_us and v.device_time_us > 0 for v in ranges.values())
        assert sum(v.device_time_us or 0 for v in ranges.values()) == pytest.approx(nccl_ns / 1e3, abs=0.01)


def test_mtia_trace_reads_its_device_events_with_a_note() -> None:
    ccp = [e for e in _events("mtia_inference.json.gz") if e.get("cat") == "mtia_ccp_events" and e.get("ph") == "X"]
    work = [e for e in ccp if e["name"] != "event_wait"]
    r = from_trace(TRACES / "mtia_inference.json.gz")
    assert r.backend == "mtia" and r.platform == "mtia" and r.has_device_time
    assert any("MTIA" in n for n in r.notes)
    assert r.breakdown is not None
    busy = _union_ns([(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in work if e["dur"] > 0])
    assert r.breakdown["busy_us"] == pytest.approx(busy / 1e3, abs=0.01)
    text = r.table()
    assert "[mtia]" in text and "Self MTIA" in text


def _gaps(busy: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for s, e in sorted(busy):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(a[1], b[0]) for a, b in itertools.pairwise(merged)]


def _covered_ns(gaps: list[tuple[int, int]], cover: list[tuple[int, int]]) -> int:
    """How much of the gaps the cover intervals cover (each point once)."""
    return sum(_union_ns([(max(a, s), min(b, e)) for s, e in cover if s < b and e > a]) for a, b in gaps)


def test_mtia_waits_are_no_device_time_and_its_syncs_block_the_host() -> None:
    """event_wait is a stream waiting, not work: no op's (nor the outside-any-op) device time.
    synchronizeStream holds the host: device idle under it is idle in sync."""
    events = _events("mtia_inference.json.gz")
    ccp = [e for e in events if e.get("cat") == "mtia_ccp_events" and e.get("ph") == "X"]
    work_ns = sum(_ns(e["dur"]) for e in ccp if e["name"] != "event_wait")
    r = from_trace(TRACES / "mtia_inference.json.gz")
    total = sum(o.self_device_us or 0 for o in r.ops) + r.device_unattributed_us
    assert total == pytest.approx(work_ns / 1e3, abs=0.01)
    busy = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in ccp if e["name"] != "event_wait" and e["dur"] > 0]
    syncs = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events if e.get("cat") == "mtia_runtime" and "ynchronize" in e["name"]]
    expected = _covered_ns(_gaps(busy), syncs)
    assert expected > 0 and r.breakdown is not None
    assert r.breakdown["idle_sync_us"] == pytest.approx(expected / 1e3, abs=0.01)


@pytest.mark.parametrize("call", ["hipDeviceSynchronize", "hipStreamSynchronize", "cudaDeviceSynchronize"])
def test_a_sync_call_over_a_device_gap_is_idle_in_sync(tmp_path: Path, call: str) -> None:
    """The host blocked in a synchronising runtime call (HIP's as well as CUDA's) across the
    largest device gap of a ROCm trace: that gap is idle in sync."""
    with gzip.open(TRACES / "mi300_bert_inference.json.gz", "rb") as fh:
        doc = json.loads(fh.read())
    dev = [e for e in doc["traceEvents"] if e.get("cat") in DEVICE_CATS and e.get("ph") == "X" and e.get("dur", 0) > 0]
    a, b = max(_gaps([(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in dev]), key=lambda g: g[1] - g[0])
    host = next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime")
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": host["pid"], "tid": host["tid"],
                               "ts": a / 1000, "dur": (b - a) / 1000, "args": {"correlation": 10**9}})
    path = tmp_path / "synced.json"
    path.write_text(json.dumps(doc))
    bd = from_trace(path).breakdown
    assert bd is not None and bd["idle_sync_us"] == pytest.approx((b - a) / 1e3, abs=0.002)


@pytest.mark.parametrize(
    ("device", "pid", "label"), [(1, 1, "1"), ("cuda:1", 0, "1"), ("GPU", "GPU", "?"), ("H100 HBM3", 1, "1"), ("cpu", "GPU 1", "1")]
)
def test_two_devices_in_one_trace_are_broken_down_apart(tmp_path: Path, device: Any, pid: Any, label: str) -> None:
    """One process driving two GPUs: GPU 1 gets a shorter copy of GPU 0's work on the same
    stream ids. Each device's busy time is its own union, streams are not merged across them;
    a device named in text is known by its number ("?" where it has none)."""
    with gzip.open(TRACES / "training_mm_record_shapes.json.gz", "rb") as fh:
        doc = json.loads(fh.read())
    gpu0 = [e for e in doc["traceEvents"] if e.get("cat") in DEVICE_CATS and e.get("ph") == "X"]
    gpu1 = [{**e, "pid": pid, "ts": e["ts"] + 3, "dur": e["dur"] / 2, "args": {**e["args"], "device": device, "correlation": None}} for e in gpu0]
    doc["traceEvents"].extend(gpu1)
    path = tmp_path / "two_gpus.json"
    path.write_text(json.dumps(doc))
    bd = from_trace(path).breakdown
    assert bd is not None

    def busy_us(events: list[dict[str, Any]], stream: int | None = None) -> float:
        picked = [e for e in events if e["dur"] > 0 and stream in (None, e["args"]["stream"])]
        return _union_ns([(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in picked]) / 1e3

    assert bd["device"] == 0 and bd["busy_us"] == pytest.approx(busy_us(gpu0), abs=0.002)
    devices = {d["device"]: d for d in bd["devices"]}
    other = 1 if label == "1" else -1
    assert set(devices) == {0, other} and devices[other]["busy_us"] == pytest.approx(busy_us(gpu1), abs=0.002)
    top = bd["streams"][0]
    assert top["events"] == sum(e["args"]["stream"] == top["stream"] for e in gpu0)
    assert top["busy_us"] == pytest.approx(busy_us(gpu0, top["stream"]), abs=0.002)
    assert "Device 0 (the busiest of 2)" in render_breakdown(bd) and f"other devices: {label}: busy" in render_breakdown(bd)


class _StandInEvent:
    """A stand-in for torch's Kineto event of a live MTIA capture (no MTIA device here): the
    accessors the live reader calls, as torch names them."""

    def __init__(self, name: str, activity: str, corr: int, linked: int, start: int, dur: int) -> None:
        self._name, self._activity, self._corr, self._linked, self._start, self._dur = name, activity, corr, linked, start, dur

    def name(self) -> str:
        return self._name

    def activity_type(self) -> str:
        return self._activity

    def correlation_id(self) -> int:
        return self._corr

    def linked_correlation_id(self) -> int:
        return self._linked

    def start_ns(self) -> int:
        return self._start

    def end_ns(self) -> int:
        return self._start + self._dur

    def duration_ns(self) -> int:
        return self._dur

    def device_resource_id(self) -> int:
        return 0

    def device_index(self) -> int:
        return 0


def test_a_live_captures_stream_waits_are_no_device_time() -> None:
    """Live as from the trace: MTIA's event_wait (a stream waiting on another) adds no device
    time to the op that launched it, while its kernel does."""
    from neuronscope.events.live import _link_device

    table = EventTable()
    table.append("aten::mul", KIND_OP, 1, 0, 10)
    op = _StandInEvent("aten::mul", "cpu_op", 5, 0, 0, 10)
    kernel = _StandInEvent("pe_exe", "mtia_ccp_events", 0, 5, 20, 100)
    wait = _StandInEvent("event_wait", "mtia_ccp_events", 0, 5, 130, 1000)
    _link_device(table, _StandInEvent, [op], [kernel, wait], [])
    assert table.device_ns == [100]


def test_cupti_counter_trace_reads_its_ranges_with_a_note() -> None:
    ranges = [e for e in _events("a100_cupti_counters.json.gz") if e.get("cat") == "cuda_profiler_range"]
    r = from_trace(TRACES / "a100_cupti_counters.json.gz")
    assert r.has_device_time and r.device_unattributed_us == pytest.approx(sum(_ns(e["dur"]) for e in ranges) / 1e3)
    # The records carry no correlation: no op gets device time, and the note says why.
    assert not any(o.self_device_us for o in r.ops)
    assert any("counter-mode" in n and "outside any op" in n for n in r.notes)
    assert r.breakdown is None  # replayed kernels: no timeline of the run


def test_rocm_trace_is_labelled_rocm_with_hip_columns() -> None:
    r = from_trace(TRACES / "mi300_bert_inference.json.gz")
    text = r.table()
    assert r.platform == "rocm" and "[rocm]" in text and "Self HIP" in text and "CUDA" not in text.split("\n\n")[1]
    assert ProfileResult.from_dict(r.to_dict()).platform == "rocm"
    pytest.importorskip("matplotlib")  # the report's charts need it (the "report" extra)
    from neuronscope.report.html import render_report

    page = render_report(r)
    assert "Self HIP" in page and "Self CUDA" not in page


def test_rank_without_world_size_prints_no_none() -> None:
    r = from_trace(TRACES / "a100_alexnet.json.gz")
    assert r.rank == 0 and r.world_size is None
    head = r.table().splitlines()[0]
    assert head.endswith("rank 0") and "None" not in head


def test_torch_1_9_trace_profiler_step_is_a_range(tmp_path: Path) -> None:
    """torch 1.9 wrote ranges (ProfilerStep#N, record_function) as cpu_op events."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "forward", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 70, "dur": 10},
    ]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"traceEvents": events}))
    r = from_trace(path)
    assert {o.name for o in r.ops} == {"aten::mm", "aten::relu"}
    assert set(r.regions) == {"ProfilerStep*", "forward"}
    assert [o.name for o in r.regions["forward"].ops] == ["aten::mm"]
    assert r.ops[0].self_cpu_us == 30.0


def test_share_counts_device_time_launched_outside_any_op() -> None:
    ops = [OpStat("aten::mm", 1, 1.0, 1.0, self_device_us=40.0, device_total_us=40.0)]
    text = render_ops(ops, outside_us=60.0)
    assert "40.0%" in text and "100.0%" not in text
    r = ProfileResult(name="g", backend="cuda", ops=ops, device_unattributed_us=60.0)
    assert r.share_total_us == 100.0 and "40.0%" in r.table()


# ---- the launch-overhead hint ------------------------------------------------------------------
def _ctx(table: EventTable) -> Any:
    from neuronscope.analysis.context import AnalysisContext
    from neuronscope.result.summary import summarize

    return AnalysisContext(table=table, summary=summarize(table), backend="cuda", source="trace")


def test_launch_overhead_hint_where_the_host_starves_the_device() -> None:
    # 60 kernels of 2 ns, each launched by a 10 ns call that starts 100 ns after the last ended.
    dev = []
    for k in range(60):
        start = k * 120 + 110
        dev.append((start, start + 2, 7, DEVICE_COMPUTE, start - 10, start - 1))
    t = _table(dev)
    t.append("aten::add", KIND_OP, 1, 0, 10)
    hints = launch_hints(_ctx(t))
    assert len(hints) == 1 and hints[0].pattern == "launch_overhead"
    assert "CUDA graph" in hints[0].suggestion and "60 of 60" in hints[0].suggestion
    # The host late by 117 ns before each kernel but the first (from the last one's end to the
    # end of the launch call, 1 ns before the kernel ran).
    assert hints[0].est_saving_us == hints[0].time_us == pytest.approx(59 * 0.117)
    # The same kernels back to back: the host kept up, no hint.
    busy = [(k * 3, k * 3 + 2, 7, DEVICE_COMPUTE, k * 3 - 50, k * 3 - 40) for k in range(60)]
    t2 = _table(busy)
    t2.append("aten::add", KIND_OP, 1, 0, 10)
    assert launch_hints(_ctx(t2)) == []
    # Four captures of the same launch-bound work read together (a schedule's repeats): the
    # lateness of all four against the window of all four, the same hint with four times the time.
    four = _table([(s + c * 10**9, e + c * 10**9, st, k, ls + c * 10**9, le + c * 10**9) for c in range(4) for s, e, st, k, ls, le in dev])
    four.device.segments = [0, 60, 120, 180]
    four.append("aten::add", KIND_OP, 1, 0, 10)
    (hint,) = launch_hints(_ctx(four))
    assert hint.time_us == pytest.approx(4 * 59 * 0.117) and "240 of 240" in hint.suggestion
    # A breakdown left out on purpose (a counter-mode trace replays its kernels): no hint.
    ctx = _ctx(t)
    ctx.extra["breakdown"] = None
    assert launch_hints(ctx) == []


def test_host_lateness_before_copies_is_no_launch_overhead() -> None:
    # Each step: the host makes its input for 5 us, copies it to the device, then 60 small
    # kernels each launched just in time, and a last one 1 us late. Only the lateness before
    # kernels can be won back by fewer launches (the copy waits for data the host is making).
    dev = []
    t0 = 0
    for _ in range(3):
        t0 += 5000
        dev.append((t0, t0 + 100, 7, DEVICE_MEMCPY, t0 - 20, t0 - 10))  # host late 5 us before it
        for k in range(60):
            start = t0 + 200 + 10 * k
            dev.append((start, start + 2, 7, DEVICE_COMPUTE, start - 6, start - 1))
        start = t0 + 200 + 600 + 1000
        dev.append((start, start + 2, 7, DEVICE_COMPUTE, start - 6, start - 1))
        t0 = start
    t = _table(dev)
    t.append("aten::add", KIND_OP, 1, 0, 10)
    bd = step_breakdown(t)
    assert bd is not None and bd["launch"]["linked"] == 183
    # Per step, before its kernels: 99 ns after the copy, 59 x 7 ns between small kernels, 1,007
    # ns before the late one; before the copies of steps 2 and 3, 4,988 ns each.
    assert bd["launch"]["idle_host_before_kernels_us"] == pytest.approx(3 * (99 + 59 * 7 + 1007) / 1e3)
    assert bd["idle_host_us"] == pytest.approx((3 * (99 + 59 * 7 + 1007) + 2 * 4988) / 1e3)
    hints = launch_hints(_ctx(t))
    assert len(hints) == 1 and hints[0].est_saving_us == pytest.approx(4.557)  # was 14.533: every late host
    assert "for the host to launch kernels" in hints[0].suggestion


def test_report_html_has_the_timeline_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the report's charts need it (the "report" extra)
    from neuronscope.report.html import render_report

    page = render_report(from_trace(TRACES / "training_mm_record_shapes.json.gz"))
    section = page[page.index('<section id="timeline">') :]
    section = section[: section.index("</section>")]
    assert "<svg" in section and "Device busy and idle" in section
    assert "host not launching" in section and "ProfilerStep#551" in section
    assert 'id="timeline"' not in render_report(from_trace(TRACES / "cpu_only.json.gz"))


@pytest.mark.parametrize("n_steps", [3, MAX_STEPS + 1, 5000])
def test_step_starts_are_marked_where_steps_are_listed(n_steps: int) -> None:
    # A kernel in each step. Listed one by one (up to MAX_STEPS): each start marked on the
    # chart; a long run's steps, not one line each (5,000 took the report seconds per thousand).
    pytest.importorskip("matplotlib")
    from neuronscope.report.charts import Charts

    steps = [(f"ProfilerStep#{k}", 100 * k, 100 * k + 90) for k in range(n_steps)]
    t = _table([(100 * k + 10, 100 * k + 50, 7, DEVICE_COMPUTE, 100 * k + 5, 100 * k + 8) for k in range(n_steps)], steps=steps)
    bd = step_breakdown(t)
    assert bd is not None
    svg = Charts().timeline(bd, "run")
    if n_steps <= MAX_STEPS:
        assert bd["chart"]["step_starts_us"] == [round(0.1 * k, 3) for k in range(n_steps)]  # from the first kernel
        assert "dotted: step starts" in svg
    else:
        assert bd["chart"]["step_starts_us"] == [] and bd["steps_left_out"] == n_steps - MAX_STEPS
        assert "too many steps to mark" in svg


def test_steps_left_out_count_every_capture() -> None:
    # Captures of 60 and 30 steps read together: 64 listed, and the 26 others said (the
    # longest capture's own count, none, was kept).
    sizes = [60, 30]
    steps, device = [], []
    for c, n in enumerate(sizes):
        base = c * 10**9
        steps += [(f"ProfilerStep#{c}_{k}", base + 100 * k, base + 100 * k + 90) for k in range(n)]
        device += [(base + 100 * k + 10, base + 100 * k + 50, 7, DEVICE_COMPUTE, base + 100 * k + 5, base + 100 * k + 8) for k in range(n)]
    t = _table(device, steps=steps)
    assert t.device is not None
    t.device.segments = [0, sizes[0]]
    bd = step_breakdown(t)
    assert bd is not None and bd["captures"] == 2
    assert len(bd["steps"]) == MAX_STEPS and bd["steps_left_out"] == sum(sizes) - MAX_STEPS


def test_captures_read_together_add_up_without_the_time_between(tmp_path: Path) -> None:
    """Two captures of one rank (a schedule's repeats): each is broken down on its own."""
    one = from_trace(TRACES / "training_mm_record_shapes.json.gz").breakdown
    a, b = tmp_path / "w.1.pt.trace.json.gz", tmp_path / "w.2.pt.trace.json.gz"
    a.write_bytes((TRACES / "training_mm_record_shapes.json.gz").read_bytes())
    doc = json.loads(gzip.decompress(a.read_bytes()))
    for e in doc["traceEvents"]:  # the second capture an hour later
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 3.6e9
    b.write_bytes(gzip.compress(json.dumps(doc).encode()))
    both = from_trace([a, b]).breakdown
    assert one is not None and both is not None and both["captures"] == 2
    assert both["window_us"] == pytest.approx(2 * one["window_us"], abs=0.01)  # not an hour
    assert both["busy_us"] == pytest.approx(2 * one["busy_us"], abs=0.01)
    assert both["idle_host_us"] == pytest.approx(2 * one["idle_host_us"], abs=0.01)
    assert len(both["steps"]) == 2 * len(one["steps"])
    assert both["streams"][0]["events"] == 2 * one["streams"][0]["events"]
    for key in ("kernels", "linked", "shorter_than_launch", "idle_host_before_kernels_us"):
        assert both["launch"][key] == pytest.approx(2 * one["launch"][key], abs=0.01), key


@pytest.mark.parametrize("seed", range(40))
def test_each_streams_busy_time_is_the_union_of_its_intervals(seed: int) -> None:
    # All streams at once (a loop over streams cost streams x events: 300,000 streams, 73 s):
    # touching and repeated intervals, streams interleaved in time, a stream of one event.
    rng = random.Random(seed)
    dev = DeviceEvents()
    for _ in range(rng.choice([1, 5, 200])):
        s = rng.randrange(1000)
        dev.starts.append(s)
        dev.ends.append(s + rng.choice([1, 5, rng.randrange(1, 300)]))
        dev.streams.append(rng.choice([7, 13, 20, 2**40, rng.randrange(10**6)]))
        dev.classes.append(DEVICE_COMPUTE)
        dev.launch_starts.append(-1)
        dev.launch_ends.append(-1)
    t = EventTable(has_device=True)
    t.device = dev
    bd = step_breakdown(t)
    assert bd is not None
    expected = {}
    for st in set(dev.streams):
        mine = [(a, b) for a, b, x in zip(dev.starts, dev.ends, dev.streams) if x == st]
        expected[st] = (len(mine), _union_ns(mine) / 1e3)
    assert {r["stream"]: (r["events"], r["busy_us"]) for r in bd["streams"]} == expected
    assert [r["busy_us"] for r in bd["streams"]] == sorted((b for _, b in expected.values()), reverse=True)
