"""One profiler session over several captures (issue 38, item 4): CUDA hands back kernel
records on another clock in every profiler session after a process's first
(pytorch/pytorch#192021), so a call window's captures share one session, each a marked range,
split after the stop. Tested with the real torch profiler (CPU): the sessions torch prepares
are counted, and each capture's slice is compared with a session of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.autograd.profiler as autograd_profiler

from neuronscope.capture import resolve_backend
from neuronscope.capture.base import profiler_running
from neuronscope.capture.record import MARKER, CaptureSession, SharedSession
from neuronscope.config import build_options
from neuronscope.events import table_from_profiler


@pytest.fixture
def sessions(monkeypatch):
    """How many profiler sessions torch prepares and enables (Kineto's prepare: where CUDA
    registers CUPTI's callbacks again)."""
    count = {"prepare": 0, "enable": 0}
    prepare, enable = autograd_profiler._prepare_profiler, autograd_profiler._enable_profiler

    def counted_prepare(*a, **k):
        count["prepare"] += 1
        return prepare(*a, **k)

    def counted_enable(*a, **k):
        count["enable"] += 1
        return enable(*a, **k)

    monkeypatch.setattr(autograd_profiler, "_prepare_profiler", counted_prepare)
    monkeypatch.setattr(autograd_profiler, "_enable_profiler", counted_enable)
    return count


def _work(i: int) -> None:
    x = torch.randn(16, 16)
    with autograd_profiler.record_function(f"step{i}"):
        y = (x @ x).relu()
        for _ in range(i + 1):
            y = y + 1
    (y * 2).sum()


def _between() -> None:  # the user's code between two captures: not recorded
    torch.randn(8).sigmoid().tanh()


def _ops(table) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in table.names:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _backend():
    return resolve_backend(build_options(None, backend="cpu", export=False))


def test_a_window_of_three_captures_is_one_session_and_each_slice_is_its_capture(sessions) -> None:
    shared = SharedSession(_backend())
    records = []
    caps = []
    for i in range(3):
        cap = CaptureSession(shared.backend, shared=shared)
        cap.start()
        _work(i)
        records.append(cap.stop())
        caps.append(cap)
        _between()
    assert profiler_running()  # kept over the window ...
    shared.finish()
    assert not profiler_running()  # ... and stopped at its end
    assert sessions == {"prepare": 1, "enable": 1} and shared.sessions_started == 1
    done = [cap.complete(r) for cap, r in zip(caps, records)]
    assert "aten::sigmoid" not in table_from_profiler(shared.prof).names  # toggled off between

    own = {"prepare": 0, "enable": 0}
    for i, record in enumerate(done):
        before = dict(sessions)
        alone = CaptureSession(_backend())
        alone.start()
        _work(i)
        separate = alone.stop()
        own = {k: sessions[k] - before[k] for k in sessions}
        sliced, single = table_from_profiler(record.prof), table_from_profiler(separate.prof)
        assert _ops(sliced) == _ops(single), i
        assert not any(n.startswith(MARKER) for n in sliced.names)
        assert "aten::sigmoid" not in sliced.names  # the code between captures
        assert record.wall_time_us > 0 and record.error is None
    assert own == {"prepare": 1, "enable": 1}  # a capture of its own: a session of its own


def test_a_slice_saves_only_its_capture_in_the_chrome_trace(tmp_path: Path) -> None:
    shared = SharedSession(_backend())
    markers = []
    for i in range(2):
        markers.append(shared.open())
        _work(i)
        shared.close()
    shared.finish()
    first = shared.slice(markers[0])
    first.export_chrome_trace(str(tmp_path / "t.json"))
    names = [e.get("name") for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]]
    assert "step0" in names and "step1" not in names and not any(str(n).startswith(MARKER) for n in names)
    tree = first.profiler.kineto_results.experimental_event_tree()
    assert [n.name for n in tree][:1] == ["step0"] or "step0" in [n.name for n in tree]


# ---- a call window's captures in one session, through the decorator and regions --------------

import logging
import threading

from neuronscope import from_trace, neuron_region, profile_on_neuron
from neuronscope.region import ensure_no_capture_running


def _model_step(x: torch.Tensor) -> torch.Tensor:
    with neuron_region("inner"):
        y = torch.nn.functional.gelu(x @ x)
    return (y * 2 + 1).sum()


def _decorated(one_session: bool, tmp_path: Path, active: int = 3):
    return profile_on_neuron(
        backend="cpu", warmup=0, active=active, one_session=one_session, output_dir=str(tmp_path / str(one_session))
    )(_model_step)


def _shape(result) -> tuple:
    ops = sorted((o.name, o.calls) for o in result.ops)
    regions = sorted((name, r.calls, sorted((o.name, o.calls) for o in r.ops)) for name, r in result.regions.items())
    hints = sorted((h.kind, h.pattern, tuple(h.ops), h.calls) for h in result.hints)
    return ops, regions, hints, result.status, result.backend, result.breakdown is None


def test_a_decorated_window_shares_one_session_and_gives_the_same_results(sessions, tmp_path: Path) -> None:
    x = torch.randn(24, 24)
    shared = _decorated(True, tmp_path)
    for i in range(3):
        assert len(shared.results) == 0  # delivered at the window's end
        shared(x)
        _between()
    assert sessions["prepare"] == 1 and len(shared.results) == 3
    assert ensure_no_capture_running()
    alone = _decorated(False, tmp_path)
    for _ in range(3):
        alone(x)
    assert sessions["prepare"] == 4  # a session per capture: what the window avoids
    for a, b in zip(shared.results, alone.results):
        assert _shape(a) == _shape(b)
        assert a.wall_time_us > 0 and a.run_dir is not None
        trace = json.loads((Path(a.run_dir) / "trace.json").read_text())["traceEvents"]
        names = [e.get("name") for e in trace]
        assert names.count("inner") == 1 and "aten::sigmoid" not in names  # its own capture only
        assert [e["name"] for e in trace if e.get("cat") == "Trace"] == ["PyTorch Profiler (0)"]  # its span, clipped
        read = from_trace(Path(a.run_dir) / "trace.json")
        assert sorted((o.name, o.calls) for o in read.ops) == sorted((o.name, o.calls) for o in a.ops)
        assert not any(str(n).startswith(MARKER) for n in names)
    assert shared.last_result is shared.results[-1]


def test_a_capture_tried_while_a_window_holds_its_session_says_why(tmp_path: Path, caplog) -> None:
    logger = logging.getLogger("neuronscope")
    logger.addHandler(caplog.handler)
    try:
        x = torch.randn(8, 8)
        shared = _decorated(True, tmp_path, active=2)
        shared(x)
        with neuron_region("other", backend="cpu", export=False) as other:
            x.relu()
        assert other.result is None and other.skipped_calls == 1
        said = sorted({r.getMessage() for r in caplog.records if r.getMessage().startswith("other ran uncaptured")})
        assert len(said) == 1 and "one_session" in said[0] and "_model_step" in said[0], said
        shared(x)
        assert len(shared.results) == 2
        with neuron_region("after", backend="cpu", export=False) as after:
            x.relu()
        assert after.result is not None  # the claim went back at the window's end
    finally:
        logger.removeHandler(caplog.handler)


def test_the_users_own_profiler_is_still_detected(tmp_path: Path) -> None:
    x = torch.randn(8, 8)
    shared = _decorated(True, tmp_path)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as theirs:
        shared(x)
    assert shared.results == [] and shared.skipped_calls == 1
    assert "_model_step" in [e.name for e in theirs.events()]  # a labelled range in theirs
    assert ensure_no_capture_running()


def test_reset_mid_window_delivers_what_was_captured(tmp_path: Path) -> None:
    import neuronscope

    x = torch.randn(8, 8)
    shared = _decorated(True, tmp_path)
    shared(x)
    shared(x)
    assert shared.results == [] and profiler_running()
    neuronscope.reset()
    assert len(shared.results) == 2 and not profiler_running()
    assert all(r.op("aten::gelu") is not None for r in shared.results)
    assert ensure_no_capture_running()


def test_another_thread_skips_and_an_error_passes_through(tmp_path: Path) -> None:
    x = torch.randn(8, 8)
    shared = _decorated(True, tmp_path)
    shared(x)
    worker = threading.Thread(target=lambda: shared(x))  # the session is this thread's
    worker.start()
    worker.join()
    assert shared.skipped_calls == 1 and shared.results == []
    with pytest.raises(TypeError):
        shared("not a tensor")  # the user's exception, unchanged
    shared(x)
    assert [r.status for r in shared.results] == ["ok", "error", "ok"]
    assert ensure_no_capture_running() and not profiler_running()


def test_which_windows_share_a_session() -> None:
    from neuronscope.capture.cpu import CpuBackend
    from neuronscope.capture.cuda import CudaBackend
    from neuronscope.drive.session import shares_session
    from neuronscope.drive.window import CallWindow

    def opts(**kw):
        return build_options(None, **kw)

    three, one, every = CallWindow(0, 3), CallWindow(0, 1), CallWindow(0, None)
    assert shares_session(opts(), CudaBackend(opts()), three)  # CUDA: on by default
    assert not shares_session(opts(one_session=False), CudaBackend(opts()), three)
    assert not shares_session(opts(), CudaBackend(opts()), one)  # one capture: nothing to share
    assert not shares_session(opts(), CudaBackend(opts()), every)  # a region's open-ended window
    assert not shares_session(opts(), CpuBackend(opts()), three)
    assert shares_session(opts(one_session=True), CpuBackend(opts()), three)


def test_a_ctrl_c_while_a_capture_stops_ends_the_window_and_goes_on(tmp_path: Path, monkeypatch) -> None:
    """An interrupt that lands while a shared capture stops (in the device sync) is not held
    until the window's end: the window ends there, its results are delivered, then it is
    raised; the profiler is off and free."""
    from neuronscope.capture.cpu import CpuBackend

    x = torch.randn(8, 8)
    shared = _decorated(True, tmp_path)
    shared(x)
    calls = {"n": 0}

    def sync(self) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(CpuBackend, "synchronize", sync)
    with pytest.raises(KeyboardInterrupt):
        shared(x)
    assert len(shared.results) == 2 and shared.results[1].op("aten::gelu") is not None
    assert not profiler_running() and ensure_no_capture_running()


def test_a_shared_capture_ended_on_another_thread_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    """A generator holds a region of a shared window across its yields and is finished on
    another thread: that capture is dropped (counted), its own thread stops the session when it
    next enters neuronscope, and what the window captured before is still delivered."""
    import neuronscope
    from neuronscope.announce import NeuronscopeWarning

    x = torch.randn(8, 8)
    kept = []

    def block():
        with neuron_region("shared_gen", backend="cpu", active=3, one_session=True, export=False) as r:
            kept.append(r)
            x.relu()
            yield 1

    first = block()
    list(first)  # one capture, in the session
    moved = block()
    next(moved)
    worker = threading.Thread(target=lambda: list(moved))

    def finish_elsewhere() -> None:
        worker.start()
        worker.join()

    with pytest.warns(NeuronscopeWarning, match="ended on another thread"):
        finish_elsewhere()
    assert ensure_no_capture_running() and not profiler_running()  # stopped by its own thread
    neuronscope.reset()
    assert kept[0].result is not None and kept[0].result.op("aten::relu") is not None
    assert kept[1].result is None and kept[1].skipped_calls == 1


def test_compares_profiled_calls_share_one_session(sessions) -> None:
    """compare()'s variants: one session for all their profiled calls with one_session (CUDA's
    default), each variant's op table as with a session of its own."""
    from neuronscope import compare

    x = torch.randn(16, 16)
    variants = {"eager": lambda t: (t * 2 + 1).relu(), "fewer": lambda t: torch.relu(t.mul(2).add_(1))}
    common = {"backend": "cpu", "export": False, "hints": False, "rounds": 3, "check_outputs": False}
    one = compare(variants, x, one_session=True, **common)
    shared_sessions = dict(sessions)
    each = compare(variants, x, one_session=False, **common)
    assert shared_sessions["prepare"] == 1 and sessions["prepare"] - shared_sessions["prepare"] == 2
    for label in variants:
        a, b = one.results[label], each.results[label]
        assert sorted((o.name, o.calls) for o in a.ops) == sorted((o.name, o.calls) for o in b.ops)
        assert sorted(a.regions) == sorted(b.regions)
    assert [(r.label, r.op_count, r.top_op is None) for r in one.rows] == [
        (r.label, r.op_count, r.top_op is None) for r in each.rows
    ]
    assert ensure_no_capture_running() and not profiler_running()


def test_a_variant_that_raises_ends_the_shared_session(sessions) -> None:
    from neuronscope import compare

    def broken(t):
        if profiler_running():  # only its profiled calls fail
            raise ValueError("variant broke")
        return t

    with pytest.raises(ValueError, match="variant broke"):
        compare(
            {"ok": lambda t: t + 1, "broken": broken},
            torch.ones(4),
            backend="cpu",
            export=False,
            hints=False,
            rounds=3,
            check_outputs=False,
            one_session=True,
        )
    assert ensure_no_capture_running() and not profiler_running()
