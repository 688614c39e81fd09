"""The user's own torch.profiler session on another thread, in each order against a capture.

Two torch profiler sessions whose lives overlap on two threads cannot both be stopped (torch
2.13: the second stop dies with SIGSEGV in Kineto), so each case runs in a fresh process of its
own. What must hold in every order: the process lives, the user's profile keeps its events,
the capture says what it lost, and later captures on the same thread work. Real torch profiler
(CPU). ``capture.base.start_session`` / ``stop_session`` hold the rules.
"""

from __future__ import annotations

from pathlib import Path

from reliability_helpers.fresh import run_fresh

_PRELUDE = """
import os, threading, warnings, torch
warnings.simplefilter("ignore")
from neuronscope import neuron_region, profile_on_neuron
CPU = [torch.profiler.ProfilerActivity.CPU]
OUT = os.environ["OUT"]
x = torch.randn(4, 8)
held = {}
"""


def _run(tmp_path: Path, body: str) -> str:
    """Run ``body`` after the prelude in a fresh process; its stdout (it must exit 0)."""
    return run_fresh(tmp_path, _PRELUDE, body)


def test_a_capture_beside_a_session_in_its_schedules_warmup_starts_nothing(tmp_path) -> None:
    # A schedule's warm-up prepares the user's session steps before it starts it: torch's
    # "profiler enabled" flag is still off, so the capture's check passed and it started a
    # session over theirs; their stop then crashed the process (3 of 3 runs before the fix).
    out = _run(
        tmp_path,
        """
        warm, go = threading.Event(), threading.Event()

        @profile_on_neuron(backend="cpu", warmup=0, output_dir=OUT)
        def f(x):
            return x.relu()

        def user():
            def ready(p):
                held["names"] = {e.name for e in p.events()}
            sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
            with torch.profiler.profile(activities=CPU, schedule=sched, on_trace_ready=ready) as p:
                warm.set(); go.wait(30)  # prepared (its warm-up), not started
                p.step(); x.sum(); p.step()

        t = threading.Thread(target=user); t.start(); warm.wait(30)
        f(x)
        go.set(); t.join()
        r = f.last_result
        print("theirs", "aten::sum" in held["names"])
        print("ours", r.ops == [], r.wall_time_us > 0, any("was running when this capture began" in n for n in r.notes))
        """,
    )
    assert "theirs True" in out and "ours True True True" in out


def test_a_session_begun_and_ended_on_another_thread_inside_the_observed_call(tmp_path) -> None:
    # The observation of the warm-up call was replaced by the user's session on another thread
    # and left in the main thread's state: the capture after it failed to start ("Profiler is
    # already enabled on this thread") and the call ran uncaptured (3 of 3 runs before the fix).
    out = _run(
        tmp_path,
        """
        started, done = threading.Event(), threading.Event()

        @profile_on_neuron(backend="cpu", output_dir=OUT)  # warmup=1: that call is observed
        def f(x):
            if not started.is_set():
                started.set(); done.wait(30)  # the user's whole session runs inside it
            return x.relu()

        def user():
            started.wait(30)
            with torch.profiler.profile(activities=CPU) as p:
                x.sum()
            held["names"] = {e.name for e in p.events()}; done.set()

        t = threading.Thread(target=user); t.start()
        f(x); t.join(); f(x)
        print("theirs", "aten::sum" in held["names"])
        print("captured", len(f.results), f.results[-1].op("aten::relu") is not None)
        """,
    )
    assert "theirs True" in out and "captured 1 True" in out


def test_a_session_on_another_thread_that_outlives_the_capture(tmp_path) -> None:
    # Begun inside the region's capture, still running when it ends: the capture is not
    # stopped (that would be the first of two stops, and theirs the crashing second), and its
    # state is dropped at the thread's next capture, once theirs has ended.
    out = _run(
        tmp_path,
        """
        inside, ours_done = threading.Event(), threading.Event()

        def user():
            with torch.profiler.profile(activities=CPU) as p:
                x.sum(); inside.set(); ours_done.wait(30); x.neg()
            held["names"] = {e.name for e in p.events()}

        with neuron_region("r", backend="cpu", output_dir=OUT) as r:
            t = threading.Thread(target=user); t.start(); inside.wait(30); x.relu()
        ours_done.set(); t.join()
        with neuron_region("r2", backend="cpu", output_dir=OUT) as r2:
            x.exp()
        print("theirs", {"aten::sum", "aten::neg"} <= held["names"])
        print("lost", r.result.ops == [], any("on another thread while it ran" in n for n in r.result.notes))
        print("later", r2.result.op("aten::exp") is not None)
        """,
    )
    assert "theirs True" in out and "lost True True" in out and "later True" in out


def test_another_threads_running_session_keeps_its_flag_and_refuses_a_start() -> None:
    # force_profiler_off reset torch's process-wide "profiler enabled" flag after each of our
    # stops while the user's session ran on another thread: the next capture's check then
    # passed and it started inside theirs (the SIGSEGV of test_attack3). In process: nothing
    # here starts a second session.
    import threading

    import torch

    from neuronscope.capture.base import force_profiler_off, profiler_running, start_session, watch_sessions

    watch_sessions()  # as a decoration does: sessions from now on are seen (not one begun before)
    started, stop, held = threading.Event(), threading.Event(), {}

    def user() -> None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            started.set()
            stop.wait(30)
            torch.ones(2).sum()
        held["names"] = {e.name for e in p.events()}

    t = threading.Thread(target=user)
    t.start()
    started.wait(30)
    tried: list[bool] = []
    try:
        force_profiler_off()
        assert profiler_running()
        assert start_session(lambda: tried.append(True)) is None and tried == []
    finally:
        stop.set()
        t.join()
    assert not profiler_running() and "aten::sum" in held["names"]
