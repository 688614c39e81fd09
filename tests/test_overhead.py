"""The cheap paths stay correct: what runs when a call is not captured.

``benchmarks/bench_overhead.py`` measures these paths; here they are only checked for doing
the right thing (no timing asserts): a disabled wrapper or region is a pass-through that never
starts the profiler, a closed call window stays closed, ``NEURONSCOPE_DISABLE`` is read at each
entry of a region, and the benchmark scripts still run.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronscope
from neuronscope import neuron_region, profile_on_neuron
from neuronscope.config import disabled_by_env, env_true

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _profiling() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled)


def _probe(x: int, *, scale: int = 1) -> tuple[int, bool]:
    """Doubles ``x`` and says whether a profiler was running around it."""
    return x * 2 * scale, _profiling()


def test_disabled_decorator_is_a_plain_pass_through() -> None:
    wrapped = profile_on_neuron(enabled=False)(_probe)
    assert wrapped(3, scale=2) == (12, False)
    assert wrapped.__name__ == "_probe" and wrapped.__doc__ == _probe.__doc__
    assert inspect.signature(wrapped) == inspect.signature(_probe)
    assert wrapped.results == [] and wrapped.last_result is None


def test_env_disabled_decorator_never_starts_the_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    wrapped = profile_on_neuron(warmup=0, active=3, backend="cpu", export=False)(_probe)
    assert [wrapped(i) for i in range(3)] == [(0, False), (2, False), (4, False)]
    assert wrapped.results == []


def test_closed_window_stays_closed() -> None:
    wrapped = profile_on_neuron(warmup=1, active=1, backend="cpu", export=False, hints=False)(_probe)
    seen = [wrapped(i)[1] for i in range(5)]
    assert seen == [False, True, False, False, False]  # warm-up, captured, then the fast path
    assert len(wrapped.results) == 1
    assert wrapped.__neuronscope_state__.window.closed


def test_disabled_region_never_starts_the_profiler() -> None:
    r = neuron_region("off", enabled=False)
    for _ in range(3):
        with r:
            assert not _profiling()
    assert r.result is None
    with pytest.raises(ValueError, match="boom"):  # the user's exception passes through
        with r:
            raise ValueError("boom")


def test_region_reads_the_environment_at_each_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    r = neuron_region("env", backend="cpu", export=False, hints=False)
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    with r:
        assert not _profiling()
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "0")
    with r:
        assert _profiling()
    assert r.result is not None
    monkeypatch.setenv("NEURONSCOPE_DISABLE", " TRUE ")
    with r:
        assert not _profiling()
    monkeypatch.delenv("NEURONSCOPE_DISABLE")
    with r:
        assert _profiling()


@pytest.mark.parametrize(
    "value,disabled",
    [("1", True), ("true", True), ("Yes", True), ("on", True), ("  on  ", True),
     ("0", False), ("", False), ("no", False), ("2", False)],
)
def test_the_environment_switch_reads_true_values(monkeypatch: pytest.MonkeyPatch, value: str, disabled: bool) -> None:
    monkeypatch.setenv("NEURONSCOPE_DISABLE", value)
    assert disabled_by_env() is disabled and env_true("NEURONSCOPE_DISABLE") is disabled
    with neuron_region("switch", backend="cpu", export=False, hints=False) as r:
        assert _profiling() is not disabled
    assert (r.result is None) is disabled
    monkeypatch.delenv("NEURONSCOPE_DISABLE")
    assert disabled_by_env() is False


def test_disabling_inside_a_capture_still_ends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    outer = neuron_region("outer-env", backend="cpu", export=False, hints=False)
    inner = neuron_region("inner-env")
    with outer:
        monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
        with inner:  # uncaptured: it must not end the outer capture on its way out
            assert _profiling()
        assert _profiling()
    assert not _profiling()
    assert outer.result is not None and "inner-env" not in outer.result.regions


def test_region_window_after_it_closed() -> None:
    r = neuron_region("win-closed", warmup=1, active=1, backend="cpu", export=False, hints=False)
    seen = []
    for _ in range(4):
        with r:
            seen.append(_profiling())
    assert seen == [False, True, False, False]
    # A region made again in the loop body (the usual way to write it) shares the window.
    with neuron_region("win-closed", warmup=1, active=1, backend="cpu", export=False, hints=False):
        assert not _profiling()
    # neuronscope.reset() starts the window again, for every object of the name.
    neuronscope.reset()
    seen = []
    for _ in range(3):
        with r:
            seen.append(_profiling())
    assert seen == [False, True, False]
    assert len(r.results) == 2  # the captures before the reset stay


def test_capture_does_not_change_the_work() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 8)
    bare = (x @ x).softmax(-1)
    with neuron_region("same", backend="cpu", export=False) as r:
        inside = (x @ x).softmax(-1)
    assert torch.equal(bare, inside)
    assert r.result is not None and r.result.ops


def test_benchmark_scripts_run(capsys: pytest.CaptureFixture[str]) -> None:
    """A smoke run of the cheapest sections, so that the scripts do not rot."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_analysis
        import bench_fusion
        import bench_overhead
        import bench_trace

        assert bench_overhead.main(["--quick", "--section", "6"]) == 0
        assert bench_analysis.main(["--quick", "--section", "1", "--events", "600"]) == 0
        assert bench_fusion.main(["--quick"]) == 0
        assert bench_trace.main(["--quick", "--source", "cpu", "--runs", "1"]) == 0
    finally:
        sys.path.remove(str(BENCHMARKS))
    out: Any = capsys.readouterr().out
    assert "after the call window closed" in out
    assert "same op names: True; calls equal: True" in out
    assert "fusion_hints (all)" in out and "from_trace / (gunzip + json.loads)" in out
