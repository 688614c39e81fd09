"""The optimizer rule: an optimizer that updates parameters one at a time.

torch.optim's default on CPU (``foreach=False``) runs a chain of elementwise ops per parameter
per step; its ``fused=True`` form updates them all in one kernel. torch.optim records each step
as a range named ``Optimizer.step#<class>.step``: the ops inside it (after any closure's
forward and backward) are the update.
"""

from __future__ import annotations

import bisect
import collections

from neuronscope.analysis import calibration
from neuronscope.analysis.calibration import FUSED_OPTIMIZERS
from neuronscope.analysis.cost import (
    MIN_SAVING_NS,
    estimate_saving_ns,
    full_size,
    fused_optimizer_saving_ns,
    model_text,
)
from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns.base import MATMULS, Match, match_lines
from neuronscope.analysis.patterns.elementwise_chain import ELEMENTWISE_CHAIN, elementwise_chains
from neuronscope.events import KIND_ANNOTATION, EventTable
from neuronscope.result.hint import Hint

__all__ = ["OPTIMIZER_STEP_PREFIX", "has_optimizer_steps", "optimizer_hints", "optimizer_steps"]

#: torch.optim records each step as a range named ``Optimizer.step#<class>.step``.
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
#: Fewest per-parameter update chains in one optimizer's steps that make an ``optimizer`` hint.
MIN_OPTIMIZER_CHAINS = 2
_MODEL_OPS = MATMULS | {"linear", "addmm", "conv1d", "conv2d", "conv3d", "convolution", "embedding"}


def has_optimizer_steps(table: EventTable) -> bool:
    """Whether ``table`` holds a torch.optim step range: the common case (none) is settled by
    one C-level pass and a look at each distinct name."""
    return any(name.startswith(OPTIMIZER_STEP_PREFIX) for name in dict.fromkeys(table.names))


def optimizer_steps(g: OpGraph, table: EventTable) -> dict[str, list[list[int]]]:
    """The update ops of each optimizer step (in the ``Optimizer.step#AdamW.step`` ranges
    torch.optim records), a list per step, by optimizer class name."""
    if not has_optimizer_steps(table):
        return {}
    ranges: dict[str, list[tuple[int, int, int]]] = {}
    for i, name in enumerate(table.names):
        if name.startswith(OPTIMIZER_STEP_PREFIX) and table.kinds[i] == KIND_ANNOTATION:
            cls = name[len(OPTIMIZER_STEP_PREFIX) :].split(".", 1)[0]
            ranges.setdefault(cls, []).append((table.tids[i], table.starts[i], table.ends[i]))
    starts = [n.start_ns for n in g.nodes]  # the graph is in start order
    steps: dict[str, list[list[int]]] = {}
    for cls, spans in ranges.items():
        for tid, start, end in spans:
            lo, hi = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)
            inside = [n for n in g.nodes[lo:hi] if n.tid == tid]
            # A step that runs the model first (``opt.step(closure)``) holds the user's forward
            # and backward too: its update is what runs after the last of their ops.
            model_end = max((n.end_ns for n in inside if _runs_the_model(n)), default=None)
            update = [n.index for n in inside if model_end is None or n.start_ns >= model_end]
            if update:
                steps.setdefault(cls, []).append(update)
    return steps


def _runs_the_model(n: OpNode) -> bool:
    """An op no optimizer update runs: a matmul, a convolution, an embedding, a backward op."""
    return n.op in _MODEL_OPS or n.name.startswith("autograd::")


def _update_chains(g: OpGraph, update: list[int]) -> list[Match]:
    """The per-parameter chains of one step's update: linked elementwise ops where the graph
    has links; in a trace (op order only), the period of the update's elementwise op names,
    one repetition per parameter (torch.optim runs the same ops for each)."""
    if g.linking != "none":
        # Chains of 0-dim tensors only (the step counters) are bookkeeping, not the update.
        return [m for m in elementwise_chains(g, set(), update) if any(t.sizes for n in m.nodes for t in n.inputs)]
    ops = [g.nodes[i] for i in update if g.nodes[i].elementwise]
    names = [n.name for n in ops]
    for p in range(2, len(names) // MIN_OPTIMIZER_CHAINS + 1):
        if len(names) % p == 0 and all(names[i] == names[i % p] for i in range(p, len(names))):
            return [Match(ELEMENTWISE_CHAIN.name, ops[i : i + p]) for i in range(0, len(ops), p)]
    return []


def _parameter_shapes(chains: list[Match]) -> tuple[tuple[int, ...], ...]:
    """The parameters one step updates: the largest tensor of each of its per-parameter chains."""
    shapes = []
    for m in chains:
        largest = max((t for n in m.nodes for t in n.inputs), key=lambda t: t.numel, default=None)
        if largest is not None and largest.sizes:
            shapes.append(tuple(largest.sizes))
    return tuple(shapes)


def _dtype(chains: list[Match]) -> str:
    return next((t.dtype for m in chains for n in m.nodes for t in n.inputs if t.dtype), "float32")


def optimizer_hints(g: OpGraph, steps: dict[str, list[list[int]]], backend: str, confidence: str) -> list[Hint]:
    """One hint per optimizer whose step updates the parameters one at a time, each with a
    chain of elementwise ops (torch.optim's default on CPU, ``foreach=False``): its fused
    form updates them all in one kernel per step. What fusing each parameter's chain would
    save is estimated as for an ``elementwise_chain``. A ``foreach`` or ``fused`` optimizer
    makes no such chains and gets no hint. The estimate is the model on the capture's op times
    (the fused update replaces the chains' work, not just their intermediates), at most what
    the fused optimizer saves per step on parameters of the update's shapes by this machine's
    kept rates (:func:`~.cost.fused_optimizer_saving_ns`, ``details["fused_step_saving_us"]``),
    where this process runs the capture's device."""
    hints: list[Hint] = []
    for cls, updates in steps.items():
        # Step by step: the in-place state links one step's update to the next one's.
        by_step = [_update_chains(g, update) for update in updates]
        chains = [m for step in by_step for m in step]
        if len(chains) < MIN_OPTIMIZER_CHAINS:
            continue
        time_ns = saving_ns = 0.0
        for m in chains:
            times = [float(g.time_ns(n)) for n in m.nodes]
            time_ns += sum(times)
            saving_ns += min(sum(times), estimate_saving_ns(ELEMENTWISE_CHAIN.name, times, full_size(m.nodes), backend))
        # Bounded by what the fused optimizer saves on parameters of the update's shapes, by
        # the kept rates: the profiled op times carry the profiler's per-op overhead, which neither
        # form pays (Mixtral's AdamW, CPU: 3.6 ms estimated from them, 2.0 ms measured).
        # None for a class without a fused form: none is kept for it.
        timed = fused_optimizer_saving_ns(cls, _parameter_shapes(by_step[0]), _dtype(chains), backend)
        if timed is not None:
            saving_ns = min(saving_ns, max(timed, 0.0) * len(updates))
        if saving_ns < MIN_SAVING_NS:
            continue
        # The most common op sequence stands for them all, the shorter on a tie.
        spellings = collections.Counter(m.names for m in chains)
        most = max(spellings, key=lambda names: (spellings[names], -len(names)))
        typical = next(m for m in chains if m.names == most)
        # foreach=True batches the launches: it helps on a GPU, not on CPU.
        foreach = " (or foreach=True)" if backend == "cuda" else ""
        if cls in FUSED_OPTIMIZERS:
            suggestion = (
                f"torch.optim.{cls}(..., fused=True){foreach}: one fused update per parameter "
                f"instead of {len(chains)} chains of elementwise ops"
            )
        elif backend == "cuda":
            suggestion = f"torch.optim.{cls}(..., foreach=True), or torch.compile of the optimizer step"
        else:
            suggestion = f"torch.compile of the optimizer step ({cls} has no fused=True)"
        hints.append(
            Hint(
                kind="optimizer",
                pattern="per_parameter_update",
                ops=list(typical.names),
                calls=len(chains),
                time_us=time_ns / 1e3,
                est_saving_us=saving_ns / 1e3,
                suggestion=suggestion,
                location=match_lines(typical)[0],
                confidence=confidence,
                details={
                    "optimizer": cls,
                    "update_chains": len(chains),
                    "ops": sum(len(m.nodes) for m in chains),
                    "device": backend,
                    "backend": backend,
                    "time_source": "device" if g.has_device else "cpu",
                    **({"fused_step_saving_us": timed / 1e3} if timed is not None else {}),
                    "estimate_model": model_text(ELEMENTWISE_CHAIN.name, backend, bound="none") + (
                        f"; at most what torch.optim.{cls}(fused=True) saves per step against its default form on "
                        f"parameters of these shapes, from the per-parameter and per-element savings {_rates_source(backend)}"
                        if timed is not None
                        else ""
                    ),
                },
            )
        )
    return hints


def _rates_source(backend: str) -> str:
    """Where the fused optimizer's rates come from, in words: this machine's calibration, or
    the shipped defaults' machine."""
    if calibration.load(backend) is not None:
        return "measured on this machine (neuronscope calibrate)"
    return f"measured on {calibration.DEFAULT_CPU_MACHINE} (run `neuronscope calibrate` once to measure this machine's)"
