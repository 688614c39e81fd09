"""The event table and its summary agree with ``key_averages()``.

Real captures of varied work (nested ``record_function`` ranges, two Python threads, autograd
backward, ``with_stack``, ``record_shapes``, ``profile_memory``) are compared op by op with
``prof.key_averages()``; the device-time rules, which need a GPU to capture, are compared with
torch's own ``EventList`` on random tables and on a real A100 trace.

Where ``key_averages()`` lists rows that neuronscope does not report as ops, the comparison
leaves them out, and says so here:

- Python frames (``with_stack=True``) are rows of ``key_averages`` and never ops here. Nor are
  they children in the nesting: an op that calls back into Python (a compiled graph's generated
  code, a Python kernel) keeps that time as its own self time, where ``key_averages`` gives it
  to the frame's row (``test_python_time_inside_an_op_stays_the_ops_own``). The two agree on
  every op that does not.
- ``[memory]``: with ``profile_memory=True`` ``key_averages`` adds a zero-time row for the
  allocations made outside every op.
- ``record_function`` ranges are regions here, not ops.

And one ``key_averages`` quirk that neuronscope reproduces on purpose, because it changes op
counts: an event whose parent has the same name and no other child is folded into that parent
(``EventList._remove_dup_nodes``), so the pair counts as one call, and the parent's own device
time is replaced by the child's.
"""

from __future__ import annotations

import gzip
import json
import random
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from neuronscope import events as ev
from neuronscope.drive.pipeline import from_profiler
from neuronscope.errors import NeuronscopeError
from neuronscope.events import (
    FLAG_ASYNC,
    FLAG_LEGACY_DEVICE,
    IGNORED_NAMES,
    KIND_ANNOTATION,
    KIND_OP,
    KIND_PYTHON,
    KIND_RUNTIME,
    EventTable,
    attach_device_time,
    live,
    table_from_profiler,
)
from neuronscope.events.nesting import add_inner_range_device_time
from neuronscope.result.summary import Summary, summarize

SHARED_TRACES = Path(__file__).resolve().parent / "data" / "traces"


# ---- real captures --------------------------------------------------------------------------
class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("mlp"):
            h = torch.relu(self.a(x))
            with record_function("head"):
                return self.b(h).softmax(-1)


def _work(model: _Mlp, x: torch.Tensor, steps: int = 3) -> None:
    """Nested ranges (one nested in a range of its own name), a second Python thread running
    ops at the same time, and autograd backward."""

    def side() -> None:
        y = torch.randn(32, 32)
        for _ in range(15):
            with record_function("side"):
                y = (y @ y).tanh()

    t = threading.Thread(target=side)
    t.start()
    for _ in range(steps):
        with record_function("step"):
            with record_function("step"):
                loss = model(x).pow(2).mean()
            loss.backward()
    t.join()


_CAPTURES: dict[str, Any] = {}

CAPTURE_SETTINGS = {
    "plain": {},
    "with_stack": {"with_stack": True},
    "shapes_memory": {"record_shapes": True, "profile_memory": True},
    "all": {"with_stack": True, "record_shapes": True, "profile_memory": True},
}


def _all_threads() -> dict[str, Any]:
    """Record the second Python thread too: torch.profiler records only the thread that
    started it (and the threads torch itself hands work to) unless asked (torch >= 2.6)."""
    try:
        return {"experimental_config": torch.profiler._ExperimentalConfig(profile_all_threads=True)}
    except TypeError:  # pragma: no cover - older torch
        return {}


def _capture(setting: str) -> Any:
    """One real capture per setting, shared by the tests that read it."""
    if setting not in _CAPTURES:
        torch.manual_seed(0)
        model, x = _Mlp(), torch.randn(4, 16)
        _work(model, x, steps=1)  # warm up lazy initialisation outside the capture
        with profile(activities=[ProfilerActivity.CPU], **CAPTURE_SETTINGS[setting], **_all_threads()) as prof:
            _work(model, x)
        _CAPTURES[setting] = prof
    return _CAPTURES[setting]


def _python_frame_names(prof: Any) -> set[str]:
    # As the reader asks: torch 2.11's raw events have no activity_type, and it is guessed there.
    return {e.name() for e in prof.profiler.kineto_results.events() if live._activity_getter(type(e))(e) == "python_function"}


def _key_average_ops(prof: Any) -> dict[str, Any]:
    """key_averages' rows that neuronscope reports as ops (see the module docstring)."""
    frames = _python_frame_names(prof)
    return {
        e.key: e
        for e in prof.key_averages()
        if not e.is_user_annotation and e.key not in frames and e.key != "[memory]"
    }


def _close(a: float, b: float) -> bool:
    """Within 1%, or 0.01 us for near-zero values (key_averages sums float microseconds)."""
    return abs(a - b) <= 0.01 * abs(b) + 0.01


@pytest.mark.parametrize("setting", list(CAPTURE_SETTINGS))
def test_ops_match_key_averages(setting: str) -> None:
    prof = _capture(setting)
    summary = summarize(table_from_profiler(prof, record_shapes=CAPTURE_SETTINGS[setting].get("record_shapes", False)))
    expected = _key_average_ops(prof)
    ours = {o.name: o for o in summary.ops}
    assert set(ours) == set(expected)
    # The workload really has what the test is about.
    assert {"aten::mm", "aten::addmm"} <= set(ours)
    assert any(name.startswith("autograd::engine::evaluate_function") for name in ours)
    if _all_threads():
        assert "aten::tanh" in ours
        assert len(set(table_from_profiler(prof).tids)) >= 2
    for name, e in expected.items():
        o = ours[name]
        assert o.calls == e.count, name
        assert _close(o.self_cpu_us, e.self_cpu_time_total), (name, o.self_cpu_us, e.self_cpu_time_total)
        assert _close(o.cpu_total_us, e.cpu_time_total), (name, o.cpu_total_us, e.cpu_time_total)
        assert o.self_device_us is None and o.device_total_us is None  # a CPU capture
    assert summary.op_events == sum(o.calls for o in summary.ops)


def test_python_frames_nest_but_are_not_ops() -> None:
    prof = _capture("with_stack")
    table = table_from_profiler(prof)
    assert table.others is not None
    assert set(table.others.kinds) == {KIND_PYTHON}
    assert KIND_PYTHON not in set(table.kinds)
    frames = _python_frame_names(prof)
    assert not frames & {o.name for o in summarize(table).ops}
    # Leaving the frames out of the nesting changes nothing for ops that never call back into
    # Python, and the totals of every op stay those of key_averages (checked above).
    table.others = None
    bare = {o.name: o for o in summarize(table).ops}
    assert bare["aten::mm"].calls == _key_average_ops(prof)["aten::mm"].count


@torch.library.custom_op("neuronscope_test::busy_double", mutates_args=())
def _busy_double(x: torch.Tensor) -> torch.Tensor:
    """An op with a Python kernel that spends 3 ms in Python itself."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.003:
        pass
    return x * 2


def test_python_time_inside_an_op_stays_the_ops_own() -> None:
    """with_stack=True: the Python an op calls back into is that op's self time here, where
    key_averages gives it to the frame's row (a compiled graph's work would vanish likewise)."""
    x = torch.ones(4)
    _busy_double(x)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        _busy_double(x)
    op = {o.name: o for o in summarize(table_from_profiler(prof)).ops}["neuronscope_test::busy_double"]
    ka = {e.key: e for e in prof.key_averages()}["neuronscope_test::busy_double"]
    assert op.calls == ka.count == 1 and _close(op.cpu_total_us, ka.cpu_time_total)
    assert op.self_cpu_us >= 3000 > 10 * ka.self_cpu_time_total  # key_averages: the frame has it
    children = op.cpu_total_us - op.self_cpu_us  # aten::mul and its copy, nothing of Python
    assert children < 0.2 * op.cpu_total_us


def test_regions_match_key_averages_ranges() -> None:
    prof = _capture("plain")
    summary = summarize(table_from_profiler(prof))
    ranges = {e.key: e for e in prof.key_averages() if e.is_user_annotation}
    for name in ("mlp", "head", "side") if _all_threads() else ("mlp", "head"):
        region, row = summary.regions[name], ranges[name]
        assert region.calls == row.count
        assert _close(region.time_us, row.cpu_time_total)
        assert region.device_time_us is None
    # "step" inside "step" (the outer one also holds backward): each range counts, and an op
    # inside both counts once for "step".
    assert summary.regions["step"].calls == ranges["step"].count == 6
    step_ops = {o.name: o for o in summary.regions["step"].ops}
    assert step_ops["aten::addmm"].calls == {o.name: o for o in summary.ops}["aten::addmm"].calls
    if _all_threads():
        mm_in_side = {o.name: o for o in summary.regions["side"].ops}["aten::mm"]
        # Its own 15, plus any the main thread's backward started while a "side" range was open
        # (other threads' work inside a range counts: that depends on how the threads
        # interleaved, so only the lower bound is fixed).
        assert 15 <= mm_in_side.calls <= {o.name: o for o in summary.ops}["aten::mm"].calls
    head_ops = {o.name for o in summary.regions["head"].ops}
    assert "aten::softmax" in head_ops and "aten::relu" not in head_ops
    mlp_ops = {o.name: o for o in summary.regions["mlp"].ops}
    assert mlp_ops["aten::relu"].calls == 3
    assert mlp_ops["aten::softmax"].calls == 3  # through "head", counted for "mlp" too


def test_a_range_folded_by_key_averages_still_counts_as_a_region() -> None:
    x = torch.randn(4, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("a"):
        with record_function("a"):  # the outer one's only child, of the same name
            x.mul(x)
    ranges = {e.key: e.count for e in prof.key_averages() if e.is_user_annotation}
    summary = summarize(table_from_profiler(prof))
    assert ranges["a"] == 1  # key_averages' quirk: the inner range is folded away
    assert summary.regions["a"].calls == 2
    assert [(o.name, o.calls) for o in summary.regions["a"].ops] == [("aten::mul", 1)]


def test_shapes_are_signatures_key_averages_saw() -> None:
    prof = _capture("shapes_memory")
    summary = summarize(table_from_profiler(prof, record_shapes=True))
    seen: dict[str, list[Any]] = {}
    for e in prof.key_averages(group_by_input_shape=True):
        seen.setdefault(e.key, []).append(e.input_shapes)
    addmm = next(o for o in summary.ops if o.name == "aten::addmm")
    assert addmm.input_shapes
    for op in summary.ops:
        assert len(op.input_shapes) <= ev.MAX_SHAPES_PER_OP
        for shape in op.input_shapes:
            assert shape in seen[op.name], op.name


def test_memory_markers_are_dropped() -> None:
    table = table_from_profiler(_capture("shapes_memory"))
    assert not IGNORED_NAMES & set(table.names)
    assert table.others is None or not IGNORED_NAMES & set(table.others.names)


def test_reading_in_small_chunks_gives_the_same_table(monkeypatch: pytest.MonkeyPatch) -> None:
    prof = _capture("all")
    whole = table_from_profiler(prof, record_shapes=True)
    monkeypatch.setattr(live, "READ_CHUNK", 7)
    chunked = table_from_profiler(prof, record_shapes=True)
    for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns", "shapes", "flags"):
        assert getattr(chunked, attr) == getattr(whole, attr), attr
    assert whole.others is not None and chunked.others is not None
    assert chunked.others.names == whole.others.names
    assert chunked.raw_event_count == whole.raw_event_count


def test_fallback_through_function_events_gives_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older torch whose raw events lack an accessor is read through prof.events()."""
    prof = _capture("all")
    fast = summarize(table_from_profiler(prof, record_shapes=True))
    monkeypatch.setattr(live, "_ACCESSORS", live._ACCESSORS + ("no_such_accessor",))
    table = table_from_profiler(prof, record_shapes=True)
    assert table.others is not None and set(table.others.kinds) == {KIND_PYTHON}
    slow = {o.name: o for o in summarize(table).ops}
    assert set(slow) == {o.name for o in fast.ops}
    for o in fast.ops:
        s = slow[o.name]
        assert s.calls == o.calls, o.name
        assert _close(s.self_cpu_us, o.self_cpu_us) and _close(s.cpu_total_us, o.cpu_total_us), o.name
        assert s.input_shapes == o.input_shapes, o.name


def test_a_torch_without_activity_type_reads_the_same_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.11's raw events have no activity_type: guessed from the device type, the range
    flag and the name, a real capture (ops, ranges, Python frames, memory events, async
    backward) reads as it does with the accessor."""
    prof = _capture("all")
    raw = prof.profiler.kineto_results.events()
    if raw and not hasattr(raw[0], "activity_type"):
        pytest.skip("this torch's raw events have no activity_type to check the guesses against")
    guessed = Counter((e.activity_type(), live._guessed_activity(e)) for e in raw)
    assert all(real == guess for real, guess in guessed), guessed
    assert {real for real, _ in guessed} >= {"cpu_op", "user_annotation", "python_function"}
    with_accessor = table_from_profiler(prof, record_shapes=True)
    monkeypatch.setattr(live, "_activity_getter", lambda ev_type: live._guessed_activity)
    without = table_from_profiler(prof, record_shapes=True)
    for attr in ("names", "kinds", "tids", "starts", "ends", "device_ns", "shapes", "flags"):
        assert getattr(without, attr) == getattr(with_accessor, attr), attr
    assert with_accessor.others is not None and without.others is not None
    assert (without.others.names, without.others.kinds) == (with_accessor.others.names, with_accessor.others.kinds)


def test_profiler_step_ranges_group_as_key_averages_does() -> None:
    x = torch.randn(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Profiler won't be using warmup"
        sched = torch.profiler.schedule(wait=0, warmup=0, active=3, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched) as prof:
        for _ in range(3):
            x.mul(x)
            prof.step()
    summary = summarize(table_from_profiler(prof))
    ranges = {e.key: e.count for e in prof.key_averages() if e.is_user_annotation}
    assert ranges["ProfilerStep*"] == 3
    assert summary.regions["ProfilerStep*"].calls == 3
    assert not any(name.startswith("ProfilerStep#") for name in summary.regions)


def test_from_profiler_uses_the_same_numbers() -> None:
    prof = _capture("plain")
    result = from_profiler(prof, name="p")
    expected = _key_average_ops(prof)
    assert {o.name for o in result.ops} == set(expected)
    for o in result.ops:
        assert o.calls == expected[o.name].count
    assert result.event_count == len(prof.profiler.kineto_results.events())
    # Costliest first.
    times = [o.time_us for o in result.ops]
    assert times == sorted(times, reverse=True)


# ---- device time against torch's own EventList -----------------------------------------------
def _random_table(seed: int) -> EventTable:
    """Nested events on three threads, with what key_averages has rules for: partial
    overlaps, instants, identical intervals, same-name parent and only child, async ranges,
    Python frames and runtime calls as children, device time, a legacy op."""
    rng = random.Random(seed)
    t = EventTable(has_device=True)
    ops, ranges = ["aten::a", "aten::b", "aten::c"], ["r1", "r2"]

    def fill(tid: int, lo: int, hi: int, depth: int) -> None:
        if hi - lo < 2 or depth > 5:
            return
        cur = lo
        for _ in range(rng.randint(0, 3)):
            if cur >= hi:
                break
            s = rng.randint(cur, hi - 1)
            e = rng.randint(s, hi) if rng.random() > 0.1 else s
            if rng.random() < 0.07:
                e = hi + rng.randint(1, 50)  # outlasts its parent: a partial overlap
            r = rng.random()
            if r < 0.55:
                if rng.random() < 0.05:
                    t.append("aten::legacy", KIND_OP, tid, s, e, device=33, flags=FLAG_LEGACY_DEVICE)
                else:
                    t.append(rng.choice(ops), KIND_OP, tid, s, e, device=rng.choice([0, 0, 5, 17]))
            elif r < 0.75:
                t.append(rng.choice(ranges), KIND_ANNOTATION, tid, s, e, flags=FLAG_ASYNC if rng.random() < 0.05 else 0)
            elif r < 0.9:
                t.add_other(rng.choice(["a.py(1): f", "b.py(2): g"]), KIND_PYTHON, tid, s, e)
            else:
                t.add_other("cudaLaunchKernel", KIND_RUNTIME, tid, s, e)
            if rng.random() < 0.3:
                t.append(rng.choice(ops), KIND_OP, tid, s, e, device=rng.choice([0, 7]))
            fill(tid, s, e, depth + 1)
            cur = e if rng.random() < 0.8 else s

    for tid in (1, 2, 3):
        for k in range(6):
            fill(tid, k * 1000, k * 1000 + 900, 0)
    return t


def _reference(table: EventTable) -> dict[str, Any]:
    """torch's key_averages over FunctionEvents built from ``table`` as _parse_kineto_results
    builds them (device time as one kernel per op)."""
    from torch.autograd.profiler_util import EventList, FunctionEvent

    events: list[Any] = []
    kinds: dict[str, int] = {}

    def add(tab: EventTable, i: int, cid: int) -> None:
        flags = tab.flags[i] if tab.flags else 0
        fe = FunctionEvent(
            id=cid,
            name=tab.names[i],
            thread=tab.tids[i],
            start_us=tab.starts[i] / 1000,
            end_us=tab.ends[i] / 1000,
            use_device="cuda",
            stack=[],
            input_shapes=[],
            is_async=bool(flags & FLAG_ASYNC),
            is_legacy=bool(flags & FLAG_LEGACY_DEVICE),
            is_user_annotation=tab.kinds[i] == KIND_ANNOTATION,
        )
        if tab.device_ns[i] and not flags & FLAG_ASYNC:
            fe.append_kernel("kernel", 0, tab.device_ns[i] / 1000)
        kinds[tab.names[i]] = tab.kinds[i]
        events.append(fe)

    for i in range(len(table)):
        add(table, i, i + 1)
    if table.others is not None:
        for i in range(len(table.others)):
            if table.others.kinds[i] != KIND_PYTHON:  # no child in neuronscope's nesting
                add(table.others, i, 10**7 + i)
    events.sort(key=lambda e: [e.time_range.start, -e.time_range.end])
    elist = EventList(events, use_device="cuda")
    elist._build_tree()
    return {e.key: e for e in elist.key_averages() if kinds[e.key] in (KIND_OP, KIND_RUNTIME)}


def _assert_same(summary: Summary, ref: dict[str, Any]) -> None:
    ours = {o.name: o for o in summary.ops}
    assert set(ours) == set(ref)
    for name, e in ref.items():
        o = ours[name]
        got = (o.calls, o.self_cpu_us, o.cpu_total_us, o.self_device_us, o.device_total_us)
        want = (e.count, e.self_cpu_time_total, e.cpu_time_total, e.self_device_time_total, e.device_time_total)
        assert got[0] == want[0], (name, got, want)
        for a, b in zip(got[1:], want[1:]):
            assert a is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b)), (name, got, want)


def test_random_tables_match_torchs_event_list() -> None:
    folded = 0
    for seed in range(60):
        table = _random_table(seed)
        ref = _reference(table)
        others = [k for k in (table.others.kinds if table.others else []) if k != KIND_PYTHON]
        folded += len(table) + len(others) - sum(e.count for e in ref.values())
        _assert_same(summarize(table), ref)
    assert folded > 0  # the same-name folding rule was exercised


@pytest.mark.parametrize("sync_range", [False, True], ids=["all-async", "a-sync-range"])
def test_tables_whose_ops_are_all_async_match_torchs_event_list(sync_range: bool) -> None:
    # Every op started on one thread and ended on another: no nesting to build (every event
    # async raised IndexError), and op totals made of async durations alone (a type error).
    t = EventTable(has_device=True)
    if sync_range:
        t.append("step", KIND_ANNOTATION, 1, 0, 100)
    for k, name in enumerate(["aten::a", "aten::b", "aten::a"]):
        t.append(name, KIND_OP, 1, 10 + 20 * k, 25 + 20 * k, flags=FLAG_ASYNC)
    summary = summarize(t)
    _assert_same(summary, _reference(t))
    a = next(o for o in summary.ops if o.name == "aten::a")
    assert (a.calls, a.self_cpu_us, a.cpu_total_us) == (2, 0.0, 0.03)


def test_thread_ids_beyond_int64_nest_and_link() -> None:
    # 64-bit unsigned thread ids (as some platforms' profilers write them) are only compared:
    # numbered instead of made int64, in the summary and in linking device time to ranges.
    big = 2**64 - 1
    t = EventTable(has_device=True)
    t.append("c10d::allreduce_", KIND_OP, big, 100, 200)
    t.append("nccl:all_reduce", KIND_ANNOTATION, big, 120, 180)
    t.append("aten::mm", KIND_OP, 5, 120, 180, device=4)
    add_inner_range_device_time(t, np.array([150]), np.array([0]), np.array([7]))
    assert t.range_device_ns == {1: 7}
    ops = {o.name: o for o in summarize(t).ops}
    assert ops["c10d::allreduce_"].self_cpu_us == 0.04  # the range is its child; aten::mm, on another thread, not
    assert ops["aten::mm"].self_cpu_us == 0.06 and ops["aten::mm"].device_total_us == 0.004


def _table_from_chrome_trace(path: Path) -> EventTable:
    """A live capture's table rebuilt from its Chrome trace: the kernel's ``External id`` is
    the ``linked_correlation_id`` of the raw event, the op's is its ``correlation_id``."""
    with gzip.open(path, "rt") as fh:
        trace = json.load(fh)["traceEvents"]
    table = EventTable()
    by_ext: dict[int, int] = {}
    runtime: list[tuple[str, int, int, int, int]] = []
    device: list[tuple[int, int]] = []
    for e in sorted((e for e in trace if e.get("ph") == "X"), key=lambda e: e["ts"]):
        cat, args = e.get("cat"), e.get("args") or {}
        start, end = int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)
        if cat in ("cpu_op", "user_annotation"):
            if e["name"] in IGNORED_NAMES:
                continue
            by_ext[args["External id"]] = len(table)
            table.append(e["name"], KIND_OP if cat == "cpu_op" else KIND_ANNOTATION, e["tid"], start, end)
        elif cat == "cuda_runtime":
            runtime.append((e["name"], args.get("External id", 0), e["tid"], start, end))
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            device.append((args.get("External id", 0), end - start))
    for name, ext, tid, start, end in runtime:
        i = by_ext.get(ext)
        table.add_other(name, KIND_RUNTIME, table.tids[i] if i is not None else tid, start, end)
    attach_device_time(table, device, by_ext)
    return table


def test_real_cuda_trace_device_time_matches_event_list() -> None:
    path = SHARED_TRACES / "a100_alexnet.json.gz"
    table = _table_from_chrome_trace(path)
    assert table.has_device and sum(table.device_ns) > 0
    summary = summarize(table)
    _assert_same(summary, _reference(table))
    assert any((o.self_device_us or 0) > 0 for o in summary.ops)
    assert any(o.name.startswith("cuda") for o in summary.ops)  # runtime calls are op rows


# ---- reading raw events: device links, threads, flags -----------------------------------------
class _Fake:
    """A stand-in for ``torch._C._autograd._KinetoEvent`` with the accessors the reader uses."""

    def __init__(self, name: str, act: str, tid: int, start: int, end: int, corr: int = 0, linked: int = 0, **kw: Any):
        self._d = dict(name=name, act=act, tid=tid, start=start, end=end, corr=corr, linked=linked, **kw)

    def name(self) -> str:
        if self._d.get("bad_name"):
            raise UnicodeDecodeError("utf-8", b"\xda", 0, 1, "invalid continuation byte")
        return str(self._d["name"])

    def activity_type(self) -> str:
        return str(self._d["act"])

    def start_ns(self) -> int:
        return int(self._d["start"])

    def end_ns(self) -> int:
        return int(self._d["end"])

    def duration_ns(self) -> int:
        return int(self._d["end"] - self._d["start"])

    def start_thread_id(self) -> int:
        return int(self._d["tid"])

    def end_thread_id(self) -> int:
        return int(self._d.get("end_tid", self._d["tid"]))

    def correlation_id(self) -> int:
        return int(self._d["corr"])

    def linked_correlation_id(self) -> int:
        return int(self._d["linked"])

    def device_type(self) -> Any:
        return self._d.get("device", torch.autograd.DeviceType.CPU)

    def is_async(self) -> bool:
        return bool(self._d.get("is_async", False))

    def is_hidden_event(self) -> bool:
        return bool(self._d.get("hidden", False))

    def shapes(self) -> list[list[int]]:
        return list(self._d.get("shapes", []))

    def privateuse1_elapsed_us(self) -> float:
        return float(self._d.get("pu1_us", 0))


class _FakeProf:
    def __init__(self, events: list[_Fake], use_device: str | None = None) -> None:
        kineto = type("K", (), {"events": lambda self: list(events)})()
        self.profiler = type("P", (), {"kineto_results": kineto, "use_device": use_device})()


CUDA = torch.autograd.DeviceType.CUDA


def test_device_time_goes_to_the_launching_op() -> None:
    events = [
        _Fake("step", "user_annotation", 1, 0, 1000, corr=1),
        _Fake("aten::mm", "cpu_op", 1, 10, 500, corr=2),
        _Fake("cudaLaunchKernel", "cuda_runtime", 99, 20, 60, corr=50, linked=2),  # other thread id
        _Fake("gemm", "kernel", 7, 100, 400, corr=51, linked=2, device=CUDA),
        _Fake("step", "gpu_user_annotation", 7, 90, 900, corr=52, linked=1, device=CUDA),
        _Fake("memset", "gpu_memset", 7, 400, 450, corr=53, linked=999, device=CUDA),  # no op
    ]
    table = table_from_profiler(_FakeProf(events))
    assert table.names == ["step", "aten::mm"]
    assert table.device_ns == [0, 300]
    assert table.has_device and table.device_event_count == 2
    assert table.unattributed_device_ns == 50
    assert table.others is not None and table.others.names == ["cudaLaunchKernel"]
    assert table.others.tids == [1]  # moved to the thread of the op that launched it
    summary = summarize(table)
    ops = {o.name: o for o in summary.ops}
    assert ops["aten::mm"].self_cpu_us == pytest.approx(0.45)  # 490 ns less the 40 ns launch
    assert ops["aten::mm"].self_device_us == pytest.approx(0.3)
    assert ops["cudaLaunchKernel"].self_device_us == 0.0
    assert summary.regions["step"].device_time_us == pytest.approx(0.3)


def test_async_and_hidden_ranges() -> None:
    events = [
        _Fake("outer", "user_annotation", 1, 0, 1000, corr=1, end_tid=2),  # ends on thread 2
        _Fake("aten::add", "cpu_op", 1, 10, 20, corr=2),
        _Fake("gone", "user_annotation", 1, 30, 40, corr=3, hidden=True),
        _Fake("fut", "user_annotation", 1, 50, 60, corr=4, is_async=True),
    ]
    table = table_from_profiler(_FakeProf(events))
    assert table.names == ["outer", "aten::add", "fut"]
    assert table.flags == [FLAG_ASYNC, 0, FLAG_ASYNC]
    summary = summarize(table)
    assert summary.regions["outer"].calls == 1 and summary.regions["outer"].ops == []
    assert summary.ops[0].self_cpu_us == pytest.approx(0.01)


def test_legacy_privateuse1_device_time() -> None:
    events = [
        _Fake("aten::add", "cpu_op", 1, 0, 100, corr=1, pu1_us=2.5),
        _Fake("aten::mul", "cpu_op", 1, 10, 20, corr=2, pu1_us=1.0),
    ]
    name = torch._C._get_privateuse1_backend_name()
    table = table_from_profiler(_FakeProf(events, use_device=name))
    assert table.has_device and table.device_ns == [2500, 1000]
    assert table.flags == [FLAG_LEGACY_DEVICE, FLAG_LEGACY_DEVICE]
    ops = {o.name: o for o in summarize(table).ops}
    assert ops["aten::add"].device_total_us == pytest.approx(2.5)  # its own only, as key_averages
    assert ops["aten::add"].self_device_us == pytest.approx(1.5)
    # No PrivateUse1 in the capture: the accessor is not read at all.
    assert not table_from_profiler(_FakeProf(events)).has_device


def test_undecodable_name_keeps_the_capture() -> None:
    events = [_Fake("aten::add", "cpu_op", 1, 0, 10), _Fake("x", "cpu_op", 1, 20, 30, bad_name=True)]
    table = table_from_profiler(_FakeProf(events))
    assert table.names == ["aten::add", "<undecodable name>"]


def test_unknown_activity_is_classified_by_device_type() -> None:
    events = [
        _Fake("aten::add", "cpu_op", 1, 0, 100, corr=1),
        _Fake("hpu_thing", "hpu_op", 5, 10, 20, device=torch.autograd.DeviceType.HPU),
        _Fake("xpu_kernel", "new_device_activity", 5, 10, 30, linked=1, device=torch.autograd.DeviceType.XPU),
        _Fake("hostcall", "new_cpu_activity", 1, 40, 50),
    ]
    table = table_from_profiler(_FakeProf(events))
    assert table.names == ["aten::add"] and table.device_ns == [20]
    assert table.others is not None and table.others.names == ["hostcall"]


def test_not_a_profiler_gives_an_empty_table() -> None:
    assert len(table_from_profiler(object())) == 0
    assert len(table_from_profiler(_FakeProf([]))) == 0


# ---- the table itself ------------------------------------------------------------------------
def test_event_table_interface() -> None:
    t = EventTable()
    t.append("a", KIND_OP, 1, 0, 10)
    t.append("b", KIND_OP, 1, 2, 5, shapes=[[2, 2]])
    t.append("c", KIND_ANNOTATION, 1, 20, 30, flags=FLAG_ASYNC)
    assert len(t) == 3 and t.span_ns == 30
    assert t.shapes == [None, [[2, 2]], None] or t.shapes == [None, [[2, 2]]]
    assert t.flags == [0, 0, FLAG_ASYNC]
    t.add_other("f.py(1): f", KIND_PYTHON, 1, 1, 3)
    assert t.others is not None and len(t.others) == 1 and len(t) == 3
    attach_device_time(t, [(7, 100), (8, 5)], {7: 0})
    assert t.device_ns[0] == 100 and t.unattributed_device_ns == 5 and t.device_event_count == 2
    assert EventTable().span_ns == 0


def test_summarize_small_tables_exactly() -> None:
    t = EventTable()
    t.append("r", KIND_ANNOTATION, 1, 0, 100)
    t.append("r", KIND_ANNOTATION, 1, 10, 90)  # same name, nested: an op inside counts once
    t.append("aten::add", KIND_OP, 1, 20, 60)
    t.append("aten::add", KIND_OP, 1, 30, 40)  # only child, same name: folded into its parent
    t.append("aten::mul", KIND_OP, 2, 0, 50)  # another thread, while r is open
    t.append("aten::mul", KIND_OP, 2, 50, 50)  # an instant at its end: a sibling, not a child
    s = summarize(t)
    ops = {o.name: o for o in s.ops}
    assert (ops["aten::add"].calls, ops["aten::add"].self_cpu_us, ops["aten::add"].cpu_total_us) == (1, 0.04, 0.04)
    assert (ops["aten::mul"].calls, ops["aten::mul"].self_cpu_us) == (2, 0.05)
    assert s.regions["r"].calls == 2 and s.regions["r"].time_us == pytest.approx(0.18)
    # The other thread's muls ran while r was open (work handed off, as autograd does): r's.
    assert [(o.name, o.calls) for o in s.regions["r"].ops] == [("aten::mul", 2), ("aten::add", 1)]
    assert s.op_events == 3 and s.span_us == 0.1
    assert summarize(EventTable()) == Summary(ops=[], regions={}, span_us=0.0, op_events=0)


def test_live_capture_keeps_device_intervals_launches_and_inner_ranges() -> None:
    """The same device intervals and nested-range device time as a trace file gives."""
    events = [
        _Fake("record_param_comms", "cpu_op", 1, 10, 500, corr=2),
        _Fake("nccl:all_reduce", "user_annotation", 1, 15, 480, corr=3),
        _Fake("cudaLaunchKernel", "cuda_runtime", 1, 20, 60, corr=50, linked=2),
        _Fake("cudaStreamSynchronize", "cuda_runtime", 1, 470, 560, corr=60),
        _Fake("ncclKernel_AllReduce", "kernel", 7, 100, 400, corr=50, linked=2, device=CUDA, stream=21),
        _Fake("Memset (Device)", "gpu_memset", 7, 600, 650, corr=53, linked=999, device=CUDA),
    ]
    type(events[0]).device_resource_id = lambda self: int(self._d.get("stream", 7))  # type: ignore[attr-defined]
    try:
        table = table_from_profiler(_FakeProf(events))
    finally:
        del type(events[0]).device_resource_id  # type: ignore[attr-defined]
    dev = table.device
    assert dev is not None and dev.starts == [100, 600] and dev.ends == [400, 650]
    assert dev.streams == [21, 7] and dev.launch_starts == [20, -1] and dev.launch_ends == [60, -1]
    assert (dev.sync_starts, dev.sync_ends) == ([470], [560])
    regions = summarize(table).regions
    assert regions["nccl:all_reduce"].device_time_us == pytest.approx(0.3)  # launched inside it
    from neuronscope.events.timeline import step_breakdown

    bd = step_breakdown(table)
    assert bd is not None and bd["window_us"] == 0.55 and bd["busy_us"] == 0.35
    assert bd["communication_us"] == 0.3 and bd["memory_us"] == 0.05
    assert bd["idle_sync_us"] == 0.09  # the host sat in cudaStreamSynchronize 470-560 of the 400-600 gap


def test_one_answer_to_is_this_frame_user_code() -> None:
    """events.frames: one list of library roots for live captures and trace files."""
    from neuronscope.capture.frames import LIBRARY_ROOTS, is_user_file
    from neuronscope.events.locations import user_location

    assert {"torch", "neuronscope", "_pytest", "pluggy", "wrapt", "torch_neuronx"} <= LIBRARY_ROOTS
    assert user_location("/home/me/train.py(12): main") == "/home/me/train.py:12"
    assert user_location("train.py(3): step") == "train.py:3"
    for frame in (
        "torch/nn/modules/module.py(1750): _call_impl",
        "_pytest/python.py(159): pytest_pyfunc_call",
        "/opt/venv/lib/python3.11/site-packages/wrapt/wrappers.py(9): __call__",
        "/usr/lib/python3.11/json/decoder.py(337): decode",
        "json/decoder.py(337): decode",
        "<built-in method mm of type object at 0x0>",
        "nn.Module: Linear_0",
    ):
        assert user_location(frame) is None, frame
    assert is_user_file("/home/me/json/decoder.py")  # an absolute path named like the stdlib


def test_from_profiler_leaves_the_collector_as_it_found_it() -> None:
    """from_profiler pauses the garbage collector over its reading and analysis (one
    collection afterwards instead of one per pause): on or off, the user's setting comes back,
    and an error inside it too."""
    import gc

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        (torch.randn(8, 8) * 2).sum()
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            assert from_profiler(prof).ops and gc.isenabled() is enabled
        gc.enable()
        with pytest.raises(NeuronscopeError):
            from_profiler(object())
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
