"""What the trainer integrations cost on the steps they do not capture.

Two sections:

1. The hooks alone, per uncaptured step: the Trainer's callback events of one optimizer step
   (``on_step_begin``, ``on_pre_optimizer_step``, ``on_optimizer_step``, ``on_step_end``)
   dispatched to ``ProfileCallback`` against a do-nothing ``TrainerCallback`` and no callback;
   and the start/stop pairs Lightning sends its profiler during one training batch, to
   ``NeuronscopeProfiler`` against Lightning's own ``PassThroughProfiler`` (what
   ``profiler=None`` uses). Medians over many repeats; target: within a microsecond or two of
   the do-nothing baseline, per step.
2. End to end: step times of a real ``Trainer`` (a two-layer Llama from config, random tokens)
   and a real Lightning fit, with and without the integration, runs interleaved (A, B, A, B...)
   so that the machine's load falls on both alike; each run's median step time, then the median
   and the spread over runs. The integration captures nothing in these runs (its steps are
   later than the run), or captured a step early on and runs past it (``after``). Target: no
   difference beyond the run-to-run spread.

    python benchmarks/bench_integrations.py [--quick] [--runs R] [--section 1,2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tiny_trainer

import torch
from _common import environment, fmt_s
from tiny_trainer import Tokens, cpu_args, tiny_llama

logging.getLogger("neuronscope").addHandler(logging.NullHandler())  # no line per capture
logging.getLogger("neuronscope").propagate = False
for noisy in ("lightning", "lightning.pytorch", "transformers"):
    logging.getLogger(noisy).setLevel(logging.ERROR)

import lightning.pytorch as pl
import transformers
from lightning.pytorch.profilers import PassThroughProfiler
from torch import nn
from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState

from neuronscope.integrations.lightning import NeuronscopeProfiler
from neuronscope.integrations.transformers import ProfileCallback

transformers.logging.set_verbosity_error()  # the bare CallbackHandler of section 1 is warned about

NEVER = 10**9  # a step number no run reaches

#: The start/stop pairs Lightning 2.6 sends its profiler in one training batch (automatic
#: optimisation, one optimizer), innermost nesting as Lightning opens them.
LIGHTNING_BATCH_ACTIONS = [
    "[_TrainingEpochLoop].train_dataloader_next",
    "[LightningModule]M.on_before_batch_transfer",
    "[LightningModule]M.transfer_batch_to_device",
    "[LightningModule]M.on_after_batch_transfer",
    "[Strategy]SingleDeviceStrategy.batch_to_device",
    "[LightningModule]M.on_train_batch_start",
    "[Strategy]SingleDeviceStrategy.on_train_batch_start",
    "[Strategy]SingleDeviceStrategy.training_step",
    "[LightningModule]M.on_before_zero_grad",
    "[LightningModule]M.optimizer_zero_grad",
    "[LightningModule]M.on_before_backward",
    "[LightningModule]M.on_after_backward",
    "[Strategy]SingleDeviceStrategy.backward",
    "[LightningModule]M.on_before_optimizer_step",
    "[LightningModule]M.configure_gradient_clipping",
    "[LightningModule]M.optimizer_step",
    "run_training_batch",
    "[LightningModule]M.on_train_batch_end",
]


def _medians_per_call(variants: dict[str, Callable[[], None]], calls: int, runs: int) -> dict[str, float]:
    """Per variant, the median over ``runs`` of the mean seconds per call of ``calls`` calls; the
    variants take turns in each run, so that the machine's load falls on all of them alike."""
    per_run: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(runs):
        for label, fn in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            per_run[label].append((time.perf_counter() - start) / calls)
    return {label: statistics.median(values) for label, values in per_run.items()}


# ---- 1. the hooks alone -------------------------------------------------------------------------
def section_hooks(runs: int, calls: int) -> None:
    print(f"\n== 1. the hooks of one uncaptured step, median of {runs} runs x {calls} steps ==")
    model = nn.Linear(4, 4)
    args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()

    def hf_step(handler: CallbackHandler) -> Callable[[], None]:
        def step() -> None:
            handler.on_step_begin(args, state, control)
            handler.on_pre_optimizer_step(args, state, control)
            handler.on_optimizer_step(args, state, control)
            handler.on_step_end(args, state, control)

        return step

    variants: dict[str, list[Any]] = {
        "no callback": [],
        "TrainerCallback()": [transformers.TrainerCallback()],
        "ProfileCallback(steps=[NEVER])": [ProfileCallback(steps=[NEVER])],
    }
    times = _medians_per_call(
        {label: hf_step(CallbackHandler(cbs, model, None, None, None)) for label, cbs in variants.items()}, calls, runs
    )
    base = times["TrainerCallback()"]
    print("Hugging Face Trainer, the 4 events of one optimizer step:")
    for label, t in times.items():
        print(f"  {label:<34} {fmt_s(t):>10} per step  ({(t - base) * 1e6:+.2f} us vs a do-nothing callback)")

    def lightning_batch(profiler: Any) -> Callable[[], None]:
        def batch() -> None:
            for action in LIGHTNING_BATCH_ACTIONS:
                with profiler.profile(action):
                    pass

        return batch

    after = NeuronscopeProfiler(schedule=torch.profiler.schedule(wait=0, warmup=1, active=1), export=False)
    after._saved = True  # as after its capture: the schedule said RECORD_AND_SAVE
    profilers = {
        "PassThroughProfiler (profiler=None)": PassThroughProfiler(),
        "NeuronscopeProfiler, waiting": NeuronscopeProfiler(schedule=torch.profiler.schedule(wait=NEVER, warmup=1, active=1)),
        "NeuronscopeProfiler, after its capture": after,
    }
    times = _medians_per_call({label: lightning_batch(p) for label, p in profilers.items()}, calls, runs)
    base = times["PassThroughProfiler (profiler=None)"]
    print(f"Lightning, the {len(LIGHTNING_BATCH_ACTIONS)} profiler actions of one training batch:")
    for label, t in times.items():
        print(f"  {label:<40} {fmt_s(t):>10} per batch  ({(t - base) * 1e6:+.2f} us vs profiler=None)")


# ---- 2. end to end -------------------------------------------------------------------------------
class _StepClock(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())


def _hf_run(steps: int, callback: ProfileCallback | None) -> float:
    """Median seconds per optimizer step of one Trainer run, its first 3 steps left out."""
    clock = _StepClock()
    with tempfile.TemporaryDirectory() as out:
        callbacks: list[Any] = [clock] if callback is None else [callback, clock]
        trainer = transformers.Trainer(model=tiny_llama(), args=cpu_args(out, steps), train_dataset=Tokens(100_000), callbacks=callbacks)
        trainer.train()
    gaps = [b - a for a, b in zip(clock.ends[3:], clock.ends[4:])]
    return statistics.median(gaps)


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.Linear(64, 4))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _BatchClock(pl.Callback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())


def _lightning_run(steps: int, profiler: Any) -> float:
    """Median seconds per training batch of one fit, its first 5 batches left out."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 32), torch.randint(0, 4, (steps * 8,)))
    clock = _BatchClock()
    with tempfile.TemporaryDirectory() as out:
        trainer = pl.Trainer(
            max_steps=steps,
            profiler=profiler,
            callbacks=[clock],
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=out,
        )
        trainer.fit(_Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
    gaps = [b - a for a, b in zip(clock.ends[5:], clock.ends[6:])]
    return statistics.median(gaps)


def _interleaved(variants: dict[str, Callable[[], float]], runs: int) -> dict[str, list[float]]:
    per_run: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(runs):
        for label, run in variants.items():
            per_run[label].append(run())
    return per_run


def _print_interleaved(per_run: dict[str, list[float]], unit: str) -> None:
    base_label = next(iter(per_run))
    base = statistics.median(per_run[base_label])
    for label, values in per_run.items():
        med = statistics.median(values)
        spread = (max(values) - min(values)) / 2
        print(
            f"  {label:<40} {fmt_s(med):>10} per {unit} (+/- {fmt_s(spread)} over runs)  "
            f"{(med / base - 1) * 100:+.1f}% vs {base_label}"
        )


def section_end_to_end(runs: int, steps: int) -> None:
    print(f"\n== 2. end to end, {runs} interleaved runs of {steps} steps each ==")
    with tempfile.TemporaryDirectory() as root:
        hf = _interleaved(
            {
                "Trainer, no callback": lambda: _hf_run(steps, None),
                "Trainer + ProfileCallback (never due)": lambda: _hf_run(steps, ProfileCallback(steps=[NEVER])),
                "Trainer + ProfileCallback (after step 2)": lambda: _hf_run(steps, ProfileCallback(steps=[2], output_dir=root)),
            },
            runs,
        )
        print("Hugging Face Trainer, two-layer Llama (hidden 32), batch 4 x 16 tokens, CPU, median step time:")
        _print_interleaved(hf, "step")
        pl_runs = _interleaved(
            {
                "Lightning, profiler=None": lambda: _lightning_run(steps, None),
                "NeuronscopeProfiler (never due)": lambda: _lightning_run(
                    steps, NeuronscopeProfiler(schedule=torch.profiler.schedule(wait=NEVER, warmup=1, active=1))
                ),
                "NeuronscopeProfiler (after batch 2)": lambda: _lightning_run(
                    steps, NeuronscopeProfiler(dirpath=root, filename="summary")
                ),
            },
            runs,
        )
        print("Lightning, a two-linear module, batch 8, CPU, median batch time:")
        _print_interleaved(pl_runs, "batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--section", default="1,2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sections = {s.strip() for s in args.section.split(",")}
    print(environment())
    if "1" in sections:
        section_hooks(runs=args.runs or (5 if args.quick else 21), calls=2_000 if args.quick else 20_000)
    if "2" in sections:
        section_end_to_end(runs=args.runs or (2 if args.quick else 5), steps=12 if args.quick else 40)


if __name__ == "__main__":
    main()
