"""What the fusion analysis costs, against reading the capture's raw events.

Captures a small Llama-style model (RMSNorm, rotary, eager attention, SwiGLU: every idiom the
rule looks for) until the capture holds about ``--events`` profiler events, then times, as
medians over ``--repeat`` runs:

- ``raw read``: ``prof.profiler.kineto_results.events()``, the floor any analysis pays;
- ``event tree``: ``experimental_event_tree()``, which the data-flow graph walks;
- ``fusion_hints``: the whole rule (tree, graph, linking, matching, grouping);
- the same with ``profile_memory=True`` (exact linking through tensor ids);
- the capture itself with and without ``profile_memory`` (what turning it on costs the
  user's program, wall time of the profiled calls against the unprofiled ones).

Analysis steps are timed in CPU time of this process (single-threaded Python, steadier than
wall time on a shared machine), with torch at one intra-op thread.

Run ``python benchmarks/bench_fusion.py`` (100,000 events) or ``--quick`` (a smoke run).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fusion_cases import tiny_llama_case

from neuronscope.analysis.context import AnalysisContext
from neuronscope.analysis.dataflow import graph_from_profiler
from neuronscope.analysis.fusion import find_matches, fusion_hints
from neuronscope.events import table_from_profiler
from neuronscope.result.summary import summarize


def median_s(fn: Callable[[], Any], repeat: int) -> float:
    """Median CPU time of this process over ``repeat`` calls: every step timed here is
    single-threaded Python, and CPU time is far less disturbed by a busy machine than wall
    time."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def capture(run: Callable[[], Any], calls: int, memory: bool) -> tuple[Any, float]:
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=memory)
    prof.start()
    t0 = time.perf_counter()
    for _ in range(calls):
        run()
    elapsed = time.perf_counter() - t0
    prof.stop()
    return prof, elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000, help="profiler events to capture")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement")
    ap.add_argument("--quick", action="store_true", help="a small smoke run (5,000 events, 3 repeats)")
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.repeat = 5_000, 3
    torch.set_num_threads(1)  # steadier timings on a shared machine

    case = tiny_llama_case()
    run = case.run
    run()
    probe, _ = capture(run, 1, False)
    per_call = len(probe.profiler.kineto_results.events())
    calls = max(1, -(-args.events // per_call))

    plain = median_s(lambda: [run() for _ in range(calls)], args.repeat)
    rows: list[tuple[str, float, float]] = []
    for memory in (False, True):
        captures = [capture(run, calls, memory) for _ in range(args.repeat)]
        work = statistics.median(c[1] for c in captures)
        prof = captures[0][0]
        kineto = prof.profiler.kineto_results
        n_events = len(kineto.events())
        raw = median_s(kineto.events, args.repeat)
        tree = median_s(kineto.experimental_event_tree, args.repeat)
        table = table_from_profiler(prof, record_shapes=True)
        ctx = AnalysisContext(table=table, summary=summarize(table), backend="cpu", profiler=prof)
        graph_t = median_s(functools.partial(graph_from_profiler, prof, table), args.repeat)
        graph = graph_from_profiler(prof, table)
        assert graph is not None
        match_t = median_s(functools.partial(find_matches, graph), args.repeat)
        hints_t = median_s(functools.partial(fusion_hints, ctx), args.repeat)
        hints = fusion_hints(ctx)
        label = "profile_memory=True " if memory else "profile_memory=False"
        print(f"{label}: {n_events:,} events ({calls} model calls), {len(graph.nodes):,} user-level ops, "
              f"linking {graph.linking}, {len(hints)} hints: "
              + ", ".join(f"{h.pattern} x{h.calls}" for h in hints))
        print(f"  capture overhead     {work / plain:6.2f}x the unprofiled run ({work:.3f} s vs {plain:.3f} s)")
        print(f"  raw read             {raw * 1e3:9.1f} ms   1.00x")
        print(f"  event tree           {tree * 1e3:9.1f} ms  {tree / raw:5.2f}x")
        print(f"  graph (tree+linking) {graph_t * 1e3:9.1f} ms  {graph_t / raw:5.2f}x")
        print(f"  matching             {match_t * 1e3:9.1f} ms  {match_t / raw:5.2f}x")
        print(f"  fusion_hints (all)   {hints_t * 1e3:9.1f} ms  {hints_t / raw:5.2f}x")
        rows.append((label, work, hints_t))
    (_, work_off, _), (_, work_on, _) = rows
    print(f"profile_memory=True makes the captured run {work_on / work_off:.2f}x as long as profile_memory=False")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
