"""Hints on real model code: idioms found / missed / false, estimates against hint.verify(),
and what exact data flow costs a capture.

Models: tests/real_models.py (transformers Llama, GPT-2, BERT, T5, Gemma, Phi, GPT-NeoX from
config with random weights, a nanoGPT, a timm-style ViT block, a ResNet-style block), each
as an inference forward and an AdamW training step, captured as a decorated function with
the default options (one warm-up call, observed; one captured call).

1. Per model and step: the expected idioms, those found, missed and false.
2. Per verifiable hint (rms_norm, layer_norm, softmax, gelu, silu_mul): the estimated saving,
   what ``hint.verify()`` measured, and their ratio (target: within 2x for 9 of 10, and never
   a positive estimate where verify measured a loss beyond noise).
3. The cost of exact data flow, per model step, medians of interleaved rounds:
   - the captured call: a decorated call's capture runs with the user's options, so it costs
     what ``record_shapes=True`` alone costs; the analysis then relinks from the observation;
   - the observed warm-up call against a plain call (paid once, on a call that runs anyway);
   - a capture with nothing observed (``profile_memory=True``) against ``record_shapes=True``.

    python3 benchmarks/bench_real_models.py [--models llama,gpt2] [--rounds 5] [--no-verify]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import real_models as rm
import torch
from torch.profiler import ProfilerActivity, profile

from neuronscope import profile_on_neuron
from neuronscope.capture.observe import observe_dataflow
from neuronscope.errors import NeuronscopeError
from neuronscope.events import table_from_profiler
from neuronscope.pipeline import build_result


def capture_hints(model: rm.Model, train: bool) -> Any:
    f = profile_on_neuron(rm.step_fn(model, train), export=False, backend="cpu", print_summary=False, warmup=1, active=1)
    f()
    f()
    return f.last_result


def section_idioms(models: list[str]) -> list[Any]:
    print("== 1. idioms per model (default options: decorated, one observed warm-up call) ==")
    print(f"{'model':<10} {'step':<8} {'found':<62} {'missed':<10} {'false':<10}")
    results = []
    for name in models:
        m = rm.MODELS[name]
        for train in (False, True):
            r = capture_hints(m, train)
            got = {f"{h.kind}:{h.pattern}" for h in r.hints}
            exp = rm.expected(m, train)
            found = ",".join(sorted(p.split(":")[1] for p in got & exp)) or "-"
            missed = ",".join(sorted(p.split(":")[1] for p in exp - got)) or "-"
            false = ",".join(sorted(p.split(":")[1] for p in got - exp)) or "-"
            print(f"{name:<10} {'train' if train else 'forward':<8} {found:<62} {missed:<10} {false:<10}")
            results.append((name, train, r))
    return results


def section_verify(results: list[Any]) -> None:
    print("\n== 2. estimated saving vs hint.verify() (CPU, this process's thread count) ==")
    print(f"{'model':<10} {'step':<8} {'pattern':<12} {'calls':>5} {'est us':>9} {'verified us':>12} {'ratio':>7}  note")
    within = total = wrong_sign = 0
    for name, train, r in results:
        for h in r.hints:
            if h.kind != "fusion":
                continue
            try:
                v = h.verify()
            except NeuronscopeError as err:
                print(f"{name:<10} {'train' if train else 'forward':<8} {h.pattern:<12} {h.calls:>5} {h.est_saving_us:>9.1f} {'-':>12} {'-':>7}  {str(err)[:70]}")
                continue
            ratio = v.estimate_ratio
            note = ""
            total += 1
            if ratio is not None and 0.5 <= ratio <= 2.0:
                within += 1
            if v.verified_saving_us < 0 and h.est_saving_us > 0:
                wrong_sign += 1
                note = "verify measured a loss"
            rtext = f"{ratio:.2f}" if ratio is not None else "n/a"
            print(f"{name:<10} {'train' if train else 'forward':<8} {h.pattern:<12} {h.calls:>5} {h.est_saving_us:>9.1f} {v.verified_saving_us:>12.1f} {rtext:>7}  {note}")
    print(f"within 2x: {within} of {total}; positive estimate where verify measured a loss: {wrong_sign}")


def _wall(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def section_overhead(models: list[str], rounds: int) -> None:
    print(f"\n== 3. cost of exact data flow, ms, median of {rounds} interleaved rounds ==")
    print(
        f"{'model':<10} {'step':<8} {'plain':>8} {'rec_shapes':>10} {'+analysis':>10} {'+relinked':>10} "
        f"{'capture +%':>10} {'observed':>9} {'prof_mem':>9} {'prof_mem +%':>11}"
    )
    for name in models:
        m = rm.MODELS[name]
        for train in (False, True):
            step = rm.step_fn(m, train)
            step()
            samples: dict[str, list[float]] = {k: [] for k in ("plain", "rs", "rs_an", "rs_obs", "obs", "pm")}
            obs = None
            for _ in range(rounds):
                samples["plain"].append(_wall(step))
                with observe_dataflow() as o:
                    t0 = time.perf_counter()
                    step()
                samples["obs"].append((time.perf_counter() - t0) * 1e3)
                obs = o

                def rs(step: Any = step) -> Any:
                    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                        step()
                    return prof

                t0 = time.perf_counter()
                prof = rs()
                t1 = time.perf_counter()
                table = table_from_profiler(prof, record_shapes=True)
                build_result(table, name="x", backend="cpu", profiler=prof)
                t2 = time.perf_counter()
                table = table_from_profiler(prof, record_shapes=True)
                build_result(table, name="x", backend="cpu", profiler=prof, extra={"observed": obs})
                t3 = time.perf_counter()
                samples["rs"].append((t1 - t0) * 1e3)
                samples["rs_an"].append((t2 - t0) * 1e3)
                samples["rs_obs"].append((t1 - t0 + t3 - t2) * 1e3)

                def pm(step: Any = step) -> None:
                    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True):
                        step()

                samples["pm"].append(_wall(pm))
            med = {k: statistics.median(v) for k, v in samples.items()}
            cap = (med["rs_obs"] / med["rs_an"] - 1) * 100
            pmo = (med["pm"] / med["rs"] - 1) * 100
            print(
                f"{name:<10} {'train' if train else 'forward':<8} {med['plain']:>8.1f} {med['rs']:>10.1f} {med['rs_an']:>10.1f} "
                f"{med['rs_obs']:>10.1f} {cap:>9.1f}% {med['obs']:>9.1f} {med['pm']:>9.1f} {pmo:>10.1f}%"
            )
    print(
        "plain: the step alone; rec_shapes: under torch.profiler(record_shapes=True); +analysis: and the\n"
        "result with its hints (pointer links); +relinked: the same with links from the observation\n"
        "(capture +% compares the two: what exact data flow adds to a decorated capture); observed: the\n"
        "warm-up call under the observation pass; prof_mem: a capture with profile_memory=True (regions\n"
        "that run once), prof_mem +% against rec_shapes."
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(rm.MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("neuronscope").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    models = [m for m in args.models.split(",") if m]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)\n")
    results = section_idioms(models)
    if not args.no_verify:
        section_verify(results)
    section_overhead(models, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
