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


def _run(tmp_path: Path, body: str, timeout: int = 120) -> str:
    """Run ``body`` after the prelude in a fresh process; its stdout (it must exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)}
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert run.returncode == 0, f"rc={run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    return run.stdout


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
