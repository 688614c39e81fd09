"""Attacks on the latest change the way a user's program meets it: a region held across a
generator's yields, a full disk, a second process writing the same output root, hostile kept
templates and module sources, torch refusing a session's preparation.

Each case runs in a fresh process with a timeout (what it guards against is a hang, a crash or
a lost measurement). Real torch profiler (CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from reliability_helpers.fresh import run_fresh

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """
import os, sys, threading, time, warnings, torch
warnings.simplefilter("ignore")
from neuronscope import neuron_region, profile_on_neuron
from neuronscope.capture import base, torch_private
CPU = [torch.profiler.ProfilerActivity.CPU]
OUT = os.environ["OUT"]
x = torch.randn(4, 8)

def free_after():
    # a capture on this thread still records its op, and the gate and the claim are free once
    # it entered neuronscope (a capture that ended on another thread keeps the claim until its
    # own thread enters neuronscope again: capture.base.claim_held_for says so to skipped calls)
    with neuron_region("after", backend="cpu", output_dir=OUT) as after:
        x.sin()
    print("after", after.result is not None and after.result.op("aten::sin") is not None)
    print("gate", torch_private.session_gate().acquire(blocking=False), "claim", base.profiler_claimed())
"""


def _run(tmp_path: Path, body: str, timeout: int = 180, env: dict[str, str] | None = None) -> str:
    """Run ``body`` after the prelude in a fresh process; its stdout (it must exit 0)."""
    return run_fresh(tmp_path, _PRELUDE, body, timeout=timeout, env=env)


def test_a_region_held_across_yields_resumed_on_other_threads_beside_the_users_profiler(tmp_path) -> None:
    # A generator enters a region on the main thread, is resumed on a second, and ends the
    # region on a third (or the main one), while the user's own torch.profiler loops on a
    # fourth: no hang, no crash, the user's profiler sees its ops, the gate is free afterwards.
    out = _run(
        tmp_path,
        """
        def gen():
            with neuron_region("g", backend="cpu", output_dir=OUT) as r:
                yield x.relu()
                yield x.exp()
            yield r

        stop, theirs = threading.Event(), []
        def user():
            while not stop.is_set():
                with torch.profiler.profile(activities=CPU) as p:
                    x.neg(); time.sleep(0.002)
                theirs.append(any(e.name == "aten::neg" for e in p.events()))
        u = threading.Thread(target=user); u.start()
        ends = 0
        for i in range(30):
            g = gen(); next(g)
            t = threading.Thread(target=next, args=(g,)); t.start(); t.join(30)
            box = []
            if i % 2:
                t = threading.Thread(target=lambda: box.append(next(g))); t.start(); t.join(30)
            else:
                box.append(next(g))
            ends += hasattr(box[0], "result")
        stop.set(); u.join(30)
        print("theirs", len(theirs) > 0 and all(theirs), "ends", ends)
        free_after()
        """,
    )
    assert "theirs True ends 30" in out and "gate True claim False" in out and "after True" in out


def test_a_full_disk_at_export_keeps_the_result_and_frees_the_gate(tmp_path) -> None:
    # Every write and fsync of the main thread fails with ENOSPC (a full disk) while another
    # thread captures into a writable root: the user's results and the measurements survive.
    out = _run(
        tmp_path,
        """
        import errno
        real_write, real_fsync = os.write, os.fsync
        def full(real):
            def call(*a):
                if threading.current_thread() is threading.main_thread() and a[0] != 2:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return real(*a)
            return call
        os.write, os.fsync = full(real_write), full(real_fsync)
        FULL = os.path.join(OUT, "full"); OTHER = os.path.join(OUT, "other")
        y = torch.randn(32, 32)

        @profile_on_neuron(backend="cpu", warmup=0, active=None, output_dir=FULL)
        def f(y):
            return (y @ y).relu()

        stop, got = threading.Event(), []
        def other():
            while not stop.is_set():
                with neuron_region("o", backend="cpu", output_dir=OTHER) as r:
                    y.exp()
                got.append(r.result is not None); time.sleep(0.005)
        t = threading.Thread(target=other); t.start()
        right, end = 0, time.time() + 3
        while time.time() < end or not f.results:
            right += torch.equal(f(y), (y @ y).relu()); time.sleep(0.002)
        stop.set(); t.join(60)
        print("right", right > 0, "measured", len(f.results) > 0 and all(r.op("aten::relu") is not None for r in f.results))
        print("other", any(got))
        os.write, os.fsync = real_write, real_fsync
        free_after()
        """,
    )
    assert "right True measured True" in out and "other True" in out
    assert "gate True claim False" in out and "after True" in out


_SECOND_USER = """
import os, time, warnings, torch
warnings.simplefilter("ignore")
from neuronscope import profile_on_neuron
x = torch.randn(32, 32)

@profile_on_neuron(backend="cpu", warmup=0, active=None, output_dir=os.environ["OUT"])
def step(x):
    return (x @ x).relu()

start = float(os.environ["START"])
while time.time() < start:
    time.sleep(0.001)
for _ in range(25):
    step(x)
print("n", len(step.results))
"""


def test_two_processes_writing_one_output_root_under_the_same_names(tmp_path) -> None:
    # Three users' processes run the same decorated loop into one output root at once: every
    # run directory is whole (its result parses, its summary is there), none clobbered, and
    # ``neuronscope ls`` / ``show`` read them.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path), "START": str(time.time() + 8)}
    procs = [subprocess.Popen([sys.executable, "-c", _SECOND_USER], env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs) and all("n 25" in o for o in outs), outs
    runs = sorted(p for p in (tmp_path / "step").iterdir() if not p.name.startswith("."))
    assert len(runs) == 75
    for run in runs:
        assert json.loads((run / "result.json").read_text())["name"] == "step"
        assert (run / "summary.txt").is_file()
    cli = [sys.executable, "-m", "neuronscope"]
    listed = subprocess.run([*cli, "ls", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0 and listed.stdout.count("step ") >= 1, listed.stderr
    shown = subprocess.run([*cli, "show", str(runs[0])], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0 and "aten::mm" in shown.stdout, shown.stderr


_TEMPLATES_CASE = """
import json
from pathlib import Path
from neuronscope.analysis.patterns import kept
bad = Path(OUT) / "graph_templates.json"
good = json.loads(kept.TEMPLATES_FILE.read_text())
case = os.environ["CASE"]
if case == "truncated":
    bad.write_text(kept.TEMPLATES_FILE.read_text()[:5000])
elif case == "wrong_shape":
    bad.write_text(json.dumps({name: {"a": 1} for name in good}))
elif case == "not_an_object":
    bad.write_text("[1, 2, 3]")
elif case == "binary":
    bad.write_bytes(bytes(range(256)))
elif case == "empty_template":
    bad.write_text(json.dumps({name: [[[], {}]] for name in good}))
elif case == "dangling_op":
    for found in good.values():
        for ops, _ in found:
            for op in ops:
                op[2] = [["op", 999, True] for _ in op[2]]
    bad.write_text(json.dumps(good))
kept.TEMPLATES_FILE = bad
import torch.nn as nn

class Norm(nn.Module):
    def forward(self, t):
        h = t - t.mean(-1, keepdim=True)
        return h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-5)

m = Norm()
@profile_on_neuron(backend="cpu", warmup=0, output_dir=OUT)
def f(t):
    return m(t)
y = f(x)
print("same", torch.allclose(y, m(x)), "hints", sorted({h.pattern for h in f.last_result.hints}))
"""


def test_damaged_kept_templates_are_derived_instead(tmp_path) -> None:
    # A truncated, wrong-shaped, non-object or binary graph_templates.json: the templates are
    # derived from the spellings, the user's call returns its value, and the hint is given.
    # A file that decodes but cannot be walked (an empty template, an op reading op 999) lost
    # every fusion hint of the capture (IndexError in the matcher) before it was checked.
    for case in ("truncated", "wrong_shape", "not_an_object", "binary", "empty_template", "dangling_op"):
        out = _run(tmp_path / case, _TEMPLATES_CASE, env={"CASE": case, "OUT": str(tmp_path / case)})
        assert "same True hints ['layer_norm']" in out, (case, out)


_MODULES_CASE = '''
import textwrap, functools
import torch.nn as nn
src = textwrap.dedent("""
import torch, functools, torch.nn as nn
def deco(f):
    @functools.wraps(f)
    def w(*a, **k): return f(*a, **k)
    return w
class Norm(nn.Module):
    @deco
    def forward(self, x):
        h = x - x.mean(-1, keepdim=True)
        return h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-5)
class One(nn.Module): forward = lambda self, x: torch.softmax(x, -1)
class Odd(nn.Module):
    def forward(self, x): return (lambda t: t * torch.sigmoid(t))(x)
""")
d = os.path.join(OUT, "src"); os.makedirs(d, exist_ok=True)
path = os.path.join(d, "usermod.py")
open(path, "w").write(src)
sys.path.insert(0, d)
import usermod
case = os.environ["CASE"]
if case == "deleted":
    os.remove(path)
elif case == "changed":
    open(path, "w").write("x = 1\\n")
elif case == "garbage":
    open(path, "wb").write(bytes([0, 255]) * 100)
ns, ns2 = {}, {}
exec(compile(src, "<string>", "exec"), ns)
exec(compile(src, "<ipython-input-1-abc>", "exec"), ns2)

class Looped(nn.Module):
    def forward(self, x):
        return x.relu()
if case == "wrapper_loop":
    Looped.forward.__wrapped__ = Looped.forward  # a decorator's __wrapped__ pointing at itself

class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleList([usermod.Norm(), usermod.One(), usermod.Odd(), ns["Norm"](), ns["One"](), ns2["Odd"](), Looped()])
    def forward(self, x):
        for p in self.parts:
            x = p(x)
        return x

model = Top()
@profile_on_neuron(backend="cpu", warmup=0, output_dir=OUT)
def f(x):
    return model(x)
y = f(x)
r = f.last_result
print("same", torch.allclose(y, model(x)), "hints", sorted({h.pattern for h in r.hints}))
print("types", sorted({s.type for s in r.modules}))
'''


def test_module_sources_changed_deleted_exec_or_odd_are_no_crash(tmp_path) -> None:
    # Module classes whose file changed, was deleted or turned to garbage after import, classes
    # made by exec() (``<string>``, a notebook's cell name), decorated forwards, lambdas and
    # one-line classes: the call returns its value, hints and the module breakdown are given.
    for case in ("plain", "deleted", "changed", "garbage"):
        out = _run(tmp_path / case, _MODULES_CASE, env={"CASE": case, "OUT": str(tmp_path / case)})
        assert "same True hints" in out and "'layer_norm'" in out, (case, out)
        assert "types ['Looped', 'Norm', 'Odd', 'One', 'Top']" in out, (case, out)


def test_a_wrapper_loop_on_a_forward_keeps_the_module_breakdown(tmp_path) -> None:
    # ``forward.__wrapped__`` pointing back at itself made ``inspect.unwrap`` raise ValueError
    # while the capture stopped: every module's class was lost from the breakdown (types '').
    out = _run(tmp_path, _MODULES_CASE, env={"CASE": "wrapper_loop"})
    assert "same True hints" in out and "'layer_norm'" in out
    assert "types ['Looped', 'Norm', 'Odd', 'One', 'Top']" in out, out


def test_a_refused_preparation_leaves_no_session_behind(tmp_path) -> None:
    # torch refusing a session's preparation (bad arguments: TypeError from the binding) left
    # the thread's span recorded by the wrapper: the thread's next capture "stopped" a session
    # that never began and its result held none of the user's ops.
    out = _run(
        tmp_path,
        """
        import torch.autograd.profiler as ap

        @profile_on_neuron(backend="cpu", warmup=0, active=None, output_dir=OUT)
        def f(x):
            return x.relu()

        f(x)
        for bad in (lambda: ap._prepare_profiler("bad", {"nope"}), lambda: torch.profiler.profile(activities=["cpu"]).__enter__()):
            try:
                bad()
            except (TypeError, AssertionError, RuntimeError):
                pass
        print("span", torch_private.thread_session())
        f(x)
        print("measured", f.last_result.op("aten::relu") is not None)
        with torch.profiler.profile(activities=CPU) as p:
            x.neg()
        print("theirs", any(e.name == "aten::neg" for e in p.events()))
        res = []
        def other():
            with neuron_region("o", backend="cpu", output_dir=OUT) as r:
                x.exp()
            res.append(r.result is not None and r.result.op("aten::exp") is not None)
        t = threading.Thread(target=other); t.start(); t.join(60)
        print("other", res)
        free_after()
        """,
    )
    assert "span None" in out and "measured True" in out and "theirs True" in out
    assert "other [True]" in out and "gate True claim False" in out and "after True" in out
