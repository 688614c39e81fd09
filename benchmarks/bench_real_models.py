"""Hints on real model code: idioms found / missed / false, estimates against hint.verify(),
and what exact data flow costs a capture.

Models: tests/real_models.py (transformers Llama, GPT-2, BERT, T5, Gemma, Phi, GPT-NeoX from
config with random weights, a nanoGPT, a timm-style ViT block, a ResNet-style block), each
as an inference forward and an AdamW training step, captured as a decorated function with
the default options (one warm-up call, observed; one captured call).

1. Per model and step: the expected idioms, those found, missed and false; and the same for a
   user's own ``torch.profiler.profile(record_shapes=True)`` read with ``from_profiler`` (no
   tensor ids, nothing observed: matched by op order, ``confidence="sequence"``).
2. Per verifiable hint (rms_norm, layer_norm, softmax, gelu, silu_mul): the estimated saving,
   the same capture's estimate read back from the trace it exported (``from_trace``), what
   ``hint.verify()`` measured, and their ratio (target: within 2x for 9 of 10, and never a
   positive estimate where verify measured a loss beyond noise).
3. The cost of exact data flow, per model step, medians of interleaved rounds:
   - the captured call: a decorated call's capture runs with the user's options, so it costs
     what ``record_shapes=True`` alone costs; the analysis then relinks from the observation
     (whose graph it builds: a decorated call's first capture does) instead of matching the
     unlinked capture by op order: per round the ratio of the two, median and interquartile
     range;
   - the observed warm-up call against a plain call (paid once, on a call that runs anyway);
   - a capture with nothing observed (``profile_memory=True``) against ``record_shapes=True``.

    python3 benchmarks/bench_real_models.py [--models llama,gpt2] [--rounds 21] [--no-verify] [--no-idioms] [--no-overhead]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import real_models as rm
import torch
from torch.profiler import ProfilerActivity, profile

from neuronscope import from_profiler, from_trace, profile_on_neuron
from neuronscope.capture.observe import observe_dataflow
from neuronscope.capture.verify import measure
from neuronscope.drive.pipeline import build_result
from neuronscope.errors import NeuronscopeError
from neuronscope.events import table_from_profiler


def capture_hints(model: rm.Model, train: bool, out: Path) -> tuple[Any, Any]:
    """The decorated step's result (exported under ``out``), and the result of reading back the
    trace it exported."""
    f = profile_on_neuron(rm.step_fn(model, train), output_dir=out, backend="cpu", print_summary=False, warmup=1, active=1)
    f()
    f()
    run = Path(f.last_result.run_dir)
    (trace,) = list(run.glob("trace.json*"))
    return f.last_result, from_trace(trace)


def section_idioms(models: list[str], out: Path) -> list[Any]:
    print("== 1. idioms per model (default options: decorated, one observed warm-up call) ==")
    print(f"{'model':<10} {'step':<8} {'found':<62} {'missed':<10} {'false':<10}")
    results = []
    for name in models:
        m = rm.MODELS[name]
        for train in (False, True):
            r, t = capture_hints(m, train, out)
            got = {f"{h.kind}:{h.pattern}" for h in r.hints}
            exp = rm.expected(m, train)
            found = ",".join(sorted(p.split(":")[1] for p in got & exp)) or "-"
            missed = ",".join(sorted(p.split(":")[1] for p in exp - got)) or "-"
            false = ",".join(sorted(p.split(":")[1] for p in got - exp)) or "-"
            print(f"{name:<10} {'train' if train else 'forward':<8} {found:<62} {missed:<10} {false:<10}")
            results.append((name, train, r, t))
    return results


def section_own_profiler(models: list[str]) -> None:
    print("\n== 1b. idioms per model, a user's own torch.profiler.profile(record_shapes=True), from_profiler ==")
    print(f"{'model':<10} {'step':<8} {'found':<62} {'missed':<10} {'false':<10}")
    for name in models:
        m = rm.MODELS[name]
        for train in (False, True):
            step = rm.step_fn(m, train)
            step()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                step()
            got = {f"{h.kind}:{h.pattern}" for h in from_profiler(prof).hints if h.kind in ("fusion", "optimizer")}
            exp = rm.expected(m, train)
            found = ",".join(sorted(p.split(":")[1] for p in got & exp)) or "-"
            missed = ",".join(sorted(p.split(":")[1] for p in exp - got)) or "-"
            false = ",".join(sorted(p.split(":")[1] for p in got - exp)) or "-"
            print(f"{name:<10} {'train' if train else 'forward':<8} {found:<62} {missed:<10} {false:<10}")


def section_verify(results: list[Any]) -> None:
    print("\n== 2. estimated saving vs hint.verify() (CPU, this process's thread count) ==")
    print("(trace us: the same capture's estimate read back from its exported trace file)")
    print(f"{'model':<10} {'step':<8} {'pattern':<12} {'calls':>5} {'est us':>9} {'trace us':>9} {'verified us':>12} {'ratio':>7}  note")
    within = total = wrong_sign = 0
    for name, train, r, t in results:
        from_file = {(h.pattern, tuple(h.ops)): h.est_saving_us for h in t.hints if h.kind == "fusion"}
        for h in r.hints:
            if h.kind != "fusion":
                continue
            traced = from_file.get((h.pattern, tuple(h.ops)))
            ttext = "-" if traced is None else f"{traced:.1f}"
            try:
                v = measure(h)
            except NeuronscopeError as err:
                print(f"{name:<10} {'train' if train else 'forward':<8} {h.pattern:<12} {h.calls:>5} {h.est_saving_us:>9.1f} {ttext:>9} {'-':>12} {'-':>7}  {str(err)[:70]}")
                continue
            ratio = v.estimate_ratio
            note = ""
            if ratio is not None:  # a measured gain: the estimate is judged against it
                total += 1
                within += 0.5 <= ratio <= 2.0
            if v.slower and v.est_saving_us > 0:
                wrong_sign += 1
                note = "verify measured a loss, the estimate was positive"
            elif v.verified_saving_us <= 0:
                note = f"verify measured a loss; estimate {v.est_saving_us:.1f}"
            rtext = f"{ratio:.2f}" if ratio is not None else "n/a"
            print(f"{name:<10} {'train' if train else 'forward':<8} {h.pattern:<12} {h.calls:>5} {v.est_saving_us:>9.1f} {ttext:>9} {v.verified_saving_us:>12.1f} {rtext:>7}  {note}")
    print(f"within 2x: {within} of the {total} hints verify measured a gain for; positive estimate where verify measured a loss: {wrong_sign}")


def _wall(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    """Median and interquartile range."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return q[1], q[0], q[2]


def section_overhead(models: list[str], rounds: int) -> list[float]:
    """Per model step, ``rounds`` interleaved rounds. Each round profiles the step twice with
    ``record_shapes=True`` and analyses one capture by op order and the other with links
    from a fresh observation (its graph built, as a decorated call's first capture builds it),
    in alternating order; the round's ratio is (capture + relinked analysis) over (capture +
    op-order analysis), the capture's own time the same on both sides (it runs with the user's
    options either way). Reported: the median of the rounds' ratios and their interquartile
    range."""
    print(f"\n== 3. cost of exact data flow, ms, medians of {rounds} interleaved rounds; capture +%: median [IQR] of per-round ratios ==")
    print(
        f"{'model':<10} {'step':<8} {'plain':>8} {'rec_shapes':>10} {'+analysis':>10} {'+relinked':>10} "
        f"{'capture +% [IQR]':>20} {'observed':>9} {'prof_mem':>9} {'prof_mem +%':>11}"
    )
    medians = []
    for name in models:
        m = rm.MODELS[name]
        for train in (False, True):
            step = rm.step_fn(m, train)
            step()
            samples: dict[str, list[float]] = {k: [] for k in ("plain", "rs", "an", "relinked", "obs", "pm", "ratio", "pm_ratio")}
            for r in range(rounds):
                samples["plain"].append(_wall(step))
                with observe_dataflow() as obs:
                    t0 = time.perf_counter()
                    step()
                samples["obs"].append((time.perf_counter() - t0) * 1e3)

                def rs(step: Any = step) -> Any:
                    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                        step()
                    return prof

                t0 = time.perf_counter()
                prof_a = rs()
                rs_ms = (time.perf_counter() - t0) * 1e3
                prof_b = rs()

                def analyse(prof: Any, extra: dict[str, Any] | None) -> float:
                    gc.collect()  # each analysis starts from the same collector state (its own garbage still counts)
                    t0 = time.perf_counter()
                    build_result(table_from_profiler(prof, record_shapes=True), name="x", backend="cpu", profiler=prof, extra=extra)
                    return (time.perf_counter() - t0) * 1e3

                if r % 2:
                    relinked = analyse(prof_b, {"observed": obs})
                    ordered = analyse(prof_a, None)
                else:
                    ordered = analyse(prof_a, None)
                    relinked = analyse(prof_b, {"observed": obs})
                samples["rs"].append(rs_ms)
                samples["an"].append(rs_ms + ordered)
                samples["relinked"].append(rs_ms + relinked)
                samples["ratio"].append((rs_ms + relinked) / (rs_ms + ordered))

                def pm(step: Any = step) -> None:
                    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True):
                        step()

                pm_ms = _wall(pm)
                samples["pm"].append(pm_ms)
                samples["pm_ratio"].append(pm_ms / rs_ms)
            med = {k: statistics.median(v) for k, v in samples.items()}
            cap, lo, hi = (100 * (x - 1) for x in _quartiles(samples["ratio"]))
            medians.append(cap)
            pmo = 100 * (med["pm_ratio"] - 1)
            interval = f"{cap:+.1f}% [{lo:+.0f},{hi:+.0f}]"
            print(
                f"{name:<10} {'train' if train else 'forward':<8} {med['plain']:>8.1f} {med['rs']:>10.1f} {med['an']:>10.1f} "
                f"{med['relinked']:>10.1f} {interval:>20} {med['obs']:>9.1f} {med['pm']:>9.1f} {pmo:>10.1f}%"
            )
    print(
        "plain: the step alone; rec_shapes: under torch.profiler(record_shapes=True); +analysis: and the\n"
        "result with its hints (by op order); +relinked: the same with links from a fresh observation\n"
        "(capture +%: per round, +relinked over +analysis, median and interquartile range: what exact data\n"
        "flow adds to a decorated capture); observed: the warm-up call under the observation pass; prof_mem:\n"
        "a capture with profile_memory=True (regions that run once), prof_mem +%: median per-round ratio to rec_shapes."
    )
    print(f"median capture +% over the {len(medians)} rows: {statistics.median(medians):+.1f}%; largest: {max(medians):+.1f}%")
    return medians


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(rm.MODELS))
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--no-idioms", action="store_true", help="section 3 only")
    parser.add_argument("--no-overhead", action="store_true", help="sections 1 and 2 only")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("neuronscope").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    models = [m for m in args.models.split(",") if m]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)\n")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    out = Path(tempfile.mkdtemp(prefix="bench_real_models_"))
    try:
        if not args.no_idioms:
            results = section_idioms(models, out)
            section_own_profiler(models)
            if not args.no_verify:
                section_verify(results)
        if not args.no_overhead:
            section_overhead(models, args.rounds)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
