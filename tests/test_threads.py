"""Threads and generators against torch's per-thread profiler (issue 36, item 1).

torch keeps a profiler session in the state of the thread that started it, and two sessions
started at once from two threads race in Kineto: both once ended in a segmentation fault. Each
scenario runs in its own processes (a crash fails the test, not the suite), several at once:
before the fix the decorated case crashed in the first round of 4 of 6 processes run at once
(3 of 8 one by one), and every generator case in every process.""" 

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from neuronscope import neuron_region
from neuronscope.announce import NeuronscopeWarning
from neuronscope.region import ensure_no_capture_running

SCRIPT = Path(__file__).parent / "reliability_helpers" / "thread_scenarios.py"
REPO = Path(__file__).resolve().parents[1]


def _run_scenario(name: str, processes: int, rounds: int) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-X", "faulthandler", str(SCRIPT), name, str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(processes)
    ]
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, f"{name}: exit {run.returncode} (-11 is a segmentation fault)\n{out[-3000:]}"
        assert out.count(f"ok {name} ") == rounds, out[-3000:]


def test_two_threads_calling_a_decorated_function_with_an_observed_warmup_do_not_crash() -> None:
    _run_scenario("two_threads_decorated", processes=6, rounds=2)


@pytest.mark.parametrize(
    "scenario",
    ["gen_main_to_thread", "gen_thread_to_main", "gen_thread_to_thread", "gen_observed_warmup", "to_thread_inside_capture"],
)
def test_a_region_held_by_a_generator_across_threads_does_not_crash(scenario: str) -> None:
    _run_scenario(scenario, processes=2, rounds=2)


def _start_and_join(thread: threading.Thread) -> None:
    thread.start()
    thread.join()


def test_a_capture_ended_on_another_thread_is_dropped_counted_and_stopped_by_its_own_thread() -> None:
    """In process: the other thread touches nothing; the capture is counted as a call that ran
    uncaptured, and this thread stops its own session when it next enters neuronscope."""
    regions: list[neuron_region] = []

    def batches() -> Iterator[int]:
        with neuron_region("moved_capture", backend="cpu", export=False) as r:
            regions.append(r)
            yield 1
            yield 2

    gen = batches()
    next(gen)
    worker = threading.Thread(target=lambda: list(gen))
    with pytest.warns(NeuronscopeWarning, match="ended on another thread"):
        _start_and_join(worker)
    assert torch.autograd.profiler._is_profiler_enabled  # nothing was touched over there
    assert regions[0].result is None and regions[0].skipped_calls == 1
    assert ensure_no_capture_running()  # ... and this thread stopped it on its way in
    assert not torch.autograd.profiler._is_profiler_enabled


def test_a_capture_stranded_on_an_idle_thread_takes_its_module_hooks_off_at_once() -> None:
    """torch's module hooks are process-wide: a capture ended on another thread unregisters
    them there and then, not when its own thread (idle, or dead: never) next enters
    neuronscope; else every module call of the process kept going through them."""
    from torch.nn.modules import module as torch_module

    layer = torch.nn.Linear(4, 4)

    def batches() -> Iterator[int]:
        with neuron_region("stranded_hooks", backend="cpu", export=False):
            layer(torch.ones(1, 4))
            yield 1
            yield 2

    gen = batches()
    next(gen)
    assert torch_module._global_forward_hooks  # registered for the capture
    worker = threading.Thread(target=lambda: list(gen))
    with pytest.warns(NeuronscopeWarning, match="ended on another thread"):
        _start_and_join(worker)
    assert not torch_module._global_forward_hooks and not torch_module._global_forward_pre_hooks
    assert ensure_no_capture_running()


def test_work_left_for_a_thread_survives_a_ctrl_c_while_it_runs() -> None:
    """A Ctrl-C while one piece runs leaves the rest for the thread's next entry (a stranded
    session's stop among them: it holds the process's profiler claim)."""
    from neuronscope.capture.base import defer_to_thread, has_deferred, run_deferred

    done: list[str] = []

    def interrupted() -> None:
        raise KeyboardInterrupt

    me = threading.current_thread()
    defer_to_thread(me, interrupted)
    defer_to_thread(me, lambda: done.append("rest"))
    with pytest.raises(KeyboardInterrupt):
        run_deferred()
    assert done == [] and has_deferred()
    run_deferred()
    assert done == ["rest"] and not has_deferred()


def test_work_left_for_a_thread_that_ended_runs_its_orphaned_part_elsewhere() -> None:
    from neuronscope.capture.base import defer_to_thread, has_deferred, run_deferred

    done: list[str] = []
    gone = threading.Thread(target=lambda: None)
    gone.start()
    gone.join()
    defer_to_thread(gone, lambda: done.append("never here"), orphaned=lambda: done.append("released"))
    run_deferred()
    assert done == ["released"] and not has_deferred()


def test_a_call_skipped_while_a_stranded_capture_holds_the_profiler_says_so(caplog) -> None:
    """A capture ended on another thread keeps the profiler claimed until its own thread (here
    alive and idle) comes back: a capture tried meanwhile is skipped, and the log names that
    stranded capture and its thread, not "the user's own torch.profiler"."""
    import logging

    logger = logging.getLogger("neuronscope")
    logger.addHandler(caplog.handler)
    gens: list[Iterator[int]] = []
    started, resume, done = threading.Event(), threading.Event(), threading.Event()

    def batches() -> Iterator[int]:
        with neuron_region("stranded_holder", backend="cpu", export=False):
            yield 1
            yield 2

    def owner_thread() -> None:  # starts the capture, then idles until told
        gens.append(batches())
        next(gens[0])
        started.set()
        resume.wait(30)
        ensure_no_capture_running()  # back in neuronscope: stops its stranded session
        done.set()

    owner = threading.Thread(target=owner_thread, name="batch-owner")
    try:
        owner.start()
        assert started.wait(30)
        with pytest.warns(NeuronscopeWarning, match="ended on another thread"):
            list(gens[0])  # ended here, on the main thread: stranded
        with neuron_region("meanwhile", backend="cpu", export=False) as meanwhile:
            torch.ones(2).sum()
        assert meanwhile.result is None and meanwhile.skipped_calls == 1
        said = sorted({r.getMessage() for r in caplog.records if r.getMessage().startswith("meanwhile ran uncaptured")})
        assert len(said) == 1 and "'stranded_holder'" in said[0] and "batch-owner" in said[0], said
        assert "torch.profiler" not in said[0]
    finally:
        resume.set()
        owner.join(30)
        logger.removeHandler(caplog.handler)
    assert done.is_set()
    with neuron_region("after", backend="cpu", export=False) as after:
        torch.ones(2).sum()
    assert after.result is not None  # the claim went with the stranded session's stop
