"""Attacks on the session gate (capture/torch_private.py's wrappers of torch's session functions)
the way a user's program meets it: forks, interrupts, the user's own profiler at odd moments.

Each case runs in a fresh process with a timeout: what it guards against is a hang or a crash.
Real torch profiler (CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from reliability_helpers.fresh import run_fresh

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """
import os, sys, threading, time, warnings, torch
warnings.simplefilter("ignore")
from neuronscope import neuron_region, profile_on_neuron
from neuronscope.capture import torch_private
CPU = [torch.profiler.ProfilerActivity.CPU]
OUT = os.environ["OUT"]
x = torch.randn(4, 8)

def wait_child(pid, seconds=30):
    # the child's exit code, or "hung" (killed) after ``seconds``
    deadline = time.time() + seconds
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9); os.waitpid(pid, 0)
    return "hung"
"""


def _run(tmp_path: Path, body: str, timeout: int = 120, before: str = "") -> str:
    """Run ``body`` after the prelude (and ``before`` before it) in a fresh process; its
    stdout (it must exit 0)."""
    return run_fresh(tmp_path, before, _PRELUDE, body, timeout=timeout)


def test_a_child_forked_while_another_thread_holds_the_gate_can_profile(tmp_path) -> None:
    # The gate is a lock: forked while another thread held it (a capture starting, the user's
    # session preparing), the child inherited it held by a thread it does not have, and its
    # first torch.profiler (a DataLoader worker's, the user's own) waited for ever (3 of 3).
    out = _run(
        tmp_path,
        """
        @profile_on_neuron(backend="cpu", warmup=0, output_dir=OUT)
        def f(x):
            return x.relu()

        held, go = threading.Event(), threading.Event()
        def holder():
            with torch_private.session_gate():
                held.set(); go.wait(60)
        t = threading.Thread(target=holder); t.start(); held.wait(30)
        pid = os.fork()
        if pid == 0:
            with torch.profiler.profile(activities=CPU) as p:
                x.sum()
            f(x)
            os._exit(0 if any(e.name == "aten::sum" for e in p.events()) else 3)
        go.set(); t.join()
        print("child", wait_child(pid))
        """,
    )
    assert "child 0" in out


_WITHOUT_NAMES = """
import builtins, torch, torch.autograd.profiler as ap
# A torch without the session functions' names on its module (neuronscope's wrappers then find
# nothing to wrap): torch's own code still reaches them, through builtins.
for n in ("_run_on_profiler_start", "_prepare_profiler", "_disable_profiler"):
    setattr(builtins, n, getattr(ap, n)); delattr(ap, n)
"""


def test_without_the_private_names_a_session_inside_the_call_is_no_crash(tmp_path) -> None:
    # Without the names no session is counted, so the user's own torch.profiler begun and ended
    # inside a decorated call went unseen: the capture's stop was a second _disable_profiler
    # with no session, and the process died (SIGSEGV, 3 of 3; so before this round too).
    out = _run(
        tmp_path,
        before=_WITHOUT_NAMES,
        body="""
        print("gate", type(torch_private.session_gate()).__name__, torch_private.profiler_starts())

        @profile_on_neuron(backend="cpu", warmup=0, active=None, output_dir=OUT)
        def g(x):
            with torch.profiler.profile(activities=CPU) as p:
                x.neg()
            held.append({e.name for e in p.events()})
            return x.relu()

        held = []
        g(x); g(x)
        print("theirs", all("aten::neg" in names for names in held), len(held))
        print("said", [any("replaced neuronscope's" in n for n in r.notes) for r in g.results])
        with neuron_region("r", backend="cpu", output_dir=OUT) as r:
            x.exp()
        print("later", r.result.op("aten::exp") is not None)
        """,
    )
    assert "gate RLock 0" in out and "theirs True 2" in out and "said [True, True]" in out and "later True" in out


@pytest.mark.xfail(
    strict=True,
    reason="a Ctrl-C inside the user's own torch.profiler start (after Kineto's preparation, or "
    "between its flag and its start) leaves this thread's preparation recorded, or the flag "
    "set, with nothing running: every later capture is refused until the user's next "
    "profile ends on that thread. Not dropped on purpose for now: a preparation left that way "
    "cannot be told from a schedule's warm-up that will still start, whose Kineto trace a drop "
    "would take away",
)
def test_a_capture_after_an_interrupted_start_of_the_users_profiler(tmp_path) -> None:
    # Found by a timer's KeyboardInterrupt at random points of the start (0.01-0.8 ms): about
    # 6 starts in 10 leave such a state (400 tries, 2 seeds: 241 and 254 later captures lost).
    out = _run(
        tmp_path,
        """
        import random, signal

        @profile_on_neuron(backend="cpu", warmup=0, active=None, output_dir=OUT)
        def f(x):
            return x.relu()

        f(x)
        def interrupt(sig, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        random.seed(0)
        for _ in range(400):
            try:
                signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00001, 0.0008))
                with torch.profiler.profile(activities=CPU):
                    x.sum()
                while True:
                    pass
            except KeyboardInterrupt:
                pass
            signal.setitimer(signal.ITIMER_REAL, 0)
            if torch_private.native_profiler_enabled():  # their session really runs: refused, rightly
                torch.autograd.profiler._disable_profiler(); torch_private.clear_profiler_flag()
                continue
            if torch_private.thread_session() is not None or torch_private.profiler_flag_on():
                break
        else:
            raise AssertionError("no interrupted start left a state behind")
        n = len(f.results)
        f(x)
        print("captured", len(f.results) > n and f.last_result.op("aten::relu") is not None)
        """,
        timeout=300,
    )
    assert "captured True" in out


@pytest.mark.xfail(
    strict=True,
    reason="a signal handler that runs the user's own torch.profiler on the main thread can run "
    "between a capture's Kineto preparation and its start (or inside its stop, after the "
    "check): the handler's session consumes the preparation, and the capture's start then "
    "poisons the thread (any later prepare or stop there crashes: SIGSEGV, bare torch too "
    "in that order). The gate is reentrant for the thread; making a start atomic against "
    "Python signal handlers (deferring them around start and stop) is not a small change",
)
def test_a_signal_handler_that_profiles_during_captures(tmp_path) -> None:
    # Bare torch: 100 handler sessions in 100 plain calls, no crash. With a decorated call:
    # SIGSEGV in 3 runs of 3 (the handler inside gated_prepare, or inside _stop_runner).
    out = _run(
        tmp_path,
        """
        import random, signal

        @profile_on_neuron(backend="cpu", warmup=0, active=None, output_dir=OUT)
        def f(x):
            return x.relu()

        seen = []
        def handler(sig, frame):
            with torch.profiler.profile(activities=CPU) as p:
                x.neg()
            seen.append(any(e.name == "aten::neg" for e in p.events()))
        signal.signal(signal.SIGALRM, handler)
        f(x)
        random.seed(1)
        for _ in range(200):
            signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00001, 0.003))
            f(x)
            signal.setitimer(signal.ITIMER_REAL, 0)
        print("theirs", len(seen) > 0 and all(seen))
        """,
        timeout=300,
    )
    assert "theirs True" in out


def test_a_child_forked_while_stderr_is_filtered_keeps_its_stderr(tmp_path) -> None:
    # fd 2 points at a scratch file for a profiler start's or stop's moment: a child forked
    # then (a DataLoader worker, by another thread) kept writing its stderr there, and what it
    # wrote after the parent read the file back was lost (1 of 1 here; 1 mark in 60 forks
    # beside a capture loop). The fork hook puts the child's fd 2 back.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)}
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(
        """
        from neuronscope.capture import stderr
        inside, go = threading.Event(), threading.Event()
        def filtered():
            with stderr.quiet_native_stderr():
                inside.set(); go.wait(30)
        t = threading.Thread(target=filtered); t.start(); inside.wait(30)
        pid = os.fork()
        if pid == 0:
            time.sleep(0.5)  # the parent's filter has ended by now
            os.write(2, b"CHILD-MARK\\n"); os._exit(0)
        go.set(); t.join()
        print("child", wait_child(pid))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "child 0" in run.stdout and "CHILD-MARK" in run.stderr
