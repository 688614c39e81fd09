"""What the first capture of a process costs, against plain ``torch.profiler``.

A decorated forward of a small transformer (tests/real_models.py, default options: the call
after the warm-up is the capture, with its analysis and export) against the same call under a plain
``torch.profiler.profile()`` followed by ``key_averages().table()``, each in a fresh process
(after building the model and one call: unprofiled, or the decorator's default warm-up call,
so that torch's own first-call costs are in neither; the time is the capture call's); also with ``export=False``, which leaves out
writing the run directory, alternating, the median of ``--runs`` processes each. Target: at most 1.3x.

    python3 benchmarks/bench_first_capture.py [--model llama] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, sys, tempfile, time
sys.path[:0] = [{tests!r}, {root!r}]
import real_models as rm
import torch
torch.set_num_threads(1)  # a shared machine: one core each, the same for both sides
step = rm.step_fn(rm.MODELS[{model!r}], False)
if {mode!r} == "plain":
    from torch.profiler import profile
    step()
    t0, c0 = time.perf_counter(), time.process_time()
    with profile() as prof:
        step()
    prof.key_averages().table()
else:
    from neuronscope import profile_on_neuron
    export = {mode!r} == "decorated"
    f = profile_on_neuron(step, output_dir=tempfile.mkdtemp(), print_summary=False, export=export)
    f()  # the default warm-up call (observed), in place of the plain side's unprofiled call
    t0, c0 = time.perf_counter(), time.process_time()
    f()
    assert f.last_result.hints, "no hint"
print(json.dumps([(time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3]))
"""


def _run(model: str, mode: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of the measured call in a fresh process."""
    code = _CHILD.format(tests=str(ROOT / "tests"), root=str(ROOT), model=model, mode=mode)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=600)
    wall, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return float(wall), float(cpu)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="llama")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[tuple[float, float]]] = {"plain": [], "decorated": [], "decorated_no_export": []}
    for _ in range(args.runs):
        for mode, samples in times.items():
            samples.append(_run(args.model, mode))
    print(f"model {args.model}, {args.runs} fresh processes each, one torch thread, median ms (wall, and CPU time)")
    for k, what in ((0, "wall"), (1, "CPU")):
        plain = statistics.median(t[k] for t in times["plain"])
        print(f"{what}: plain torch.profiler + key_averages().table() {plain:.0f} ms {sorted(round(t[k]) for t in times['plain'])}")
        for mode in ("decorated", "decorated_no_export"):
            decorated = statistics.median(t[k] for t in times[mode])
            print(f"{what}: {mode} first capture {decorated:.0f} ms {sorted(round(t[k]) for t in times[mode])}, ratio {decorated / plain:.2f} (target at most 1.3)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
