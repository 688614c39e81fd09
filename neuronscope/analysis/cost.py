"""What fusing an idiom saves: the cost model behind ``Hint.est_saving_us``.

Two bounds, the smaller taken (see :func:`grounded_saving_ns`):

- from the capture's own op times: the ops of these idioms are memory-bound passes over one
  tensor, and the fused form makes as few passes as the idiom needs (:func:`estimate_saving_ns`);
- from what fusion removes: the launches of the ops beyond the fused kernel's passes, and the
  intermediates written and read again, costed with a per-op overhead and a memory bandwidth
  measured once per process on the capture's device (:func:`device_costs`; CPU only: a
  device this process cannot reach is costed from the capture alone).

The capture's op times carry the profiler's own per-op overhead, which ``hint.verify()`` (and
the user's program) does not pay: the second bound keeps an estimate from promising it.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from types import MappingProxyType
from typing import Any

from .dataflow import OpGraph, OpNode
from .patterns import pattern_named
from .patterns.base import ROOTS

__all__ = ["MIN_SAVING_NS", "device_costs", "device_of", "estimate_saving_ns", "full_size", "fused_passes", "grounded_saving_ns", "model_text"]

#: Least estimated saving (ns, summed over calls) worth an ``elementwise_chain`` hint: below
#: a microsecond the suggestion costs the reader more than it saves. Named idioms are always
#: reported (their time is worth knowing even when the saving is small).
MIN_SAVING_NS = 1_000
_ITEMSIZE = MappingProxyType({"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2})


def fused_passes(pattern: str) -> int:
    """Passes over its input the fused form of ``pattern`` makes."""
    p = pattern_named(pattern)
    return p.fused_passes if p is not None else 1


def estimate_saving_ns(pattern: str, times: list[float], full: list[bool], backend: str = "cpu") -> float:
    """Estimated saving of fusing one occurrence, in ns, from its measured op times.

    ``full[i]`` says whether op ``i`` works on the whole tensor (not a per-row statistic or
    a scalar). The model: the ops of these idioms are memory-bound passes over one tensor, so
    one pass costs about what one full-size op of the chain costs (the median of them, so
    that an op slowed by the machine does not count), and the fused form makes as few passes
    as the idiom needs::

        saving = sum(op times) - passes * (median full-size op time)

    with ``passes`` from :data:`FUSED_PASSES`: one for an elementwise idiom (read, write),
    two for a norm or a softmax (read for the statistic, read again to normalise and write).


    Calibrated with ``hint.verify()`` on CPU (AVX-512) at 256x1024 float32, one thread:
    RMSNorm estimated 134 us a call against 113 measured (compiled), LayerNorm within a
    factor of two (tests/test_fusion.py checks both).
    """
    if len(times) < 2:
        return 0.0
    passes = fused_passes(pattern)
    pass_ns = statistics.median([t for t, f in zip(times, full) if f] or times)
    return max(0.0, sum(times) - passes * pass_ns)


@functools.cache
def device_costs(device: str = "cpu") -> tuple[float, float] | None:
    """(ns per op, bytes per ns) on ``device``, measured once per process outside any
    profiler: the median of a tiny op's calls, and an add over 8 MiB (past the caches). None for a device
    other than the CPU (this process measures only where it runs the op itself)."""
    if device != "cpu":
        return None
    import torch

    tiny = torch.ones(8)
    big = torch.ones(2 << 20)
    out = torch.empty_like(big)
    with torch.autograd.profiler.profile(enabled=False):
        samples = []
        for _ in range(3):
            t0 = time.perf_counter_ns()
            for _ in range(100):
                torch.add(tiny, 1.0)
            samples.append((time.perf_counter_ns() - t0) / 100)
        per_op = statistics.median(samples)
        bw = []
        for _ in range(3):
            t0 = time.perf_counter_ns()
            torch.add(big, 1.0, out=out)
            bw.append(time.perf_counter_ns() - t0)
    moved = 2 * big.numel() * 4
    return per_op, moved / max(statistics.median(bw) - per_op, 1.0)


def grounded_saving_ns(pattern: str, nodes: list[OpNode], g: OpGraph, backend: str) -> float | None:
    """What fusing one occurrence removes, on this device's measured costs: the launches of
    the ops beyond the fused form's passes, and each intermediate written and read again.
    None where the device's costs are not measured here."""
    costs = device_costs(device_of(backend))
    if costs is None or not any(n.inputs for n in nodes):
        return None
    per_op, bytes_per_ns = costs
    moved = _intermediate_bytes(nodes) if g.linking == "none" else _linked_intermediate_bytes(nodes)
    launches = max(0, len(nodes) - fused_passes(pattern))
    saving = launches * per_op + moved / bytes_per_ns
    if not eager_api_faster(pattern, device_of(backend)):
        # The fused form is torch.compile's: each call pays compiled code's own entry cost
        # (guards, the wrapper), which can exceed what a small idiom saves.
        saving -= compiled_call_ns(device_of(backend)) or 0.0
    return max(0.0, saving)


def _linked_intermediate_bytes(nodes: list[OpNode]) -> int:
    """Bytes of the intermediates the ops pass each other through their links: each
    written, then read again."""
    inside = {n.index for n in nodes}
    moved = 0
    for n in nodes:
        for t, p in zip(n.inputs, n.producers):
            if p in inside:
                moved += 2 * t.numel * _ITEMSIZE.get(t.dtype, 4)
    return moved


def _intermediate_bytes(nodes: list[OpNode]) -> int:
    """The same for ops in order without links (a trace file): a match is a claim that each
    op takes the one before it, whose output is costed at the smaller of the two ops'
    largest inputs (an output is no larger than what made it, unless broadcast; a
    reduction's is smaller still), an under-estimate rather than a promise."""
    moved = 0
    for prev, n in itertools.pairwise(nodes):
        a = max(prev.inputs, key=lambda t: t.numel, default=None)
        b = max(n.inputs, key=lambda t: t.numel, default=None)
        if a is not None and b is not None:
            t = a if a.numel <= b.numel else b
            moved += 2 * t.numel * _ITEMSIZE.get(t.dtype, 4)
    return moved


#: Least speed-up of a fused eager API over the hand-written chain (measured at a probe
#: shape) that counts it as a faster fused form on this device.
MIN_EAGER_GAIN = 1.25
_PROBE_SHAPE = (64, 256)


@functools.cache
def eager_api_faster(pattern: str, device: str = "cpu") -> bool:
    """Does torch's eager replacement of ``pattern`` beat the hand-written chain on this
    device? Measured once per process with the pattern's verify builder at a small shape
    (on CPU ``torch.rms_norm`` runs the same ops as the chain: no faster). Patterns without an
    eager replacement: False. Devices this process does not measure: True (the capture's own
    times are all there is)."""
    record = pattern_named(pattern)
    if record is None or not record.eager_replacement:
        return False
    if record.verify is None or device != "cpu":
        return True  # nothing to probe with here: the capture's own times are all there is
    try:
        import torch

        from ..result import Hint

        probe = Hint("fusion", pattern, [], details={"shape": list(_PROBE_SHAPE), "weight": True})
        x = torch.randn(*_PROBE_SHAPE)
        with torch.no_grad():
            chain, replacement, _ = record.verify(probe, x, torch.device("cpu"))
            if replacement is None:
                return False
            times: dict[str, list[float]] = {"chain": [], "replacement": []}
            chain(), replacement()
            for _ in range(5):
                for name, fn in (("chain", chain), ("replacement", replacement)):
                    t0 = time.perf_counter_ns()
                    for _ in range(20):
                        fn()
                    times[name].append((time.perf_counter_ns() - t0) / 20)
        return statistics.median(times["chain"]) >= MIN_EAGER_GAIN * statistics.median(times["replacement"])
    except Exception:  # a probe that cannot run: trust the capture's times
        return True


@functools.cache
def compiled_call_ns(device: str = "cpu") -> float | None:
    """What calling torch.compile'd code costs beyond the eager op it runs, in ns: one op
    compiled (Dynamo's guards and frame, no Inductor build) against the op itself, measured
    once per process. None off the CPU or where torch.compile fails here."""
    if device != "cpu":
        return None
    try:
        import torch

        x = torch.ones(8)

        def one(t: torch.Tensor) -> torch.Tensor:
            return t + 1.0

        registry = _backend_registry()
        before = set(registry)
        compiled = torch.compile(one, backend="eager", dynamic=False)
        with torch.no_grad():
            compiled(x)
            eager, comp = [], []
            for _ in range(5):
                t0 = time.perf_counter_ns()
                for _ in range(50):
                    one(x)
                t1 = time.perf_counter_ns()
                for _ in range(50):
                    compiled(x)
                t2 = time.perf_counter_ns()
                eager.append((t1 - t0) / 50)
                comp.append((t2 - t1) / 50)
        # This measurement is no use of torch.compile by the user: its backend leaves the
        # registry the observation pass reads to tell (see capture.observe).
        for key in set(registry) - before:
            registry.pop(key, None)
        return max(0.0, statistics.median(comp) - statistics.median(eager))
    except Exception:  # a torch.compile that cannot run here: no such cost is claimed
        return None


def _backend_registry() -> dict[int, Any]:
    """torch.compile's registry of the backends asked for in this process."""
    from torch._dynamo import eval_frame

    registry = getattr(eval_frame, "cached_backends", None)
    return registry if isinstance(registry, dict) else {}


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


def device_of(backend: str) -> str:
    return {"cuda": "cuda", "neuron": "neuron"}.get(backend, "cpu")


def model_text(pattern: str, backend: str, measured_here: bool = True) -> str:
    """The estimate's model in words, for the hint's details. ``measured_here`` is False for a
    trace file: its device is not this process's, and nothing is measured here for it."""
    text = f"sum(op times) - {fused_passes(pattern)} pass(es) x median full-size op time, per call, from each op's median over the calls"
    if measured_here and device_costs(device_of(backend)) is not None:
        text += "; at most the launches and intermediate bytes fusion removes, at this device's measured per-op cost and bandwidth"
        if not eager_api_faster(pattern, device_of(backend)):
            text += ", less the measured cost of entering torch.compile'd code (its fused form here)"
    return text
