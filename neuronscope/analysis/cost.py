"""What fusing an idiom saves: the cost model behind ``Hint.est_saving_us``.

Two bounds, the smaller taken (see :func:`grounded_saving_ns`):

- from the capture's own op times: the ops of these idioms are memory-bound passes over one
  tensor, and the fused form makes as few passes as the idiom needs (:func:`estimate_saving_ns`);
- from what fusion removes: the launches of the ops beyond the fused kernel's passes, and the
  intermediates written and read again, costed with this machine's per-op cost and bandwidth
  (at each intermediate's size: a cache is faster than memory), for the better of the fused
  forms ``hint.verify()`` times (:func:`fused_forms_ns`): torch.compile's kernel less its entry
  cost, or the eager replacement at the share of the launches and the cost per intermediate
  byte it was measured to remove.

No op is timed here: the constants are this machine's, measured once and kept
(:mod:`.calibration`, ``neuronscope calibrate``); on a CPU never calibrated, the shipped
:data:`~.calibration.DEFAULT_CPU`, measured on a stated machine (an estimate of the right size,
where the first bound alone promised 10-25x what ``hint.verify()`` measured). On a device this
process does not run (CUDA, Neuron), the first bound stands alone. The capture's op
times carry the profiler's own per-op overhead, which ``hint.verify()`` (and the user's
program) does not pay: the second bound keeps an estimate from promising it.
"""

from __future__ import annotations

import itertools
import math
import statistics

from neuronscope.analysis import calibration
from neuronscope.analysis.calibration import Calibration
from neuronscope.analysis.intermediates import nbytes
from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns import pattern_named
from neuronscope.analysis.patterns.base import ROOTS

__all__ = [
    "MIN_SAVING_NS",
    "compiled_call_ns",
    "device_costs",
    "eager_costs",
    "estimate_saving_ns",
    "full_size",
    "fused_forms_ns",
    "fused_optimizer_saving_ns",
    "fused_passes",
    "grounded_saving_ns",
    "measured_here",
    "model_text",
]

#: Least estimated saving (ns, summed over calls) worth an ``elementwise_chain`` hint: below
#: a microsecond the suggestion costs the reader more than it saves. Named idioms are always
#: reported (their time is worth knowing even when the saving is small).
MIN_SAVING_NS = 1_000


def fused_passes(pattern: str) -> int:
    """Passes over its input the fused form of ``pattern`` makes."""
    p = pattern_named(pattern)
    return p.fused_passes if p is not None else 1


def estimate_saving_ns(pattern: str, times: list[float], full: list[bool], backend: str = "cpu", after: int = 0) -> float:
    """Estimated saving of fusing one occurrence, in ns, from its measured op times.

    ``full[i]`` says whether op ``i`` works on the whole tensor (not a per-row statistic or
    a scalar). The model: the ops of these idioms are memory-bound passes over one tensor, so
    one pass costs about what one full-size op of the chain costs (the median of them, so
    that an op slowed by the machine does not count), and the fused form makes as few passes
    as the idiom needs::

        saving = sum(op times) - passes * (median full-size op time)

    with ``passes`` one for an elementwise idiom (read, write), two for a norm or a softmax
    (read for the statistic, read again to normalise and write), and one more for each of the
    ``after`` ops the suggestion runs after the fused call (a per-head weight it cannot take).
    """
    if len(times) < 2:
        return 0.0
    passes = fused_passes(pattern) + after
    pass_ns = statistics.median([t for t, f in zip(times, full) if f] or times)
    return max(0.0, sum(times) - passes * pass_ns)


def measured_here(device: str) -> bool:
    """Whether this machine's kept constants can cost ``device``: its CPU only."""
    return device == "cpu"


def device_costs(device: str = "cpu", dtype: str = "float32") -> Calibration | None:
    """This device's per-op cost and bandwidth as kept by ``neuronscope calibrate`` (a CPU
    never calibrated: the shipped defaults); None where the device is not this machine's CPU."""
    return calibration.constants(device, dtype)


def eager_costs(pattern: str, device: str = "cpu", dtype: str = "float32") -> tuple[float, float] | None:
    """What torch's eager replacement of ``pattern`` removes here, as kept (or by default):
    (the share of the chain's launches' cost, ns per byte of the chain's intermediates); None:
    not known."""
    cal = calibration.constants(device, dtype)
    return None if cal is None else cal.eager.get(pattern)


def compiled_call_ns(device: str = "cpu", dtype: str = "float32") -> float | None:
    """What entering torch.compile'd code costs beyond the eager op it runs, as kept."""
    cal = calibration.constants(device, dtype)
    return None if cal is None else cal.compiled_call_ns


def fused_optimizer_saving_ns(cls: str, shapes: tuple[tuple[int, ...], ...], dtype: str = "float32", device: str = "cpu") -> float | None:
    """What ``torch.optim.<cls>(..., fused=True)`` saves per step against its default form on
    parameters of ``shapes``, in ns, from the kept per-parameter and per-element rates (the
    update is elementwise: its cost about proportional to the elements, plus a call per
    parameter). None: not kept here."""
    cal = calibration.constants(device, dtype)
    rates = None if cal is None else cal.optimizers.get(cls)
    if rates is None or not shapes:
        return None
    return rates[0] * len(shapes) + rates[1] * sum(math.prod(s) for s in shapes)


def grounded_saving_ns(pattern: str, nodes: list[OpNode], g: OpGraph, backend: str, dtype: str = "float32", after: int = 0) -> float | None:
    """What fusing one occurrence saves, on this device's measured costs, with the fused form
    ``hint.verify()`` would find faster (:func:`fused_forms_ns`). None where there is no such
    bound: the device's costs are not measured here, or the ops' shapes were not recorded."""
    forms = fused_forms_ns(pattern, nodes, g, backend, dtype, after)
    return None if forms is None else max(0.0, *forms.values())


def fused_forms_ns(
    pattern: str, nodes: list[OpNode], g: OpGraph, backend: str, dtype: str = "float32", after: int = 0
) -> dict[str, float] | None:
    """The saving of each fused form of one occurrence, in ns, as ``hint.verify()`` weighs them:

    - ``compiled``: torch.compile's single kernel removes the launches of the ops beyond the
      fused form's passes and each intermediate written and read again; where verify can
      rebuild the idiom, each call pays compiled code's own entry cost (guards, the wrapper);
    - ``eager``: torch's eager replacement, where the pattern has one: the share of the same
      launches' cost and the cost per intermediate byte it was measured to remove here, less
      the ``after`` ops the suggestion runs after the eager call (a weight of another shape than
      it takes: ``layer_norm(x, (d,)) * weight``), each a launch and an intermediate of its own.

    None where no constants are kept for the device, or no op's shapes were recorded."""
    if not any(n.inputs for n in nodes):
        return None
    costs = device_costs(backend, dtype)
    if costs is None:
        return None
    tensors = _intermediate_bytes(nodes) if g.linking == "none" else _linked_intermediate_bytes(nodes)
    launches_ns = max(0, len(nodes) - fused_passes(pattern)) * costs.per_op_ns
    # An idiom hint.verify() rebuilds is compiled alone there, and pays compiled code's entry
    # on each call; a chain, a rotary or an attention is compiled with the region the
    # suggestion names, whose entry is paid once for all of it.
    record = pattern_named(pattern)
    entry_ns = (compiled_call_ns(backend, dtype) or 0.0) if record is not None and record.verify is not None else 0.0
    forms = {"compiled": launches_ns + costs.moved_ns(tensors) - entry_ns}
    eager = eager_costs(pattern, backend, dtype)
    if eager is not None:
        # An op on a parameter alone (Gemma's ``1 + weight``) stays in the eager call's
        # arguments: it is not one of the launches the replacement removes.
        removable_ns = max(0, len(nodes) - _parameter_ops(nodes) - fused_passes(pattern) - after) * costs.per_op_ns
        removed = sorted(tensors)[: max(0, len(tensors) - after)]  # an op after the call reads its output, x's size
        forms["eager"] = eager[0] * removable_ns + eager[1] * sum(removed)
    return forms


def _parameter_ops(nodes: list[OpNode]) -> int:
    """How many of a linked occurrence's ops work on a parameter alone: every input made
    outside the occurrence, none of them the tensor the idiom works on (the largest input from
    outside). 0 without links (a trace), where nothing tells them."""
    inside = {n.index for n in nodes}
    outside = [(t.numel, t.key) for n in nodes for t, p in zip(n.inputs, n.producers) if p not in inside]
    if not outside or all(p < 0 for n in nodes for p in n.producers):
        return 0
    x = max(outside)[1]
    return sum(
        1
        for n in nodes
        if n.inputs and all(p not in inside for p in n.producers) and all(t.key != x for t in n.inputs)
    )


def _linked_intermediate_bytes(nodes: list[OpNode]) -> list[int]:
    """The intermediates the ops pass each other through their links, in bytes: one entry
    per read (each written, then read again)."""
    inside = {n.index for n in nodes}
    return [nbytes(t) for n in nodes for t, p in zip(n.inputs, n.producers) if p in inside]


def _intermediate_bytes(nodes: list[OpNode]) -> list[int]:
    """The same for ops in order without links (a trace file): a match is a claim that each
    op takes the one before it, whose output is costed at the smaller of the two ops'
    largest inputs (an output is no larger than what made it, unless broadcast; a
    reduction's is smaller still), an under-estimate rather than a promise."""
    moved = []
    for prev, n in itertools.pairwise(nodes):
        a = max(prev.inputs, key=lambda t: t.numel, default=None)
        b = max(n.inputs, key=lambda t: t.numel, default=None)
        if a is not None and b is not None:
            t = a if a.numel <= b.numel else b
            moved.append(nbytes(t))
    return moved


def full_size(nodes: list[OpNode]) -> list[bool]:
    """Which ops work on the whole tensor: those with an input at least half the size of the
    largest input of the chain (a per-row statistic or a weight is much smaller). Without
    shapes (a capture without record_shapes), by name: a root and the ``+ eps`` before it
    work on the per-row statistic."""
    if not any(n.inputs for n in nodes):
        ops = [n.op for n in nodes]
        nxt = ops[1:] + [""]
        return [not (op in ROOTS or (op == "add" and after in ROOTS)) for op, after in zip(ops, nxt)]
    sizes = [max((t.numel for t in n.inputs), default=0) for n in nodes]
    top = max(sizes, default=0)
    return [s * 2 >= top for s in sizes]


def model_text(pattern: str, backend: str, *, bound: str, from_trace: bool = False, after: int = 0) -> str:
    """The estimate's model in words, for the hint's details. ``bound``: ``"measured"`` (the
    estimate was bounded by this machine's kept constants, or on a CPU never calibrated the
    shipped defaults, :func:`grounded_saving_ns`), ``"no_shapes"`` (it could have been, but the
    ops' shapes were not recorded) or any other (no such bound applies: a CPU always has
    constants, the kept ones or the defaults); ``from_trace``: the capture is a trace file,
    whose machine need not be this one; ``after``: ops the suggestion runs after the fused call."""
    text = f"sum(op times) - {fused_passes(pattern) + after} pass(es) x median full-size op time, per call, from each op's median over the calls"
    if bound == "no_shapes":
        return text + (
            "; an upper bound: not bounded by this device's measured costs, as the ops' shapes were not recorded "
            "(capture with record_shapes=True), and profiled op times carry the profiler's own per-op overhead"
        )
    if bound != "measured" or not measured_here(backend):
        return text
    kept = calibration.load(backend) is not None
    if not kept:
        costs = (
            f"the default per-op cost and bandwidth, measured on {calibration.DEFAULT_CPU_MACHINE}, not on this "
            "machine (run `neuronscope calibrate` once to measure this one's)"
        )
    elif from_trace:
        costs = "the per-op cost and bandwidth measured on this machine's CPU (the trace's own machine may differ) (neuronscope calibrate)"
    else:
        costs = "this device's measured per-op cost and bandwidth (neuronscope calibrate)"
    text += (
        f"; at most the saving of the better fused form at {costs}: "
        "torch.compile (the launches and intermediate bytes fusion removes, less the measured cost of entering compiled code)"
    )
    eager = eager_costs(pattern, backend)
    if eager is not None:
        where = "here" if kept else "there"
        text += (
            f" or the eager replacement (what it was measured to remove {where}: {eager[0]:.2f} of the launches' cost, "
            f"{eager[1]:.3f} ns per intermediate byte)"
        )
    return text
