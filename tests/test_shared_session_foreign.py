"""The user's own torch.profiler started between two captures of a shared window (one_session):
torch replaces the running session with theirs, so the window's session is gone. What the user
sees must be a clear message: their profiler keeps recording (neuronscope never toggles or stops
it), the window's later captures are measured in a session of their own, and the captures lost
say so. Real torch profiler (CPU)."""

from __future__ import annotations

import warnings

import torch

from neuronscope import profile_on_neuron
from neuronscope.announce import NeuronscopeWarning
from neuronscope.capture.base import profiler_running
from neuronscope.region import ensure_no_capture_running


def _step(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ x)


def _window(tmp_path, active: int = 3):
    return profile_on_neuron(backend="cpu", warmup=0, active=active, one_session=True, output_dir=str(tmp_path))(_step)


def _warned_lost(caught: list[warnings.WarningMessage]) -> bool:
    return any(issubclass(w.category, NeuronscopeWarning) and "torch.profiler" in str(w.message) for w in caught)


def _cpu_profiler():
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])


def test_the_users_profiler_between_captures_keeps_recording_and_the_window_goes_on(tmp_path) -> None:
    x = torch.randn(8, 8)
    step = _window(tmp_path)
    step(x)
    with warnings.catch_warnings(record=True) as caught, _cpu_profiler() as theirs:
        warnings.simplefilter("always")
        step(x)  # inside theirs: a labelled range there, no capture of ours
        x.relu()  # the user's own work after it: still recorded in theirs
    assert _warned_lost(caught)
    names = {e.name for e in theirs.events()}
    assert "aten::relu" in names and "_step" in names
    assert not any(n.startswith("neuronscope::") for n in names)
    step(x)
    step(x)
    step(x)
    assert len(step.results) == 3 and step.skipped_calls == 1
    lost, *kept = step.results
    assert lost.op("aten::gelu") is None and any("torch.profiler" in n for n in lost.notes)
    assert all(r.op("aten::gelu") is not None for r in kept)  # measured in a session of their own
    assert ensure_no_capture_running() and not profiler_running()


def test_a_window_ended_while_the_users_profiler_runs_leaves_theirs_running(tmp_path) -> None:
    import neuronscope

    x = torch.randn(8, 8)
    step = _window(tmp_path)
    step(x)
    with warnings.catch_warnings(record=True) as caught, _cpu_profiler() as theirs:
        warnings.simplefilter("always")
        neuronscope.reset()  # the window ends here; their session is not ours to stop
        assert profiler_running()
        x.relu()
    assert _warned_lost(caught)
    assert "aten::relu" in {e.name for e in theirs.events()}
    assert len(step.results) == 1 and step.results[0].op("aten::gelu") is None
    assert ensure_no_capture_running() and not profiler_running()


def test_the_users_profiler_inside_the_captured_call_loses_the_capture_not_the_process(tmp_path) -> None:
    """Their profiler started inside our capture replaced our session; stopping or exporting
    ours then crashed the process in torch 2.13 (a segmentation fault in kineto's save). The
    capture says it has no events, the user's profile keeps theirs, and later captures work."""
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))

    def step(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        with _cpu_profiler() as theirs:
            y = mlp(x)
        return y, len(theirs.events())

    wrapped = profile_on_neuron(backend="cpu", warmup=0, output_dir=str(tmp_path), print_summary=False)(step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y, n = wrapped(torch.randn(4, 16))
    assert n > 0 and y.shape == (4, 16)  # their profile recorded the call
    assert any(issubclass(w.category, NeuronscopeWarning) and "inside the captured call" in str(w.message) for w in caught)
    lost = wrapped.last_result
    assert lost.ops == [] and any("inside the captured call" in note for note in lost.notes)
    assert ensure_no_capture_running() and not profiler_running()
    later = profile_on_neuron(backend="cpu", warmup=0, output_dir=str(tmp_path), print_summary=False)(mlp)
    later(torch.randn(4, 16))
    assert later.last_result.op("aten::addmm") is not None
