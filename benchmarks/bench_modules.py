"""What the module breakdown costs: the module hooks during a capture, and building the tree.

A tiny Llama (transformers, from config, random weights; 2 or 8 layers, about 30 module calls
per layer... see the printed counts) runs one forward inside a region, captured with the
module hooks on and (by replacing ``ModuleHooks.install`` for this script only) off, the two
interleaved round by round. Printed: the median wall time of the profiled work
(``result.wall_time_us``) and the process CPU time of the whole region (capture, analysis,
result), the difference per module call, and the time :func:`build_modules` takes.

    python benchmarks/bench_modules.py [--layers 2,8] [--rounds 15]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import neuronscope as ns
from neuronscope.capture import modules as capture_modules

logging.getLogger("neuronscope").propagate = False
logging.getLogger("neuronscope").addHandler(logging.NullHandler())


def run(layers: int, rounds: int) -> None:
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256)
    model = LlamaForCausalLM(cfg).eval()
    x = torch.randint(0, 256, (1, 16))
    real_install = capture_modules.ModuleHooks.install
    off = lambda self: False

    def capture(hooks: bool) -> tuple[float, float, int]:
        capture_modules.ModuleHooks.install = real_install if hooks else off  # type: ignore[method-assign]
        cpu0 = time.process_time()
        with torch.no_grad(), ns.neuron_region("bench", backend="cpu", export=False, print_summary=False) as r:
            model(x)
        cpu = time.process_time() - cpu0
        return r.result.wall_time_us, cpu * 1e6, sum(m.calls for m in r.result.modules)

    with torch.no_grad():
        model(x)
    capture(True), capture(False)
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    calls = 0
    for _ in range(rounds):
        for hooks in (True, False):
            wall, cpu, n = capture(hooks)
            walls[hooks].append(wall)
            cpus[hooks].append(cpu)
            calls = max(calls, n)
    capture_modules.ModuleHooks.install = real_install  # type: ignore[method-assign]
    w_on, w_off = statistics.median(walls[True]), statistics.median(walls[False])
    c_on, c_off = statistics.median(cpus[True]), statistics.median(cpus[False])
    print(f"llama {layers} layers, {calls} module calls per forward, median of {rounds} interleaved rounds")
    print(f"  profiled work wall: hooks on {w_on / 1e3:8.2f} ms, off {w_off / 1e3:8.2f} ms, "
          f"+{(w_on - w_off) / max(w_off, 1e-9) * 100:5.1f}% ({(w_on - w_off) / max(calls, 1):.1f} us per module call)")
    print(f"  whole region CPU:   hooks on {c_on / 1e3:8.2f} ms, off {c_off / 1e3:8.2f} ms, "
          f"+{(c_on - c_off) / max(c_off, 1e-9) * 100:5.1f}% ({(c_on - c_off) / max(calls, 1):.1f} us per module call)")

    # steady state: many forwards inside one profile, hooks on and off (CPU time per call)
    def steady(hooks: bool, n: int = 30) -> float:
        with torch.no_grad(), torch.profiler.profile():
            h = capture_modules.ModuleHooks()
            if hooks:
                h.install()
            t0 = time.process_time()
            for _ in range(n):
                model(x)
            spent = (time.process_time() - t0) / n
            if hooks:
                h.remove()
        return spent

    per_on, per_off = [], []
    for _ in range(max(3, rounds // 5)):
        per_on.append(steady(True))
        per_off.append(steady(False))
    s_on, s_off = statistics.median(per_on), statistics.median(per_off)
    print(f"  steady state (30 forwards in one profile, CPU per forward): on {s_on * 1e3:.2f} ms, off {s_off * 1e3:.2f} ms, "
          f"+{(s_on - s_off) / s_off * 100:.1f}% ({(s_on - s_off) / max(calls, 1) * 1e6:.1f} us per module call)")

    # building the tree alone, from a capture's table
    from neuronscope.events import table_from_profiler
    from neuronscope.events.modules import split_module_ranges
    from neuronscope.result.modules import build_modules

    hooks = capture_modules.ModuleHooks()
    with torch.profiler.profile() as prof:
        hooks.install()
        with torch.no_grad():
            model(x)
        facts = hooks.remove()
    times = []
    for _ in range(rounds):
        table = table_from_profiler(prof, record_shapes=False)
        t0 = time.process_time()
        tree = build_modules(split_module_ranges(table)[0], types=facts.types, wall_time_us=1.0)
        times.append(time.process_time() - t0)
    print(f"  split_module_ranges + build_modules: {statistics.median(times) * 1e3:.2f} ms CPU "
          f"for {len(table)} events, {len(tree)} modules")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2,8")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for layers in map(int, args.layers.split(",")):
        run(layers, args.rounds)


if __name__ == "__main__":
    main()
