"""Tests of neuronscope.drive.traces: Chrome-trace files from torch.profiler become results.

The expectations on the real A100 traces in ``tests/data/traces`` are derived here, independently,
by reading the JSON directly (counting events, summing durations, finding each launch's op by
brute force), never copied from neuronscope's own output.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import neuronscope.events.jsontext as trace_mod
import neuronscope.events.trace_reader as reader_mod
from neuronscope.drive.traces import from_trace, table_from_trace
from neuronscope.errors import NeuronscopeError, TraceFormatError
from neuronscope.events import IGNORED_NAMES, KIND_OP
from neuronscope.events.trace_files import find_trace_files

TRACES = Path(__file__).resolve().parent / "data" / "traces"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}

# ---- helpers ---------------------------------------------------------------------------------
@functools.cache
def raw(name: str) -> dict[str, Any]:
    with gzip.open(TRACES / name, "rb") as fh:
        return json.loads(fh.read())


@functools.cache
def result_of(name: str) -> Any:
    return from_trace(TRACES / name)


def x_events(doc: dict[str, Any], cats: set[str]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    doc = {"schemaVersion": 1, **top, "traceEvents": events}
    data = json.dumps(doc).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def op(name: str, ts: float, dur: float, pid: int = 10, tid: int = 1, cat: str = "cpu_op", **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts: float, corr: int, pid: int = 10, tid: int = 1, cat: str = "cuda_runtime", name: str = "cudaLaunchKernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": 1,
            "args": {"correlation": corr, "External id": corr}}


def kernel(ts: float, dur: float, corr: int, ext: int | None = None, cat: str = "kernel", name: str = "k") -> dict:
    args: dict[str, Any] = {"correlation": corr, "device": 0, "stream": 7}
    if ext is not None:
        args["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


# ---- the real A100 traces --------------------------------------------------------------------
CUDA_TRACES = ["training_mm_record_shapes.json.gz", "a100_alexnet.json.gz", "a100_training_step.json.gz"]


@pytest.mark.parametrize("name", CUDA_TRACES)
def test_device_time_is_conserved(name: str) -> None:
    """Per-op self device time plus the unattributed rest is all the kernel/copy/set time."""
    doc = raw(name)
    total_us = sum(e["dur"] for e in x_events(doc, DEVICE_CATS))
    res = result_of(name)
    assert res.backend == "cuda"
    assert res.device_unattributed_us is not None
    got = sum(o.self_device_us for o in res.ops) + res.device_unattributed_us
    assert got == pytest.approx(total_us, rel=1e-9, abs=1e-3)
    # The README of tests/data/traces measured 98.5% to 100% launched from inside a cpu_op.
    assert res.device_unattributed_us <= 0.02 * total_us


def _key_averages_counts(doc: dict[str, Any]) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(calls, total CPU us) per op name as ``key_averages()`` counts them, from the JSON.

    Ops are ``cpu_op`` events and runtime calls (``cudaLaunchKernel`` ...). Nesting is per
    (pid, tid) over every CPU-side event; an event whose parent has its name and no other
    child is folded into that parent (one call fewer), as ``EventList._remove_dup_nodes`` does.
    """
    cpu_side = {"cpu_op", "user_annotation", "python_function"} | RUNTIME_CATS
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = collections.defaultdict(list)
    for e in x_events(doc, cpu_side):
        if e["name"] not in IGNORED_NAMES:
            by_thread[(e["pid"], e["tid"])].append(e)
    parent: dict[int, dict[str, Any] | None] = {}
    children: collections.Counter[int] = collections.Counter()
    def ns(us: float) -> int:
        return round(us * 1000)

    for events in by_thread.values():
        events.sort(key=lambda e: (ns(e["ts"]), -ns(e["dur"])))
        stack: list[dict[str, Any]] = []
        for e in events:
            start, dur = ns(e["ts"]), ns(e["dur"])
            reach = start + dur if dur > 0 else start + 1  # an instant must start inside
            while stack and ns(stack[-1]["ts"]) + ns(stack[-1]["dur"]) < reach:
                stack.pop()
            parent[id(e)] = stack[-1] if stack else None
            if stack:
                children[id(stack[-1])] += 1
            stack.append(e)
    calls: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    for events in by_thread.values():
        for e in events:
            if e["cat"] not in {"cpu_op"} | RUNTIME_CATS:
                continue
            p = parent[id(e)]
            if p is not None and p["name"] == e["name"] and children[id(p)] == 1:
                continue  # folded into its parent
            calls[e["name"]] += 1
            total[e["name"]] += e["dur"]
    return calls, total


@pytest.mark.parametrize("name", CUDA_TRACES + ["cpu_only.json.gz"])
def test_call_counts_and_cpu_totals_match_the_json(name: str) -> None:
    doc = raw(name)
    calls, total = _key_averages_counts(doc)
    res = result_of(name)
    assert {o.name: o.calls for o in res.ops} == dict(calls)
    for o in res.ops:
        assert o.cpu_total_us == pytest.approx(total[o.name], rel=1e-9, abs=2e-3)
        assert 0 <= o.self_cpu_us <= o.cpu_total_us + 1e-6
    # Ops that never nest in themselves: their calls are plain event counts.
    plain = collections.Counter(e["name"] for e in x_events(doc, {"cpu_op"}))
    for op_name in ("aten::addmm", "aten::mm", "aten::cudnn_convolution"):
        if op_name in plain:
            assert res.op(op_name).calls == plain[op_name]


def _device_time_by_brute_force(doc: dict[str, Any], op_name: str) -> tuple[float, float]:
    """(self device us of ``op_name``, its total device us), found the slow, obvious way: each
    launch's op is the cpu_op on its (pid, tid) that contains the launch timestamp and starts
    last (the innermost); a kernel's launch is the runtime event with its correlation."""
    ops_by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = collections.defaultdict(list)
    for e in x_events(doc, {"cpu_op"}):
        if e["name"] not in IGNORED_NAMES:
            ops_by_thread[(e["pid"], e["tid"])].append(e)
    launches = {e["args"]["correlation"]: e for e in x_events(doc, RUNTIME_CATS) if "correlation" in e["args"]}
    self_us = total_us = 0.0
    for k in x_events(doc, DEVICE_CATS):
        la = launches.get(k["args"].get("correlation"))
        if la is None:
            continue
        t = la["ts"]
        around = [o for o in ops_by_thread[(la["pid"], la["tid"])] if o["ts"] <= t <= o["ts"] + o["dur"]]
        if not around:
            continue
        innermost = max(around, key=lambda o: (o["ts"], -o["dur"]))
        if innermost["name"] == op_name:
            self_us += k["dur"]
        if any(o["name"] == op_name for o in around):
            total_us += k["dur"]  # same-name nesting does not occur for these ops
    return self_us, total_us


@pytest.mark.parametrize(
    "name, op_name",
    [
        ("training_mm_record_shapes.json.gz", "aten::addmm"),
        ("training_mm_record_shapes.json.gz", "aten::linear"),
        ("a100_alexnet.json.gz", "aten::addmm"),
        ("a100_alexnet.json.gz", "aten::cudnn_convolution"),
    ],
)
def test_device_time_of_one_op_recomputed_independently(name: str, op_name: str) -> None:
    doc = raw(name)
    self_us, total_us = _device_time_by_brute_force(doc, op_name)
    got = result_of(name).op(op_name)
    assert got is not None
    assert got.self_device_us == pytest.approx(self_us, rel=1e-9, abs=1e-6)
    assert got.device_total_us == pytest.approx(total_us, rel=1e-9, abs=1e-6)
    if op_name in ("aten::addmm", "aten::cudnn_convolution"):
        assert self_us > 0


def test_input_shapes_come_from_input_dims() -> None:
    doc = raw("training_mm_record_shapes.json.gz")
    dims = {json.dumps(e["args"]["Input Dims"]) for e in x_events(doc, {"cpu_op"}) if e["name"] == "aten::addmm"}
    shapes = result_of("training_mm_record_shapes.json.gz").op("aten::addmm").input_shapes
    assert shapes, "Input Dims were recorded in this trace"
    assert {json.dumps(s) for s in shapes} <= dims
    assert len(shapes) == min(len(dims), 8)  # events.MAX_SHAPES_PER_OP
    table, meta = table_from_trace(TRACES / "training_mm_record_shapes.json.gz")
    assert meta["record_shapes"] and len(table.shapes) == len(table)


def test_user_annotations_become_regions() -> None:
    doc = raw("a100_training_step.json.gz")
    ann: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for e in x_events(doc, {"user_annotation"}):
        key = "ProfilerStep*" if e["name"].startswith("ProfilerStep#") else e["name"]  # as key_averages
        ann[key] += e["dur"]
        count[key] += 1
    res = result_of("a100_training_step.json.gz")
    assert set(res.regions) == set(ann)
    for region, us in ann.items():
        assert res.regions[region].time_us == pytest.approx(us)
        assert res.regions[region].calls == count[region]
    step = res.regions["ProfilerStep*"]
    assert step.calls == 6 and step.ops and step.device_time_us > 0


def test_kernels_launched_outside_any_op_count_for_the_range_they_were_launched_in() -> None:
    """FusedAdam launches its kernels from C++, outside any cpu_op but inside the
    ``## optimizer ##`` range: that region's device time is theirs (derived from the JSON:
    the launch's thread and time, the range on that thread around it)."""
    doc = raw("a100_training_step.json.gz")
    kernels = {e["args"]["correlation"]: e["dur"] for e in x_events(doc, DEVICE_CATS) if "correlation" in e["args"]}
    ranges = [e for e in x_events(doc, {"user_annotation"}) if e["name"] == "## optimizer ##"]
    ops = x_events(doc, {"cpu_op"})

    def inside(e: dict[str, Any], outer: dict[str, Any]) -> bool:
        return e["tid"] == outer["tid"] and outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"]

    expected = 0.0
    for launch_event in x_events(doc, RUNTIME_CATS):
        corr = launch_event["args"].get("correlation")
        if corr in kernels and any(inside(launch_event, r) for r in ranges) and not any(inside(launch_event, o) for o in ops):
            expected += kernels[corr]
    assert expected > 7000  # 48 multi_tensor_apply kernels, about 7.6 ms
    res = result_of("a100_training_step.json.gz")
    assert res.regions["## optimizer ##"].device_time_us == pytest.approx(expected, rel=1e-6)
    # ...and they are still counted as launched outside any op: nothing counted twice.
    assert res.device_unattributed_us >= expected


def test_backward_on_its_own_thread_counts_for_the_backward_range() -> None:
    """The A100 step runs backward on autograd's device thread while the main thread waits
    in ``## backward ##``: the kernels launched during that range, from any thread of the
    process, are the range's device time (derived from the JSON: launch time and thread)."""
    doc = raw("a100_training_step.json.gz")
    kernels = {e["args"]["correlation"]: e["dur"] for e in x_events(doc, DEVICE_CATS) if "correlation" in e["args"]}
    ranges = [(e["ts"], e["ts"] + e["dur"], e["pid"]) for e in x_events(doc, {"user_annotation"}) if e["name"] == "## backward ##"]
    launches = [e for e in x_events(doc, RUNTIME_CATS) if e["args"].get("correlation") in kernels]
    threads = {e["tid"] for e in launches if any(a <= e["ts"] <= b for a, b, _ in ranges)}
    assert len(threads) == 2  # the main thread and autograd's
    expected = sum(kernels[e["args"]["correlation"]] for e in launches if any(a <= e["ts"] <= b and p == e["pid"] for a, b, p in ranges))
    res = result_of("a100_training_step.json.gz")
    assert expected > 200_000  # about 246 ms, against 46 us counted from the main thread alone
    assert res.regions["## backward ##"].device_time_us == pytest.approx(expected, rel=0.01)
    assert "aten::mm" in {o.name for o in res.regions["## backward ##"].ops}


def test_metadata_backend_device_and_rank() -> None:
    res = result_of("a100_training_step.json.gz")
    assert res.device_name == "NVIDIA A100-PG509-200"
    assert (res.rank, res.world_size) == (3, 8)  # from distributedInfo
    assert res.ranks is None
    assert res.status == "ok" and res.wall_time_us > 0
    assert res.event_count == len(raw("a100_training_step.json.gz")["traceEvents"])
    cpu = result_of("cpu_only.json.gz")
    assert cpu.backend == "cpu"
    assert cpu.device_unattributed_us is None
    assert all(o.self_device_us is None and o.device_total_us is None for o in cpu.ops)
    assert set(cpu.regions) == {"ProfilerStep*", "gloo:all_reduce"}


def test_several_threads_kept_apart() -> None:
    """a100_training_step has ops on a forward and a backward thread; each thread is its own
    stack, so no op's self time goes negative and every thread key is (pid, tid)."""
    table, meta = table_from_trace(TRACES / "a100_training_step.json.gz")
    doc = raw("a100_training_step.json.gz")
    threads = {(e["pid"], e["tid"]) for e in x_events(doc, {"cpu_op", "user_annotation"})}
    assert threads <= set(meta["threads"].values())
    assert len({t for t in table.tids}) == len(threads)
    # Rows run by start time, parents first: the order the fusion matcher reads.
    assert all(
        (a, -b) <= (c, -d) for a, b, c, d in zip(table.starts, table.ends, table.starts[1:], table.ends[1:])
    )


def test_streaming_and_whole_document_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    path = TRACES / "training_mm_record_shapes.json.gz"  # 1.7 MiB of JSON: parsed at once
    at_once = from_trace(path).to_dict()
    monkeypatch.setattr(trace_mod, "WHOLE_AT_ONCE_BYTES", 0)  # streamed in 1 MiB chunks
    streamed = from_trace(path).to_dict()
    monkeypatch.setattr(trace_mod, "CHUNK_BYTES", 8 << 10)  # hundreds of small chunks
    small = from_trace(path).to_dict()

    def no_stream(*a: Any) -> Any:
        raise trace_mod.Fallback

    def not_the_usual_shape(data: bytes) -> Any:
        raise ValueError("as for NaN, lone surrogates or an odd layout")

    monkeypatch.setattr(reader_mod, "stream", no_stream)
    whole = from_trace(path).to_dict()
    monkeypatch.setattr(trace_mod, "_decode", not_the_usual_shape)  # the standard library's json
    stdlib = from_trace(path).to_dict()
    for d in (at_once, streamed, small, stdlib, whole):
        d.pop("started_at")
    assert at_once == streamed == small == stdlib == whole


def test_a_small_file_is_parsed_in_one_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """A document of at most WHOLE_AT_ONCE_BYTES never enters the chunked path (its buffer
    and copies cost a third of the reading time of a small file); a larger one does."""
    cuts: list[int] = []
    real_cut = trace_mod._cut
    monkeypatch.setattr(trace_mod, "_cut", lambda buf, *a, **k: (cuts.append(len(buf)), real_cut(buf, *a, **k))[1])
    path = TRACES / "training_mm_record_shapes.json.gz"
    assert from_trace(path).op("aten::mm").calls > 0
    assert cuts == []
    monkeypatch.setattr(trace_mod, "WHOLE_AT_ONCE_BYTES", 1 << 20)
    assert from_trace(path).op("aten::mm").calls > 0
    assert cuts and max(cuts) >= 1 << 20


# ---- a live capture, exported, against from_profiler -------------------------------------------
@pytest.fixture(scope="module")
def live_capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    from neuronscope.drive.pipeline import from_profiler

    x = torch.randn(32, 32)
    w = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, record_function("block"):
            for _ in range(10):
                with record_function("inner"):
                    y = torch.nn.functional.linear(x, w).relu()
                y = (y * 2 + 1).softmax(-1).sum()
    live = from_profiler(prof)
    path = tmp_path_factory.mktemp("live") / "capture.json"
    prof.export_chrome_trace(str(path))
    return live, path


@pytest.mark.parametrize("compressed", [False, True])
def test_exported_cpu_capture_matches_from_profiler(live_capture: tuple[Any, Path], compressed: bool, tmp_path: Path) -> None:
    live, path = live_capture
    if compressed:
        gz = tmp_path / "capture.json.gz"
        gz.write_bytes(gzip.compress(path.read_bytes()))
        path = gz
    res = from_trace(path)
    assert res.backend == "cpu" and res.name == "capture"
    assert {o.name: o.calls for o in res.ops} == {o.name: o.calls for o in live.ops}
    by_name = {o.name: o for o in res.ops}
    for o in live.ops:
        t = by_name[o.name]
        assert t.self_cpu_us == pytest.approx(o.self_cpu_us, rel=0.01, abs=0.01)
        assert t.cpu_total_us == pytest.approx(o.cpu_total_us, rel=0.01, abs=0.01)
        assert t.input_shapes == o.input_shapes
        assert t.self_device_us is None
    assert set(res.regions) == set(live.regions) == {"block", "inner"}
    for name, region in live.regions.items():
        assert res.regions[name].calls == region.calls
        assert res.regions[name].time_us == pytest.approx(region.time_us, rel=0.01)
        assert {o.name for o in res.regions[name].ops} == {o.name for o in region.ops}


def _hand_written_rms_norm(x: Any, w: Any, eps: float = 1e-6) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_stacks_and_fusion_hints_match_a_live_capture(tmp_path: Path) -> None:
    """with_stack=True: the trace gives the self times of the live capture, and the fusion
    rules find in the trace what they find live, located at the user's function."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.drive.pipeline import from_profiler

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for _ in range(5):
            _hand_written_rms_norm(x, w)
    live = from_profiler(prof)
    path = tmp_path / "stack.json"
    prof.export_chrome_trace(str(path))
    res = from_trace(path)
    assert {o.name: o.calls for o in res.ops} == {o.name: o.calls for o in live.ops}
    by_name = {o.name: o for o in res.ops}
    for o in live.ops:
        assert by_name[o.name].self_cpu_us == pytest.approx(o.self_cpu_us, rel=0.01, abs=0.01)
    assert {(h.pattern, h.calls) for h in res.fusion_hints} == {(h.pattern, h.calls) for h in live.fusion_hints}
    where = f"test_trace.py:{_hand_written_rms_norm.__code__.co_firstlineno}"  # a trace names the def line
    table, meta = table_from_trace(path)
    mul_rows = [i for i, nm in enumerate(table.names) if nm == "aten::mul"]
    assert mul_rows and all(meta["locations"][i].endswith(where) for i in mul_rows)
    for h in res.fusion_hints:
        assert h.location is not None and h.location.endswith(where)


def _rms_norm_capture(tmp_path: Path) -> tuple[Any, Path]:
    """A CPU capture of a hand-written RMSNorm (record_shapes=True), live and as its trace."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.drive.pipeline import from_profiler

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(5):
            _hand_written_rms_norm(x, w)
    path = tmp_path / "rms.json"
    prof.export_chrome_trace(str(path))
    return from_profiler(prof), path


def test_cpu_trace_fusion_estimates_are_the_live_captures(tmp_path: Path, calibrated: Path) -> None:
    """A CPU trace's fusion estimate is bounded by this machine's measured CPU costs, as the
    live capture's is: the profiled op times alone (which carry the profiler's per-op
    overhead) promised 5-10x what hint.verify() measured on real models' traces. The same
    capture, live and read back from its trace, gets the same estimate, and the trace's says
    where its costs were measured."""
    live, path = _rms_norm_capture(tmp_path)
    (want,) = [h for h in live.fusion_hints if h.pattern == "rms_norm"]
    (got,) = [h for h in from_trace(path).fusion_hints if h.pattern == "rms_norm"]
    assert got.calls == want.calls and got.time_us == pytest.approx(want.time_us, rel=0.01)
    assert got.est_saving_us == pytest.approx(want.est_saving_us, rel=0.05, abs=0.05)
    assert "measured on this machine's CPU" in got.details["estimate_model"]
    assert "measured on this machine's CPU" not in want.details["estimate_model"]


def test_cpu_trace_fusion_estimates_are_bounded_by_measured_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calibrated: Path) -> None:
    """Where this machine's CPU costs say fusing removes almost nothing (launches of 1 ns, a
    bandwidth of 10^6 bytes per ns), a trace's estimate says so too, whatever its op times."""
    from neuronscope.analysis import calibration, cost

    _, path = _rms_norm_capture(tmp_path)
    measured_here = [h for h in from_trace(path).fusion_hints if h.pattern == "rms_norm"]
    cheap = calibration.Calibration(1.0, ((1, 1e6),))
    monkeypatch.setattr(cost, "device_costs", lambda device="cpu", *a: cheap if device == "cpu" else None)
    monkeypatch.setattr(cost, "eager_costs", lambda *a, **k: None)
    monkeypatch.setattr(cost, "compiled_call_ns", lambda *a, **k: 0.0)
    (h,) = [h for h in from_trace(path).fusion_hints if h.pattern == "rms_norm"]
    # Five calls, each removing 4 launches of 1 ns and a few intermediates at 10^6 bytes per ns.
    assert 0 < h.est_saving_us * 1e3 <= 5 * (4 + 1)
    assert measured_here and measured_here[0].est_saving_us > 100 * h.est_saving_us


def test_a_cpu_trace_without_shapes_runs_no_cost_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without shapes there is nothing to cost: no probe runs (they import torch and time ops
    for a second or more), and the estimate says it is an upper bound."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.analysis import cost

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _hand_written_rms_norm(x, w)
    path = tmp_path / "noshapes.json"
    prof.export_chrome_trace(str(path))

    def probe(*args: Any) -> Any:
        raise AssertionError("a cost probe ran for a trace without shapes")

    for name in ("device_costs", "eager_costs", "compiled_call_ns"):
        monkeypatch.setattr(cost, name, probe)
    (h,) = [h for h in from_trace(path).fusion_hints if h.pattern == "rms_norm"]
    assert h.details["saving_upper_bound"] is True and h.saving_text.startswith("up to ~")


@pytest.mark.parametrize("device_cat", ["kernel", "mtia_ccp_events"])
def test_device_trace_estimates_are_not_costed_on_this_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device_cat: str) -> None:
    """A CUDA or MTIA trace's op times are its device's: nothing measured on this CPU bounds
    them (the estimate is the same whatever this CPU costs), its estimate_model claims no
    bound, and its hints name the device."""
    from neuronscope.analysis import calibration, cost

    x, row = [64, 256], [64, 1]
    chain = [("aten::pow", [x, []]), ("aten::mean", [x, []]), ("aten::add", [row, []]),
             ("aten::rsqrt", [row]), ("aten::mul", [x, row]), ("aten::mul", [x, [256]])]
    events = []
    for i, (name, dims) in enumerate(chain):
        events += [op(name, 10 * i, 8, **{"External id": i, "Input Dims": dims}), launch(10 * i + 2, 100 + i)]
        events.append(kernel(1000 + 10 * i, 5, 100 + i, ext=i, cat=device_cat))
    path = write_trace(tmp_path / "t.json", events)

    def hint() -> Any:
        (h,) = [h for h in from_trace(path).fusion_hints if h.pattern == "rms_norm"]
        return h

    h = hint()
    backend = "cuda" if device_cat == "kernel" else "mtia"
    assert h.details["device"] == h.details["backend"] == backend and h.details["time_source"] == "device"
    assert "at most" not in h.details["estimate_model"] and h.est_saving_us > 0
    cheap = calibration.Calibration(1.0, ((1, 1e6),))  # this CPU: fusing would remove almost nothing
    monkeypatch.setattr(cost, "device_costs", lambda device="cpu", *a: cheap if device == "cpu" else None)
    assert hint().est_saving_us == h.est_saving_us


# ---- synthetic traces: linking rules -----------------------------------------------------------
def _cuda_events() -> list[dict[str, Any]]:
    return [
        op("step", 0, 100, cat="user_annotation"),
        op("outer", 10, 50, **{"External id": 1, "Input Dims": [[4, 4], []]}),
        op("inner", 20, 20, **{"External id": 2, "Input Dims": [[4, 4]]}),
        launch(25, 100),  # inside inner
        launch(45, 101),  # inside outer only
        launch(70, 102),  # inside the annotation, outside any op
        kernel(200, 7, 100),
        kernel(210, 5, 101),
        kernel(220, 3, 102, cat="gpu_memcpy"),
        kernel(230, 11, 999, ext=2),  # launch not recorded; External id names "inner"
        kernel(240, 13, 998, ext=998),  # External id is a copy of the correlation: no link
        {"ph": "X", "cat": "gpu_user_annotation", "name": "step", "pid": 0, "tid": 7, "ts": 200, "dur": 53,
         "args": {"External id": 0}},
        # python frames: a user one around the ops, a torch one inside it
        op("model.py(12): forward", 5, 90, cat="python_function"),
        op("torch/nn/modules/module.py(1527): _call_impl", 8, 85, cat="python_function"),
        # another process, same tid, overlapping in time: not a child of outer/inner
        op("other", 30, 20, pid=11),
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "s", "id": 100, "pid": 10, "tid": 1, "ts": 25, "cat": "ac2g", "name": "ac2g"},
    ]


def test_device_time_goes_to_the_innermost_launching_op(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "cuda.json", _cuda_events(), deviceProperties=[{"id": 0, "name": "Fake GPU"}]
    )
    res = from_trace(path)
    assert res.backend == "cuda" and res.device_name == "Fake GPU"
    outer, inner, other = res.op("outer"), res.op("inner"), res.op("other")
    assert (inner.self_device_us, inner.device_total_us) == (18.0, 18.0)  # 7 launched + 11 by External id
    assert (outer.self_device_us, outer.device_total_us) == (5.0, 23.0)
    # The launches inside are children too, as in key_averages: 50 - 20 (inner) - 1 (launch).
    assert (outer.self_cpu_us, outer.cpu_total_us) == (29.0, 50.0)
    assert inner.self_cpu_us == 19.0
    assert res.op("cudaLaunchKernel").calls == 3 and res.op("cudaLaunchKernel").self_device_us == 0.0
    assert other.self_cpu_us == 20.0 and other.self_device_us == 0.0
    assert res.device_unattributed_us == 16.0  # 3 (outside any op) + 13 (unlinked)
    assert sum(o.self_device_us for o in res.ops) + res.device_unattributed_us == 7 + 5 + 3 + 11 + 13
    assert res.regions["step"].time_us == 100.0
    # The ops' 23 and the 3 launched outside any op inside the range; gpu_user_annotation not again.
    assert res.regions["step"].device_time_us == 26.0
    assert "step" not in {o.name for o in res.ops}
    assert not any(o.name.startswith(("model.py", "torch/")) for o in res.ops)
    assert outer.input_shapes == [[[4, 4], []]]
    table, meta = table_from_trace(path)
    assert meta["device_linked_by_correlation"] == 2 and meta["device_linked_by_external_id"] == 1
    assert meta["device_unattributed_events"] == 2
    assert sorted(meta["threads"].values()) == [(10, 1), (11, 1)]
    locs = {table.names[i]: meta["locations"][i] for i in range(len(table))}
    assert locs["outer"] == locs["inner"] == "model.py:12"
    assert locs["other"] is None
    assert [table.names[i] for i in range(len(table)) if table.kinds[i] == KIND_OP] == ["outer", "inner", "other"]


def test_float_timestamps_in_nanosecond_precision(tmp_path: Path) -> None:
    events = [op("a", 1000.125, 10.5), op("b", 1002.25, 3.125)]
    res = from_trace(write_trace(tmp_path / "f.json", events))
    assert res.op("a").self_cpu_us == pytest.approx(7.375)
    assert res.op("b").cpu_total_us == pytest.approx(3.125)
    assert res.backend == "cpu" and res.wall_time_us == pytest.approx(10.5)


def test_rocm_counts_as_cuda(tmp_path: Path) -> None:
    events = [op("aten::mm", 0, 10), launch(2, 5, name="hipLaunchKernel"), kernel(20, 4, 5)]
    _, meta = table_from_trace(write_trace(tmp_path / "rocm.json", events))
    assert meta["backend"] == "cuda" and meta["platform"] == "rocm"
    res = from_trace(tmp_path / "rocm.json")
    assert res.op("aten::mm").self_device_us == 4.0


@pytest.mark.parametrize("device_cat", ["kernel", "privateuse1_kernel"])
def test_privateuse1_device_events_mean_neuron(tmp_path: Path, device_cat: str) -> None:
    events = [
        op("aten::add", 0, 10),
        launch(3, 42, cat="privateuse1_runtime", name="nrt_execute"),
        kernel(50, 9, 42, cat=device_cat),
    ]
    res = from_trace(write_trace(tmp_path / "neuron.json", events))
    assert res.backend == "neuron"
    assert res.op("aten::add").self_device_us == 9.0


def test_newer_torch_external_id_link(tmp_path: Path) -> None:
    """torch 2.x writes the op's External id on its kernels; with the runtime event missing
    (filtered out, say) that alone links the kernel."""
    events = [op("aten::mm", 0, 10, **{"External id": 7}), kernel(20, 6, 1393, ext=7)]
    res = from_trace(write_trace(tmp_path / "ext.json", events))
    assert res.op("aten::mm").self_device_us == 6.0 and res.device_unattributed_us == 0.0


def test_metadata_after_events_and_odd_names_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Top-level keys after traceEvents, and "}, {" inside names, through many small chunks."""
    events = []
    for i in range(400):
        events.append(op("aten::mul", i * 10, 5, **{"External id": i}))
        events.append(launch(i * 10 + 1, 10_000 + i))
        events.append(kernel(5000 + i * 10, 2, 10_000 + i, name="void f<{lambda()#1}, {lambda()#2}>(}, {)"))
    doc = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"name": "After GPU"}],
           "traceName": "x ]}, { ] } ,{"}
    path = tmp_path / "late.pt.trace.json"
    path.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(trace_mod, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(trace_mod, "WHOLE_AT_ONCE_BYTES", 0)
    res = from_trace(path)
    assert res.op("aten::mul").calls == 400
    assert res.op("aten::mul").self_device_us == 800.0
    assert res.device_name == "After GPU" and res.name == "late"


def test_compiled_code_recorded_as_a_range_owns_its_kernels(tmp_path: Path) -> None:
    """torch.compile's call shows as a user_annotation when shapes are recorded; the Triton
    kernels launched inside it are its device time, not time launched outside any op."""
    events = [
        op("## Call CompiledFxGraph fabc123 ##", 0, 50, cat="user_annotation"),
        launch(10, 1, name="cuLaunchKernel", cat="cuda_driver"),
        kernel(100, 30, 1, name="triton_poi_fused_add_mul_0"),
    ]
    res = from_trace(write_trace(tmp_path / "compiled.json", events))
    assert res.device_unattributed_us == 0.0
    assert sum(o.self_device_us for o in res.ops) == 30.0


def test_json_array_format(tmp_path: Path) -> None:
    path = tmp_path / "array.json"
    path.write_text(json.dumps([op("aten::relu", 0, 4), op("aten::relu", 10, 6)]))
    assert from_trace(path).op("aten::relu").calls == 2


def test_empty_capture_is_an_empty_result(tmp_path: Path) -> None:
    res = from_trace(write_trace(tmp_path / "empty.json", []))
    assert res.ops == [] and res.backend == "cpu" and res.wall_time_us == 0


# ---- several files: ranks ----------------------------------------------------------------------
MS = 1000.0  # trace timestamps are in microseconds


def _rank_trace(path: Path, rank: int | None, scale: float, world: int | None = 2) -> Path:
    """One step of 100 ms x scale: aten::mm 40 ms x scale, aten::add 5 ms x scale."""
    events = [
        op("ProfilerStep#1", 0, 100 * scale * MS, cat="user_annotation"),
        op("aten::mm", 10 * scale * MS, 40 * scale * MS),
        op("aten::add", 60 * scale * MS, 5 * scale * MS),
    ]
    top: dict[str, Any] = {}
    if rank is not None:
        top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return write_trace(path, events, **top)


def test_directory_of_rank_files(tmp_path: Path) -> None:
    run = tmp_path / "tb"
    run.mkdir()
    _rank_trace(run / "host_1.1700000000001.pt.trace.json.gz", 1, 3.0)
    _rank_trace(run / "host_0.1700000000000.pt.trace.json.gz", 0, 1.0)
    (run / "notes.json").write_text("{}")  # not a trace: ignored
    res = from_trace(run)
    assert res.rank == 0 and res.world_size == 2 and res.name == "tb"
    assert [r["rank"] for r in res.ranks] == [0, 1]
    r0, r1 = res.ranks
    assert r0["wall_time_us"] == pytest.approx(100 * MS) and r1["wall_time_us"] == pytest.approx(300 * MS)
    assert r0["top_op"] == r1["top_op"] == "aten::mm"
    assert r1["total_op_us"] == pytest.approx(3 * r0["total_op_us"]) and r0["total_op_us"] == pytest.approx(45 * MS)
    assert res.wall_time_us == pytest.approx(100 * MS)  # rank 0's own result
    assert r1["run_dir"].endswith("host_1.1700000000001.pt.trace.json.gz")
    # Rank 1 took 3x the median: a straggler hint, as a live multi-process capture gives.
    (straggler,) = [h for h in res.hints if h.kind == "straggler"]
    # The rank's wall time, not an op's: no op is said to cost it; its busiest op is named.
    assert straggler.details["rank"] == 1 and straggler.ops == [] and straggler.time_us == pytest.approx(300 * MS)
    assert r1["top_op_us"] == pytest.approx(120 * MS) and "its busiest op is aten::mm (120.00 ms)" in straggler.message
    listed = from_trace(sorted(run.glob("*.pt.trace.json.gz"), reverse=True))
    assert listed.ranks == res.ranks and listed.rank == 0
    assert res.to_dict()["ranks"] == res.ranks


def test_ranks_from_file_names_and_workers(tmp_path: Path) -> None:
    a = _rank_trace(tmp_path / "neuron_framework_trace_rank_1.json", None, 2.0)
    b = _rank_trace(tmp_path / "neuron_framework_trace_rank_0.json", None, 1.0)
    res = from_trace([a, b])
    assert [r["rank"] for r in res.ranks] == [0, 1] and res.world_size == 2
    # tensorboard_trace_handler: several captures of one worker are one rank, read together.
    run = tmp_path / "steps"
    run.mkdir()
    _rank_trace(run / "w.100.pt.trace.json", None, 1.0)
    second = write_trace(run / "w.200.pt.trace.json", [op("aten::mm", 1000 * MS, 40 * MS)])
    assert second.exists()
    res = from_trace(run)
    assert res.ranks is None and res.op("aten::mm").calls == 2
    assert res.wall_time_us == pytest.approx(140 * MS)  # the two captures' spans, not the gap


def test_ranks_of_exported_run_directories(tmp_path: Path) -> None:
    """neuronscope's own multi-process runs: <stamp>_<host>_pid<pid>_rank<r>/trace.json.gz."""
    for r, scale in ((0, 1.0), (1, 1.1)):
        d = tmp_path / f"20250101-000000-000000_host_pid{100 + r}_rank{r}"
        d.mkdir()
        _rank_trace(d / "trace.json.gz", None, scale)
        (d / "result.json").write_text("{}")
    res = from_trace(tmp_path)
    assert [e["rank"] for e in res.ranks] == [0, 1] and res.rank == 0
    assert not [h for h in res.hints if h.kind == "straggler"]  # 10% slower: within the threshold


def test_separate_runs_are_not_taken_for_ranks(tmp_path: Path) -> None:
    """Three captures of one name (no rank anywhere) are three runs: refused, naming one."""
    for stamp in ("20250101-000000-000001", "20250101-000000-000002", "20250101-000000-000003"):
        d = tmp_path / f"{stamp}_host_pid7"
        d.mkdir()
        _rank_trace(d / "trace.json.gz", None, 1.0)
    with pytest.raises(TraceFormatError, match=r"separate runs; pass one of them \(the newest is .*000003_host_pid7\)"):
        from_trace(tmp_path)
    assert from_trace(tmp_path / "20250101-000000-000002_host_pid7").op("aten::mm").calls >= 1
    # Listed by hand, they are taken as what the user says: one job's ranks.
    listed = sorted(tmp_path.glob("*/trace.json.gz"))
    assert [e["rank"] for e in from_trace(listed).ranks] == [0, 1, 2]


def test_find_trace_files_neuron_layout(tmp_path: Path) -> None:
    session = tmp_path / "i-0abc_pid_42" / "20250101_000000"
    session.mkdir(parents=True)
    _rank_trace(session / "trace.json", 0, 1.0, world=1)
    (session / "ntrace.pb").write_bytes(b"\0")
    assert find_trace_files(tmp_path) == [session / "trace.json"]
    assert from_trace(tmp_path).op("aten::mm").calls == 1


# ---- malformed input ---------------------------------------------------------------------------
def _good_bytes() -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": [op("aten::mm", i, 1) for i in range(200)]}).encode()


@pytest.mark.parametrize(
    "filename, content, words",
    [
        ("empty.json", b"", "empty"),
        ("blank.json", b"  \n ", "empty"),
        ("empty.json.gz", gzip.compress(b""), "empty"),
        ("truncated.json", _good_bytes()[:-300], "truncated"),
        ("truncated.json.gz", gzip.compress(_good_bytes())[:-40], "truncated"),
        ("text.json", b"this is not json at all", "not valid JSON"),
        ("garbage.json.gz", b"\x1f\x8b\x08\x00garbage-garbage-garbage", "cannot read"),
        ("other.json", b'{"name": "x", "values": [1, 2]}', "traceEvents"),
        ("number.json", b"42", "not a Chrome trace"),
        ("events_not_list.json", b'{"traceEvents": 5}', "its 'traceEvents' is a int, not a list"),
        ("foreign.json", json.dumps({"traceEvents": [{"ph": "X", "cat": "v8", "name": "f", "ts": 1, "dur": 2}]}).encode(),
         "no torch.profiler events"),
        ("badevent.json", json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "dur": 2}]}).encode(),
         "malformed trace event"),
        ("notdict.json", json.dumps({"schemaVersion": 1, "traceEvents": [1, 2]}).encode(), "malformed trace event"),
    ],
)
def test_malformed_input_raises_trace_format_error(tmp_path: Path, filename: str, content: bytes, words: str) -> None:
    path = tmp_path / filename
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as info:
        from_trace(path)
    assert str(path) in str(info.value)
    assert words in str(info.value)
    assert isinstance(info.value, NeuronscopeError)


def test_missing_paths_and_empty_directories(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        from_trace(tmp_path / "nope.json")
    with pytest.raises(TraceFormatError, match="no torch.profiler trace files"):
        from_trace(tmp_path)
    with pytest.raises(TraceFormatError, match="no such file"):
        from_trace([tmp_path / "nope.json"])
    with pytest.raises(TraceFormatError, match="empty list"):
        from_trace([])


def test_shared_traces_are_untouched(tmp_path: Path) -> None:
    """Reading never writes: a copy read in place keeps its bytes."""
    copy = tmp_path / "cpu_only.json.gz"
    shutil.copy(TRACES / "cpu_only.json.gz", copy)
    before = copy.read_bytes()
    from_trace(copy)
    assert copy.read_bytes() == before == (TRACES / "cpu_only.json.gz").read_bytes()


def test_show_opens_a_set_of_rank_files_and_trace_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from neuronscope.cli import main

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copy(TRACES / "training_mm_record_shapes.json.gz", ranks / "r0.json.gz")
    shutil.copy(TRACES / "a100_training_step.json.gz", ranks / "r3.json.gz")
    for argv in (["show", str(ranks)], ["show", str(ranks / "r0.json.gz"), str(ranks / "r3.json.gz")]):
        capsys.readouterr()
        assert main([*argv, "--rows", "2"]) == 0, argv
        out = capsys.readouterr().out
        assert "Ranks:" in out and "r0.json.gz" in out and "r3.json.gz" in out
        assert out.splitlines()[0].endswith("rank 0/2")  # two ranks that disagree on the world size
    # What tensorboard_trace_handler writes: <dir>/<worker>.<ms>.pt.trace.json.gz, one level down.
    tb = tmp_path / "tb" / "run1"
    tb.mkdir(parents=True)
    shutil.copy(TRACES / "a100_alexnet.json.gz", tb / "host_1.1695835535.pt.trace.json.gz")
    capsys.readouterr()
    assert main(["show", str(tmp_path / "tb"), "--rows", "2"]) == 0
    assert "aten::" in capsys.readouterr().out
    # A neuronscope run directory without its result.json is not read as a folder of traces.
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TRACES / "a100_alexnet.json.gz", run / "trace.json.gz")
    assert main(["show", str(run)]) == 2
