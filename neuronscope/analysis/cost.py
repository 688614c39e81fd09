"""What fusing an idiom saves: the cost model behind ``Hint.est_saving_us``.

Two bounds, the smaller taken (see :func:`grounded_saving_ns`):

- from the capture's own op times: the ops of these idioms are memory-bound passes over one
  tensor, and the fused form makes as few passes as the idiom needs (:func:`estimate_saving_ns`);
- from what fusion removes: the launches of the ops beyond the fused kernel's passes, and the
  intermediates written and read again, costed with a per-op overhead and a memory bandwidth
  (at each intermediate's size: a cache is faster than memory) measured once per process on
  this process's CPU (:func:`device_costs`), for CPU captures and CPU trace files alike, where
  the ops' shapes were recorded; a capture of another device (CUDA, Neuron, MTIA), which this
  process does not measure, is costed from its own op times alone; for each fused form
  ``hint.verify()`` times, the better one
  (:func:`fused_forms_ns`): torch.compile's kernel less its entry cost, or the eager
  replacement, timed against the hand-written chain at the occurrence's own shape, dtype and
  parameters (:func:`eager_saving_at_ns`; what a fused kernel removes per byte depends on
  the cache the tensors fit in: GELU's tanh formula, faster fused on 1 MiB tensors, is slower
  fused on 128 KiB ones on a CPU), else its share of the launches and cost per intermediate
  byte measured at two probe shapes (:func:`eager_costs`).

The capture's op times carry the profiler's own per-op overhead, which ``hint.verify()`` (and
the user's program) does not pay: the second bound keeps an estimate from promising it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import statistics
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.analysis.patterns import pattern_named
from neuronscope.analysis.patterns.base import ROOTS
from neuronscope.capture import torch_private
from neuronscope.capture.timing import block_timer, calibrate

__all__ = [
    "MAX_TIMED_NUMEL",
    "MAX_TIMED_PARAMETERS",
    "MAX_TIMED_SHAPES",
    "MIN_SAVING_NS",
    "DeviceCosts",
    "compiled_call_ns",
    "device_costs",
    "eager_costs",
    "eager_saving_at_ns",
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


class DeviceCosts(NamedTuple):
    """What ops cost on one device, measured once per process outside any profiler."""

    #: one small op's call (dispatch, allocation, the Python call), ns
    per_op_ns: float
    #: (tensor bytes, bytes per ns) of an op reading and writing tensors of that size, smallest
    #: first: a tensor that stays in a cache moves several times faster than one past them
    bandwidth: tuple[tuple[int, float], ...]

    def bytes_per_ns(self, nbytes: int) -> float:
        """Bandwidth for tensors of ``nbytes``: interpolated in log size between the measured
        sizes, the nearest one outside them."""
        points = self.bandwidth
        if nbytes <= points[0][0]:
            return points[0][1]
        for (s0, b0), (s1, b1) in itertools.pairwise(points):
            if nbytes <= s1:
                w = math.log(nbytes / s0) / math.log(s1 / s0)
                return b0 + w * (b1 - b0)
        return points[-1][1]

    def moved_ns(self, tensors: list[int]) -> float:
        """Time to write each of ``tensors`` (bytes) and read it back once."""
        return sum(2 * b / self.bytes_per_ns(b) for b in tensors)


#: Tensor sizes (bytes) the bandwidth is measured at: from a first-level cache's size to past
#: any last-level cache.
_BANDWIDTH_SIZES = (64 << 10, 512 << 10, 4 << 20, 32 << 20)


def _no_sync() -> None:
    """The CPU's synchronisation: nothing to wait for (the probes run only there)."""


def measured_here(device: str) -> bool:
    """Whether this process measures ``device``'s costs (:func:`device_costs`): its CPU only."""
    return device == "cpu"


@functools.cache
def device_costs(device: str = "cpu") -> DeviceCosts | None:
    """This device's per-op cost and bandwidth, measured once per process outside any
    profiler: a tiny op's call, and an add over tensors of each size in
    :data:`_BANDWIDTH_SIZES`. None for a device other than the CPU (this process measures
    only where it runs the op itself). On torch's own thread count: changing it here left a
    process whose children fork afterwards hanging in OpenMP."""
    if not measured_here(device):
        return None
    import torch

    tiny = torch.ones(8)
    with torch.autograd.profiler.profile(enabled=False):
        # The quickest of a few loops: a loop another process interrupted is not the op's cost.
        per_op = calibrate(block_timer(torch.add, (tiny, 1.0), {}, _no_sync), 5, 100) * 1e9
        bandwidth = []
        for size in _BANDWIDTH_SIZES:
            x = torch.ones(size // 4)
            out = torch.empty_like(x)
            torch.add(x, 1.0, out=out)  # the pages of both, touched outside the timing
            calls = max(1, (1 << 22) // size)
            t = calibrate(block_timer(torch.add, (x, 1.0), {"out": out}, _no_sync), 3, calls) * 1e9
            bandwidth.append((size, 2 * size / max(t - per_op, 1.0)))
    return DeviceCosts(per_op, monotone_bandwidth(bandwidth))


def monotone_bandwidth(points: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """Measured (size, bytes per ns) points, smallest size first, each lifted to at least the
    figure of any larger size: a smaller tensor never moves slower than a larger one (it sits in
    a nearer cache), so a figure below a larger size's came from a busy moment (with torch's two
    threads per op on a busy 2-core machine, a 512 KiB add measured 600x slow), and load only
    ever slows a probe."""
    out = list(points)
    for i in range(len(out) - 2, -1, -1):
        out[i] = (out[i][0], max(out[i][1], out[i + 1][1]))
    return tuple(out)


def grounded_saving_ns(pattern: str, nodes: list[OpNode], g: OpGraph, backend: str) -> float | None:
    """What fusing one occurrence saves, on this device's measured costs, with the fused form
    ``hint.verify()`` would find faster (:func:`fused_forms_ns`). None where there is no such
    bound: the device's costs are not measured here, or the ops' shapes were not recorded."""
    forms = fused_forms_ns(pattern, nodes, g, backend)
    return None if forms is None else max(0.0, *forms.values())


def fused_forms_ns(
    pattern: str, nodes: list[OpNode], g: OpGraph, backend: str, at: Mapping[str, Any] | None = None
) -> dict[str, float] | None:
    """The saving of each fused form of one occurrence, in ns, as ``hint.verify()`` weighs them:

    - ``compiled``: torch.compile's single kernel removes the launches of the ops beyond the
      fused form's passes and each intermediate written and read again; where verify can
      rebuild the idiom, each call pays compiled code's own entry cost (guards, the wrapper;
      :func:`compiled_call_ns`);
    - ``eager_timed``: torch's eager replacement, where the pattern has one, timed against the
      chain at ``at`` (the occurrence's shape, dtype and parameters, as a hint's details hold
      them; :func:`eager_saving_at_ns`): where it could be timed, the only form returned, a
      measurement where the others are models;
    - ``eager``: where it could not be timed there, the share of the same launches' cost and
      the cost per intermediate byte it was measured to remove on this device at two probe
      shapes (:func:`eager_costs`).

    None where the device's costs are not measured here, or no op's shapes were recorded."""
    if not any(n.inputs for n in nodes):
        return None  # no shapes: nothing to cost, and no probe to run (a torch import)
    costs = device_costs(backend)
    if costs is None:
        return None
    tensors = _intermediate_bytes(nodes) if g.linking == "none" else _linked_intermediate_bytes(nodes)
    launches_ns = max(0, len(nodes) - fused_passes(pattern)) * costs.per_op_ns
    moved_ns = costs.moved_ns(tensors)
    # An idiom hint.verify() rebuilds is compiled alone there, and pays compiled code's entry
    # on each call; a chain, a rotary or an attention is compiled with the region the
    # suggestion names, whose entry is paid once for all of it.
    record = pattern_named(pattern)
    entry_ns = (compiled_call_ns(backend) or 0.0) if record is not None and record.verify is not None else 0.0
    forms = {"compiled": launches_ns + moved_ns - entry_ns}
    timed = eager_saving_at_ns(pattern, at, backend) if at is not None else None
    if timed is not None:
        # A measurement of the call the suggestion names beats a model of a compiled kernel
        # not compiled here (on a CPU, GELU's compiled kernel plus its entry was measured
        # slower than the chain the model said it would beat): the timed form alone.
        return {"eager_timed": timed}
    eager = eager_costs(pattern, backend)
    if eager is not None:
        # An op on a parameter alone (Gemma's ``1 + weight``) stays in the eager call's
        # arguments: it is not one of the launches the replacement removes.
        removable_ns = max(0, len(nodes) - _parameter_ops(nodes) - fused_passes(pattern)) * costs.per_op_ns
        forms["eager"] = eager[0] * removable_ns + eager[1] * sum(tensors)
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
    return [t.numel * _ITEMSIZE.get(t.dtype, 4) for n in nodes for t, p in zip(n.inputs, n.producers) if p in inside]


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
            moved.append(t.numel * _ITEMSIZE.get(t.dtype, 4))
    return moved


#: Probe shapes for :func:`eager_costs`: one where the launches dominate a chain's cost (a
#: few KiB per tensor), one where the work on its elements does (1 MiB per tensor).
_PROBE_SHAPES = ((16, 64), (256, 1024))
#: Largest share of the launches :func:`eager_costs` credits: the chain's calls cost somewhat
#: more than the tiny op the per-op cost is measured with, but a share beyond this is noise.
MAX_SHARE = 3.0
#: Most a fused eager replacement removes per intermediate byte, in multiples of what writing
#: and reading the byte back costs at the probe's size: the traffic itself plus the per-element
#: work of the ops it replaces (GELU's tanh formula: 2.4 times the traffic on this 2-core CPU).
MAX_PER_BYTE_FACTOR = 8.0


@functools.cache
def eager_costs(pattern: str, device: str = "cpu") -> tuple[float, float] | None:
    """What torch's eager replacement of ``pattern`` removes on this device: (the share of the
    chain's launches' cost, ns per byte of the chain's intermediates). Measured once per process
    with the pattern's verify builder at two probe shapes (:data:`_PROBE_SHAPES`): the chain's ops
    and intermediates are counted as it runs, the chain and the replacement timed interleaved,
    and the two savings solved for the two rates. A fused kernel removes all the launches and,
    per byte, the traffic and the per-element work of the ops it replaces (a transcendental
    computed once, vectorised); a composite that runs the same ops in C++ removes part of the
    launches' cost and nothing per byte. None: no eager replacement, a device this process does
    not run ops on, or a probe that cannot run here."""
    record = pattern_named(pattern)
    if record is None or not record.eager_replacement or record.verify is None:
        return None
    costs = device_costs(device)
    if costs is None:
        return None
    try:
        import torch

        from neuronscope.capture.verify import paired_saving_ns
        from neuronscope.result.hint import Hint

        rows = []
        with torch.no_grad(), _private_random_stream():
            for shape in _PROBE_SHAPES:
                probe = Hint("fusion", pattern, [], details={"shape": list(shape), "weight": True})
                x = torch.randn(*shape)
                chain, replacement, _ = record.verify(probe, x, torch.device("cpu"))
                if replacement is None:
                    return None
                ops, tensors = _chain_traffic(chain)
                saving_ns = paired_saving_ns(chain, replacement, 7)
                rows.append((max(0, ops - record.fused_passes) * costs.per_op_ns, float(sum(tensors)), saving_ns))
    except Exception:  # a probe that cannot run here: the compiled form is the estimate
        return None
    (l1, m1, s1), (l2, m2, s2) = rows
    # Per byte, a fused kernel removes at most the traffic and the per-element work of the ops
    # it replaces: a few times what moving the bytes costs (a figure above that came from a busy
    # moment during the probe, and would promise milliseconds).
    max_per_byte = MAX_PER_BYTE_FACTOR * 2 / costs.bytes_per_ns(int(m2) or 1)
    det = l1 * m2 - l2 * m1
    if m2 <= 0 or abs(det) < 1e-9 * max(l1, 1.0) * m2:  # nothing to tell the two rates apart by
        if l1 > 0:  # no intermediates counted: what it saves is a share of the launches' cost
            return min(max(s1, 0.0) / l1, MAX_SHARE), 0.0
        return None
    share = (s1 * m2 - s2 * m1) / det
    per_byte = (l1 * s2 - l2 * s1) / det
    return min(max(share, 0.0), MAX_SHARE), min(max(per_byte, 0.0), max_per_byte)


@contextlib.contextmanager
def _private_random_stream() -> Iterator[None]:
    """The probes' random numbers, from a forked and seeded stream: the user's is theirs (a
    profiled step must see the dropout masks an unprofiled one does)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


#: Most occurrences' shapes :func:`eager_saving_at_ns` times in one process (some 20-50 ms
#: each), and the largest input it times (elements: a chain over 1 MiB float32 tensors takes
#: about a millisecond a call, and is timed a few dozen times); past either, the two-probe
#: model of :func:`eager_costs` stands in (40 LayerNorms of 1M float64 elements each took 9 s
#: of analysis at 32 shapes of up to 1M elements).
MAX_TIMED_SHAPES = 16
MAX_TIMED_NUMEL = 1 << 18


def eager_saving_at_ns(pattern: str, details: Mapping[str, Any], device: str = "cpu") -> float | None:
    """What torch's eager replacement of ``pattern`` saves per call against the hand-written
    chain, in ns (negative: it is slower), at an occurrence's shape, dtype and parameters
    (``details`` as a hint holds them, with its ``ops``), timed here without the profiler as
    ``hint.verify()`` times them. Once per distinct occurrence and process. None: no eager replacement, a device
    this process does not run ops on, no recorded shape, a shape too large or too many shapes
    timed already (:data:`MAX_TIMED_SHAPES`, :data:`MAX_TIMED_NUMEL`), or a probe that cannot run."""
    record = pattern_named(pattern)
    shape = details.get("shape")
    if record is None or not record.eager_replacement or record.verify is None or not measured_here(device):
        return None
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape) or math.prod(shape) > MAX_TIMED_NUMEL:
        return None
    # What the verify builders read, as they read it (a weight unless said otherwise, the rest
    # off unless on): a live capture and its trace, which records less, time the same chain.
    occurrence: dict[str, Any] = {
        "shape": list(shape),
        "dtype": str(details.get("dtype") or "float32"),
        "ops": [str(op) for op in details.get("ops") or []],
        "weight": bool(details.get("weight", True)),
    }
    for key in ("approximate", "dim", "bias", "weight_plus_one", "correction"):
        if details.get(key) not in (None, False):
            occurrence[key] = details[key]
    try:
        return _timed_eager_ns(json.dumps([pattern, occurrence], sort_keys=True, default=str))
    except _BudgetSpent:
        return None


class _BudgetSpent(Exception):
    """No more shapes are timed in this process (raised, so that the cache keeps no refusal)."""


@functools.cache  # at most MAX_TIMED_SHAPES entries: see the budget below
def _timed_eager_ns(key: str) -> float | None:
    """:func:`eager_saving_at_ns` for one occurrence (``[pattern, details]`` as JSON), cached;
    :class:`_BudgetSpent` once :data:`MAX_TIMED_SHAPES` are timed."""
    if _timed_eager_ns.cache_info().currsize >= MAX_TIMED_SHAPES:
        raise _BudgetSpent
    pattern, details = json.loads(key)
    record = pattern_named(pattern)
    if record is None or record.verify is None:
        return None
    try:
        import torch

        from neuronscope.capture.verify import floating_dtype, paired_saving_ns
        from neuronscope.result.hint import Hint

        probe = Hint("fusion", pattern, details.pop("ops"), details=details)
        with torch.no_grad(), _private_random_stream():
            x = torch.randn(*details["shape"]).to(floating_dtype(details["dtype"]))
            chain, replacement, _ = record.verify(probe, x, torch.device("cpu"))
            return None if replacement is None else paired_saving_ns(chain, replacement, 5)
    except Exception:  # a probe that cannot run here: the two-probe model stands in
        return None


#: Most parameter elements :func:`fused_optimizer_saving_ns` steps (a default AdamW step over
#: 2M float32 elements takes some 10 ms on a CPU core, and is timed a few dozen times); a
#: larger model's parameters are sampled up to it.
MAX_TIMED_PARAMETERS = 1 << 21


@functools.lru_cache(maxsize=8)
def fused_optimizer_saving_ns(cls: str, shapes: tuple[tuple[int, ...], ...], dtype: str = "float32", device: str = "cpu") -> float | None:
    """What ``torch.optim.<cls>(..., fused=True)`` saves per step against its default
    (``foreach=False``) form on parameters of ``shapes``, in ns, timed here with default
    hyperparameters (negative: slower). Past :data:`MAX_TIMED_PARAMETERS` elements, the
    parameters in order up to it (a larger one cut to it) are timed and the saving scaled by
    the elements left out: the update is elementwise, its cost about proportional to them.
    None: a device this process does not run ops on, or an optimizer torch cannot fuse here."""
    total = sum(math.prod(s) for s in shapes)
    if not measured_here(device) or not shapes or total <= 0:
        return None
    sample: list[tuple[int, ...]] = []
    room = MAX_TIMED_PARAMETERS
    for shape in shapes:
        n = math.prod(shape)
        if n > room:
            if not sample:
                sample.append((room,))  # one parameter larger than the budget: a cut of it
            break
        sample.append(shape)
        room -= n
    timed_elements = sum(math.prod(s) for s in sample)
    try:
        import torch

        from neuronscope.capture.verify import floating_dtype, paired_saving_ns

        dt = floating_dtype(dtype)
        optim = getattr(torch.optim, cls)

        def build(**kind: bool) -> Any:
            params = [torch.randn(s, dtype=dt, requires_grad=True) for s in sample]
            for p in params:
                p.grad = torch.randn_like(p)
            return optim(params, **kind)

        with _private_random_stream():
            default, fused = build(foreach=False), build(fused=True)
        return paired_saving_ns(default.step, fused.step, 5) * total / timed_elements
    except Exception:  # an optimizer without a fused form on this build: no bound
        return None


def _chain_traffic(fn: Any) -> tuple[int, list[int]]:
    """Run ``fn`` once and count its ops and its intermediates (bytes, one entry per read of a
    tensor an earlier op of it made), as the cost model counts a captured chain's."""
    import torch

    TorchDispatchMode = torch_private.dispatch_mode_class()
    tree_leaves = torch_private.tree_leaves

    made: set[int] = set()
    tensors: list[int] = []
    ops = 0

    class _Count(TorchDispatchMode):  # type: ignore[misc, valid-type]  # a class from torch_private
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            nonlocal ops
            out = func(*args, **(kwargs or {}))
            ops += 1
            for a in tree_leaves((args, kwargs)):
                if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in made:
                    tensors.append(a.numel() * a.element_size())
            made.update(o.untyped_storage().data_ptr() for o in tree_leaves(out) if isinstance(o, torch.Tensor))
            return out

    with _Count():
        fn()
    return ops, tensors


@functools.cache
def compiled_call_ns(device: str = "cpu") -> float | None:
    """What calling torch.compile'd code costs beyond the eager op it runs, in ns: one op
    compiled (Dynamo's guards and frame, no Inductor build) against the op itself, measured
    once per process. None off the CPU or where torch.compile fails here."""
    if not measured_here(device):
        return None
    try:
        import torch

        x = torch.ones(8)

        def one(t: torch.Tensor) -> torch.Tensor:
            return t + 1.0

        registry = _backend_registry()
        before = set(registry)
        compiled = torch.compile(one, backend="eager", dynamic=False)
        from neuronscope.capture.verify import paired_difference, time_variants

        with torch.no_grad():
            compiled(x)
            # Interleaved rounds, as verify() times: the entry cost is the difference of two
            # near-equal times, which one busy moment of the machine would swing.
            us = time_variants({"eager": lambda: one(x), "compiled": lambda: compiled(x)}, lambda: None, 9, 0.001)
        entry_ns = paired_difference(us["compiled"], us["eager"]) * 1e3
        # This measurement is no use of torch.compile by the user: its backend leaves the
        # registry the observation pass reads to tell (see capture.observe).
        for key in set(registry) - before:
            registry.pop(key, None)
        return max(0.0, entry_ns)
    except Exception:  # a torch.compile that cannot run here: no such cost is claimed
        return None


def _backend_registry() -> dict[int, Any]:
    """torch.compile's registry of the backends asked for in this process."""
    registry = getattr(torch_private.dynamo_eval_frame(import_it=True), "cached_backends", None)
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


def model_text(pattern: str, backend: str, *, bound: str, from_trace: bool = False, eager_timed: bool = False) -> str:
    """The estimate's model in words, for the hint's details. ``bound``: ``"measured"`` (the
    estimate was bounded by this device's measured costs, :func:`grounded_saving_ns`),
    ``"no_shapes"`` (it could have been, but the ops' shapes were not recorded) or ``"none"``
    (no such bound applies); ``from_trace``: the capture is a trace file, whose machine need
    not be this one; ``eager_timed``: the eager replacement was timed at the occurrence's shape
    (:func:`eager_saving_at_ns`)."""
    text = f"sum(op times) - {fused_passes(pattern)} pass(es) x median full-size op time, per call, from each op's median over the calls"
    if bound == "no_shapes":
        return text + (
            "; an upper bound: not bounded by this device's measured costs, as the ops' shapes were not recorded "
            "(capture with record_shapes=True), and profiled op times carry the profiler's own per-op overhead"
        )
    if bound != "measured" or not measured_here(backend):
        return text
    if eager_timed:
        where = "measured on this machine's CPU (the trace's own machine may differ)" if from_trace else "on this device"
        return text + (
            "; at most the saving of the eager replacement, timed against the hand-written chain at this shape, "
            f"dtype and parameters, without the profiler, {where}"
        )
    costs = (
        "the per-op cost and bandwidth measured on this machine's CPU (the trace's own machine may differ)"
        if from_trace
        else "this device's measured per-op cost and bandwidth"
    )
    text += (
        f"; at most the saving of the better fused form at {costs}: "
        "torch.compile (the launches and intermediate bytes fusion removes, less the measured cost of entering compiled code)"
    )
    eager = eager_costs(pattern, backend)
    if eager is not None:
        text += (
            f" or the eager replacement (what it was measured to remove here: {eager[0]:.2f} of the launches' cost, "
            f"{eager[1]:.3f} ns per intermediate byte)"
        )
    return text
