"""The scope model under hostile use (issue 21, items 8-11): interrupts while a capture stops,
captures ended on another thread, the kill switch, names torch refuses; and the capture stage
driven through an injected backend and an exact clock."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_backends import ExactClock, faulty_backend

import neuronscope
from neuronscope import load, neuron_region, profile_on_neuron
from neuronscope.announce import NeuronscopeWarning
from neuronscope.capture import CaptureSession
from neuronscope.config import build_options
from neuronscope.region import ensure_no_capture_running


def _profiling() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled)


def _work(n: int = 5) -> torch.Tensor:
    x = torch.randn(8, 8)
    for _ in range(n):
        x = torch.tanh(x) * 0.5
    return x


def _captures_again() -> None:
    assert ensure_no_capture_running() and not _profiling()
    with neuron_region("again", backend="cpu", export=False) as r:
        _work(2)
    assert r.result is not None and r.result.status == "ok" and r.result.ops


# ---- the capture stage, through an injected backend and clock -------------------------------


def test_a_capture_session_reads_the_injected_clock_exactly() -> None:
    clock = ExactClock(step_ns=1_500_000)
    backend = faulty_backend()(build_options(None, backend="cpu"))
    session = CaptureSession(backend, clock=clock)
    session.start()
    assert _profiling()
    _work(2)
    record = session.stop()
    assert not _profiling()
    assert record.wall_time_us == 1500.0 and record.error is None and record.interrupted is None
    assert record.backend == "cpu" and record.compile_facts is not None


def test_a_region_takes_its_wall_time_from_the_backends_clock() -> None:
    clock = ExactClock(step_ns=2_000_000)
    with neuron_region("timed", backend=faulty_backend(clock=clock), export=False) as r:
        _work(2)
    assert r.result is not None and r.result.wall_time_us == 2000.0
    assert r.result.options["backend"] == "cpu"


def test_wall_time_ends_when_the_device_finishes_not_after_the_profilers_flush() -> None:
    """The device sync (waiting for the work) is the work's time; the profiler's stop and flush
    after it (tens of ms of event processing) is not."""
    clock = ExactClock()
    backend = faulty_backend(
        sync=lambda: clock.advance(3_000_000),  # the device finishes 3 ms of queued work
        before_stop=lambda _: clock.advance(500_000_000),  # the profiler's flush: 500 ms
        clock=clock,
    )
    with neuron_region("flushed", backend=backend, export=False) as r:
        clock.advance(2_000_000)  # 2 ms of the user's code
    assert r.result is not None and r.result.wall_time_us == 5000.0


def test_no_run_directory_before_the_capture_starts(runs_dir: Path) -> None:
    seen: list[bool] = []
    with neuron_region("late_dir", backend=faulty_backend(after_start=lambda _: seen.append(runs_dir.exists()))) as r:
        seen.append(runs_dir.exists())
    assert seen == [False, False]
    assert r.result is not None and r.result.run_dir is not None and Path(r.result.run_dir).is_dir()


# ---- 8. Ctrl-C while a capture stops --------------------------------------------------------


def test_ctrl_c_before_the_profiler_stops_keeps_the_result_and_the_next_capture_works(runs_dir: Path) -> None:
    interrupt = KeyboardInterrupt()

    def ctrl_c(_: Any) -> None:
        raise interrupt

    with pytest.raises(KeyboardInterrupt) as info:
        with neuron_region("ctrl_c_stop", backend=faulty_backend(before_stop=ctrl_c)) as r:
            _work()
    assert info.value is interrupt
    assert r.result is not None and r.result.status == "error"
    assert "KeyboardInterrupt" in (r.result.error or "")
    assert r.result.run_dir is not None and load(r.result.run_dir).status == "error"  # kept on disk too
    _captures_again()


def test_ctrl_c_half_way_through_torchs_stop_resets_its_profiler_flag() -> None:
    """The interrupt lands after torch stopped its native profiler and before it reset its
    Python-level "profiler enabled" flag: every later capture used to skip."""

    def half_stop(prof: Any) -> None:
        prof.profiler.kineto_results = torch.autograd.profiler._disable_profiler()
        raise KeyboardInterrupt

    @profile_on_neuron(warmup=0, active=1, backend=faulty_backend(before_stop=half_stop), export=False)
    def step() -> torch.Tensor:
        return _work()

    with pytest.raises(KeyboardInterrupt):
        step()
    assert step.last_result is not None and step.last_result.status == "error"
    _captures_again()


# ---- 9. a generator finished on another thread ----------------------------------------------


def test_a_capture_held_by_a_generator_finished_on_another_thread_is_dropped_and_stopped() -> None:
    """torch's session lives in the starting thread's state: the other thread must not stop it
    (that crashed in the export); the capture is dropped and counted, and stopped here."""
    regions: list[neuron_region] = []

    def batches() -> Iterator[int]:
        with neuron_region("gen_capture", backend="cpu", export=False) as r:
            regions.append(r)
            yield 1
            _work(2)
            yield 2

    gen = batches()
    assert next(gen) == 1 and _profiling()  # the capture started here ...
    worker = threading.Thread(target=lambda: list(gen))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NeuronscopeWarning)
        worker.start()
        worker.join()  # ... and its region ended there
    assert regions[0].result is None and regions[0].skipped_calls == 1
    _captures_again()


# ---- 10. the kill switch --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["env", "option"])
def test_a_disabled_module_still_has_results_and_last_result(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "env":
        monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    model = profile_on_neuron(torch.nn.Linear(2, 2), warmup=0, enabled=how != "option")
    out = model(torch.ones(1, 2))
    assert out.shape == (1, 2) and isinstance(model, torch.nn.Linear)
    assert model.last_result is None and model.results == [] and model.skipped_calls == 0


def test_disabled_calls_use_up_no_window_and_decoration_time_does_not_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")

    @profile_on_neuron(warmup=1, active=1, backend="cpu", export=False)
    def step() -> torch.Tensor:
        return _work(1)

    for _ in range(3):
        step()
        with neuron_region("loop_window", warmup=1, active=1, backend="cpu", export=False):
            _work(1)
    assert step.results == [] and not _profiling()
    monkeypatch.delenv("NEURONSCOPE_DISABLE")  # read at each call: captures from here on
    for _ in range(2):
        step()
        with neuron_region("loop_window", warmup=1, active=1, backend="cpu", export=False) as r:
            _work(1)
    assert len(step.results) == 1 and len(r.results) == 1


# ---- 11. names torch refuses ----------------------------------------------------------------


def test_a_lone_surrogate_in_a_region_name_never_raises_into_the_program() -> None:
    name = b"data_\xff.bin".decode("utf-8", "surrogateescape")  # os.fsdecode of a non-UTF-8 name
    with neuron_region("outer_s", backend="cpu", export=False) as outer:
        with neuron_region(name):
            _work(1)
    assert outer.result is not None
    assert any(k.startswith("data_") for k in outer.result.regions), list(outer.result.regions)
    _captures_again()


# ---- scope order ----------------------------------------------------------------------------


def test_an_outer_region_ended_before_its_inner_one_gives_the_inner_no_result() -> None:
    outer = neuron_region("outer_first", backend="cpu", export=False)
    inner = neuron_region("inner_last")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        outer.start()
        inner.start()
        _work(1)
        assert outer.stop() is not None  # ends the capture, and cuts the inner range
        assert inner.stop() is None
    assert outer.result is not None and inner.result is None
    assert any("ended after the capture" in str(w.message) for w in record if issubclass(w.category, NeuronscopeWarning))
    _captures_again()


def test_start_and_stop_from_separate_hooks_and_a_missed_stop(caplog: pytest.LogCaptureFixture) -> None:
    class Callback:
        def __init__(self) -> None:
            self.region = neuron_region("hook_span", warmup=1, active=1, backend="cpu", export=False)

        def on_step_begin(self) -> None:
            self.region.start()

        def on_step_end(self) -> None:
            self.region.stop()

    cb = Callback()
    logger = logging.getLogger("neuronscope")
    logger.addHandler(caplog.handler)
    try:
        for i in range(4):
            cb.on_step_begin()
            if i == 0:
                continue  # the step raised: on_step_end never ran
            _work(1)
            cb.on_step_end()
    finally:
        logger.removeHandler(caplog.handler)
    assert len(cb.region.results) == 1 and ensure_no_capture_running()
    assert "started again before stop()" in caplog.text


def test_reset_starts_the_windows_again() -> None:
    @profile_on_neuron(warmup=1, active=1, backend="cpu", export=False)
    def step() -> None:
        _work(1)

    for _ in range(3):
        step()
    neuronscope.reset()
    for _ in range(2):
        step()
    assert len(step.results) == 2
