"""neuron_region: outermost capture, nested labelled ranges, per-thread counting, windows."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronscope
from neuronscope import NeuronscopeError, neuron_region, profile_on_neuron
from neuronscope.region import ensure_no_capture_running


def test_region_captures_the_block_and_nested_regions() -> None:
    x = torch.randn(32, 32)
    with neuron_region("step", export=False) as outer:
        with neuron_region("attn") as attn:
            y = torch.softmax(x @ x.T, dim=-1)
        with neuron_region("mlp"):
            z = torch.relu(y @ x)
            with neuron_region("inner"):
                z = z.exp()
    result = outer.result
    assert result is not None and result.name == "step" and result.status == "ok"
    assert attn.result is result  # inner regions report the capture that holds them
    assert {"step", "attn", "mlp", "inner"} <= set(result.regions)
    assert "aten::softmax" in result.regions["attn"].op_names
    assert "aten::exp" in result.regions["mlp"].op_names  # inclusive of nested regions
    assert "aten::exp" not in result.regions["attn"].op_names
    assert result.regions["mlp"].time_us >= result.regions["inner"].time_us
    assert result.regions["mlp"]["time_us"] == result.regions["mlp"].time_us
    assert result.regions["step"].time_us >= result.regions["attn"].time_us + result.regions["mlp"].time_us
    assert ensure_no_capture_running()


def test_region_result_is_none_until_the_outer_capture_ends() -> None:
    with neuron_region("outer", export=False) as outer:
        with neuron_region("inner") as inner:
            torch.ones(2).add_(1)
        assert inner.result is None
    assert inner.result is outer.result is not None


def test_region_as_decorator_captures_each_call() -> None:
    @neuron_region("decorated", export=False)
    def f(x: torch.Tensor) -> torch.Tensor:
        """Doc."""
        return x.sin()

    assert f.__name__ == "f" and f.__doc__ == "Doc."
    f(torch.ones(3))
    f(torch.ones(3))
    assert len(f.results) == 2
    assert f.last_result is not None and f.last_result.name == "decorated"
    assert f.last_result.op("aten::sin") is not None


def test_bare_region_decorator_uses_the_function_name() -> None:
    @neuron_region
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x.cos()

    helper(torch.ones(2))
    assert helper.last_result is not None and helper.last_result.name == "helper"


def test_region_window_counted_by_name_in_a_loop() -> None:
    results = []
    for _ in range(6):
        with neuron_region("loop-step", warmup=2, active=1, export=False) as r:
            torch.ones(4).mul_(2)
        results.append(r.result)
    assert [res is not None for res in results] == [False, False, True, False, False, False]
    assert r.results == [results[2]]  # the name's captures, on the last pass's object too


def _captured_names(root: Path) -> list[str]:
    """The name of each run directory under an export root, one entry per capture."""
    return sorted(run.parent.name for run in root.glob("*/*") if (run / "result.json").exists())


def test_inner_regions_stay_unprofiled_while_the_outer_loop_region_skips(runs_dir: Path) -> None:
    """Only the outermost region decides: on the warm-up passes and after the window, the
    regions inside it start no capture of their own (one capture in all, not one per pass)."""
    w = torch.randn(16, 16)
    for i in range(5):
        with neuron_region("loop_outer", warmup=2, active=1) as r:
            with neuron_region("fwd") as fwd:
                (w @ w).relu()
            with neuron_region("opt", warmup=0, active=1):  # a window of its own: not counted
                w.mul(0.5)
        if i == 2:
            assert r.result is not None and {"fwd", "opt"} <= set(r.result.regions)
            assert fwd.result is r.result
        else:
            assert r.result is None and fwd.result is None
    assert _captured_names(runs_dir) == ["loop_outer"]
    assert ensure_no_capture_running()


def test_a_decorated_call_past_its_window_runs_its_regions_unprofiled(runs_dir: Path) -> None:
    @profile_on_neuron(warmup=1, active=1)
    def step(x: torch.Tensor) -> torch.Tensor:
        with neuron_region("inside_step"):
            return helper(x)

    @profile_on_neuron(warmup=0, active=1)
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    for _ in range(4):
        step(torch.ones(8))
    assert len(step.results) == 1 and "inside_step" in step.results[0].regions
    assert helper.results == []  # a labelled range of step's capture, never one of its own
    assert _captured_names(runs_dir) == ["step"]
    # enabled=False removes a region altogether: what is inside it captures as if it were not there.
    with neuron_region("absent", enabled=False), neuron_region("alone", export=False) as alone:
        torch.ones(2).cos()
    assert alone.result is not None


def test_a_region_entered_through_a_context_manager_or_hooks_keeps_its_pass_quiet(runs_dir: Path) -> None:
    """The outer region entered by a @contextmanager, an ExitStack, or a trainer's hooks
    (``__enter__`` in one method, ``__exit__`` in another): one capture in all."""

    @contextlib.contextmanager
    def step_ctx() -> Iterator[None]:
        with neuron_region("ctx_step", warmup=2, active=1):
            yield

    class Hooks:
        region = neuron_region("hook_step", warmup=2, active=1)

        def on_step_begin(self) -> None:
            self.region.__enter__()

        def on_step_end(self) -> None:
            self.region.__exit__(None, None, None)

    hooks = Hooks()
    for _ in range(4):
        with step_ctx(), neuron_region("ctx_fwd"):
            torch.ones(4).sin()
        with contextlib.ExitStack() as stack:
            stack.enter_context(neuron_region("stack_step", warmup=2, active=1))
            with neuron_region("stack_fwd"):
                torch.ones(4).cos()
        hooks.on_step_begin()
        with neuron_region("hook_fwd"):
            torch.ones(4).exp()
        hooks.on_step_end()
    assert _captured_names(runs_dir) == ["ctx_step", "hook_step", "stack_step"]
    assert ensure_no_capture_running()


def test_a_generator_paused_in_a_skipped_region_holds_its_consumer_as_a_capture_would() -> None:
    """Until its region exits, what runs on the thread is inside it: unprofiled on the passes
    it skips, a labelled range of its capture on the one it captures."""

    def batches() -> Iterator[torch.Tensor]:
        for i in range(4):
            with neuron_region("gen_load", warmup=1, active=1, export=False):
                yield torch.ones(4) * i

    captured = []
    for batch in batches():
        with neuron_region("gen_step", export=False) as r:
            batch.sin()
        captured.append(r.result is not None)
    assert captured == [False] * 4
    assert ensure_no_capture_running()  # its marks went with its exits
    with neuron_region("after_gen", export=False) as after:
        torch.ones(2).cos()
    assert after.result is not None


def test_a_skipped_pass_ended_on_another_thread_leaves_no_mark_behind() -> None:
    def moved() -> Iterator[int]:
        with neuron_region("moved", warmup=5, active=1, export=False):
            yield 1
            yield 2

    gen = moved()
    next(gen)  # its region entered here, in warm-up: this thread's pass is marked
    worker = threading.Thread(target=lambda: list(gen))
    worker.start()
    worker.join()  # ... and left there
    with neuron_region("after_moved", export=False) as r:
        torch.ones(2).cos()
    assert r.result is not None and ensure_no_capture_running()


def test_one_region_object_skipping_on_two_threads_at_once_keeps_each_threads_mark() -> None:
    shared = neuron_region("shared_closed", warmup=0, active=1, export=False)
    with shared:
        torch.ones(2).sin()  # its one capture: past its window from here on
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def first() -> None:
        with shared:
            a_in.set()
            b_in.wait()
        a_out.set()
        with neuron_region("first_after", export=False) as r:
            torch.ones(2).cos()
        seen["first after its exit"] = r.result is not None

    def second() -> None:
        a_in.wait()
        with shared:
            b_in.set()
            a_out.wait()  # the first thread has left the region; this one is still inside
            with neuron_region("second_inside", export=False) as r:
                torch.ones(2).cos()
            seen["second inside"] = r.result is not None

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"first after its exit": True, "second inside": False}


def test_an_exit_skipped_between_hooks_does_not_silence_the_thread() -> None:
    class Hooks:
        def __init__(self) -> None:
            self.region = neuron_region("hooked", warmup=2, active=1, export=False)

        def on_step_begin(self) -> None:
            self.region.__enter__()

        def on_step_end(self) -> None:
            self.region.__exit__(None, None, None)

    hooks = Hooks()
    said: list[str] = []
    listener = logging.Handler(logging.WARNING)
    listener.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("neuronscope").addHandler(listener)
    try:
        for i in range(5):
            hooks.on_step_begin()
            if i == 0:
                continue  # an exception between the hooks: on_step_end never ran
            torch.ones(2).cos()
            hooks.on_step_end()
    finally:
        logging.getLogger("neuronscope").removeHandler(listener)
    assert len(hooks.region.results) == 1 and ensure_no_capture_running()
    assert any("entered again before its last entry exited" in m for m in said)


def test_a_region_entered_again_by_recursion_keeps_its_pass_quiet() -> None:
    recursive = neuron_region("recursive", warmup=5, active=1, export=False)
    inside: list[bool] = []

    def walk(n: int) -> None:
        with recursive:
            with neuron_region("rec_inner", export=False) as r:
                torch.ones(2).sin()
            inside.append(r.result is not None)
            if n:
                walk(n - 1)

    walk(3)
    assert inside == [False] * 4 and ensure_no_capture_running()


def test_a_call_that_raises_in_an_unprofiled_pass_leaves_no_mark_behind() -> None:
    @profile_on_neuron(warmup=0, active=1, export=False)
    def fails() -> None:
        raise ValueError("boom")

    for _ in range(2):  # captured (status "error"), then past the window: an unprofiled pass
        with pytest.raises(ValueError, match="boom"):
            fails()
    assert [r.status for r in fails.results] == ["error"]
    assert ensure_no_capture_running()
    with neuron_region("after_raise", export=False) as r:
        torch.ones(2).cos()
    assert r.result is not None


def test_exception_resets_the_nesting_count_and_exports_an_error_result(runs_dir: Path) -> None:
    error = ValueError("nope")
    with pytest.raises(ValueError) as info:
        with neuron_region("failing") as r:
            with neuron_region("deeper"):
                torch.ones(2).add_(1)
                raise error
    assert info.value is error
    assert ensure_no_capture_running()
    assert r.result is not None and r.result.status == "error"
    assert "deeper" in r.result.regions
    assert r.result.run_dir is not None and Path(r.result.run_dir).is_relative_to(runs_dir)
    assert neuronscope.load(r.result.run_dir).status == "error"
    with neuron_region("after", export=False) as again:  # the next capture works
        torch.ones(2).add_(1)
    assert again.result is not None and again.result.status == "ok"


def test_keyboard_interrupt_stops_the_profiler() -> None:
    with pytest.raises(KeyboardInterrupt):
        with neuron_region("interrupted", export=False) as r:
            torch.ones(2).add_(1)
            raise KeyboardInterrupt
    assert ensure_no_capture_running()
    assert not torch.autograd.profiler._is_profiler_enabled
    assert r.result is not None and r.result.status == "error"
    assert r.result.error is not None and r.result.error.startswith("KeyboardInterrupt")


def test_region_inside_the_users_own_profiler_runs_uncaptured() -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with neuron_region("mine", export=False) as r:
            torch.ones(2).add_(1)
    assert r.result is None
    names = {e.name for e in prof.events()}
    assert "aten::add_" in names


def test_second_thread_runs_uncaptured_and_is_counted() -> None:
    started = threading.Event()
    release = threading.Event()
    seen: dict[str, object] = {}

    @profile_on_neuron(warmup=0, active=None, export=False)
    def other(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def hold_capture() -> None:
        with neuron_region("holder", export=False) as r:
            started.set()
            release.wait(10)
        seen["holder"] = r.result

    t = threading.Thread(target=hold_capture)
    t.start()
    assert started.wait(10)
    try:
        out = other(torch.zeros(2))  # the profiler is busy on the other thread
    finally:
        release.set()
        t.join()
    assert torch.equal(out, torch.ones(2))
    assert other.results == [] and other.skipped_calls == 1
    assert seen["holder"] is not None
    other(torch.zeros(2))
    assert other.last_result is not None and other.last_result.skipped_calls == 1


_FAN_OUT = """
import time, warnings, torch
warnings.simplefilter("ignore")  # torch.jit is deprecated (torch >= 2.10): nothing about neuronscope
from neuronscope import neuron_region

@torch.jit.script
def square_then_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return (x @ x).sigmoid()

@torch.jit.script
def fan_out(x: torch.Tensor) -> torch.Tensor:
    futures = [torch.jit.fork(square_then_sigmoid, x) for _ in range(4)]
    return torch.stack([torch.jit.wait(f) for f in futures])

x = torch.randn(32, 32)
fan_out(x)
with neuron_region("fan", export=False) as r:
    fan_out(x)
    time.sleep(0.05)  # the pool threads leave their frames (see the test): torch's race, not the attribution
ops = {o.name: o.calls for o in r.result.regions["fan"].ops}
print("mm", ops["aten::mm"], "sigmoid", ops["aten::sigmoid"])
"""


def test_work_handed_to_other_threads_counts_for_the_region(tmp_path: Path) -> None:
    """TorchScript's fork runs on the inter-op thread pool (as CUDA backward runs on
    autograd's device threads) while the region's thread waits: that work is the region's.

    In a fresh process: torch 2.13 ends a forked function's range on its pool thread after its
    future completed, so a session stopped right after ``wait`` can be written to once freed
    (valgrind: "Invalid write" in ``onFunctionExit`` into blocks ``disableProfiler`` freed; bare
    ``torch.profiler`` the same). In the suite's process that corruption crashed tests run
    after this one, now and then."""
    import os
    import subprocess

    script = tmp_path / "fan_out.py"  # a file: TorchScript reads its functions' source
    script.write_text(_FAN_OUT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "mm 4 sigmoid 4" in run.stdout


def test_inside_the_users_own_profiler_regions_are_labels_in_it() -> None:
    """torch.profiler is not re-entrant: inside the user's own capture a region captures
    nothing itself, but shows in theirs as a labelled range, decorated calls too."""
    from torch.profiler import ProfilerActivity, profile

    @profile_on_neuron(warmup=0, active=1, export=False)
    def decorated(x: torch.Tensor) -> torch.Tensor:
        return x.exp()

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with neuron_region("blk", export=False) as r:
            torch.ones(8).sin()
            decorated(torch.ones(8))
    # Not neuronscope's captures: counted as calls it could not capture, and no results.
    assert r.result is None and r.skipped_calls == 1 and decorated.skipped_calls == 1 and decorated.results == []
    regions = neuronscope.from_profiler(prof).regions
    assert "aten::sin" in [o.name for o in regions["blk"].ops]
    assert "aten::exp" in [o.name for o in regions["decorated"].ops]
    assert ensure_no_capture_running()
    # The call that could not be captured gave its slot back: the next one is captured.
    decorated(torch.ones(8))
    assert decorated.last_result is not None and decorated.skipped_calls == 1
    decorated(torch.ones(8))
    assert len(decorated.results) == 1  # active=1: one capture, then free
    once = neuron_region("once", export=False, warmup=0, active=1)
    with profile(activities=[ProfilerActivity.CPU]), once:
        pass
    with once:
        torch.ones(2).cos()
    assert once.result is not None and once.skipped_calls == 1


def test_a_region_reused_in_a_loop_keeps_its_captures() -> None:
    """``r.results`` holds every capture the object ran (``r.result`` only the last), bounded."""
    from neuronscope.drive.owner import MAX_KEPT_RESULTS

    region = neuron_region("loop_kept", export=False, warmup=1, active=2)
    for i in range(5):
        with region:
            torch.ones(4).mul_(i)
    assert len(region.results) == 2 and region.results[-1] is region.result
    assert all(r.name == "loop_kept" for r in region.results)
    many = neuron_region("many", export=False, hints=False)
    for _ in range(MAX_KEPT_RESULTS + 3):
        with many:
            pass
    assert len(many.results) == MAX_KEPT_RESULTS
    assert neuron_region("off", enabled=False).results == []


def test_disabled_region_is_a_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    with neuron_region("off", enabled=False) as r:
        torch.ones(1)
    assert r.result is None
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "true")
    with neuron_region("env-off") as r2:
        assert not torch.autograd.profiler._is_profiler_enabled
    assert r2.result is None


def test_disabled_regions_are_checked_and_transparent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A disabled region written inline in a loop holds nothing; its options are still
    checked, and the user's exception passes through it."""
    regions = []
    for _ in range(3):
        with neuron_region("loop", enabled=False) as r:
            regions.append(r)
    assert all(r.name == "loop" and r.result is None and r.results == [] for r in regions)
    assert isinstance(regions[0], neuron_region) and not regions[0].enabled
    with pytest.raises(NeuronscopeError, match="unknown backend"):
        neuron_region("loop", enabled=False, backend="gpu")
    with pytest.raises(NeuronscopeError, match="enabled"):
        neuron_region("loop", enabled=0)  # equal to False, but not a bool
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    err = ValueError("the user's own")
    with pytest.raises(ValueError) as info, neuron_region("loop"):
        raise err
    assert info.value is err
    line = sys._getframe().f_lineno + 1
    assert neuron_region().name == f"test_region:{line}"  # named after where it was built

    @neuron_region("decorated")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5 and add.results == []
    monkeypatch.delenv("NEURONSCOPE_DISABLE")
    with neuron_region("loop", export=False) as live:  # enabled again: a real region
        torch.ones(2).sum()
    assert live is not regions[0] and live.result is not None


def test_a_region_built_while_disabled_by_the_environment_captures_once_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """NEURONSCOPE_DISABLE is read at each entry, not when the region is built."""
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    region = neuron_region("module_level", export=False)
    with region:
        torch.ones(2).sum()
    assert region.result is None
    monkeypatch.delenv("NEURONSCOPE_DISABLE")
    with region:
        torch.ones(2).sum()
    assert region.result is not None and "aten::sum" in [op.name for op in region.result.ops]


def test_bad_region_options_raise_when_built() -> None:
    with pytest.raises(NeuronscopeError, match="unknown backend"):
        neuron_region("x", backend="gpu")
    with pytest.raises(NeuronscopeError, match="name must be a non-empty string"):
        neuron_region("")


def test_record_shapes_and_with_stack_reach_the_profiler() -> None:
    with neuron_region("shapes", export=False, record_shapes=True) as r:
        torch.ones(3, 5).sum()
    assert r.result is not None
    op = r.result.op("aten::sum")
    assert op is not None and [3, 5] in op.input_shapes[0]


def test_what_the_capture_turns_on_by_itself_is_recorded_beside_the_users_options(tmp_path: Path) -> None:
    """A region that runs once has no warm-up call to observe: its capture turns on
    profile_memory for exact links. The result's options stay the user's; options_added says
    what was added and why, in memory and in result.json."""
    x = torch.randn(16, 16)
    with neuron_region("once", output_dir=str(tmp_path), print_summary=False) as r:
        (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).sum()
    result = r.result
    assert result is not None and result.run_dir is not None
    assert result.options["profile_memory"] is False
    assert result.options_added["profile_memory"]["value"] is True
    assert "warm-up" in result.options_added["profile_memory"]["why"]
    assert neuronscope.load(result.run_dir).options_added == result.options_added
    with neuron_region("asked", export=False, profile_memory=True) as asked:
        x.exp()
    assert asked.result is not None and asked.result.options_added == {}  # nothing added to what was asked
