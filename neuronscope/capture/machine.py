"""Measure what ops cost on this CPU: the probes behind ``neuronscope calibrate``.

Like :mod:`.verify`, whose timing it shares, this runs torch outside any profiler. The
analysis stage keeps what it measures (:mod:`neuronscope.analysis.calibration`) and its cost
model reads it from there, so that a capture's analysis times nothing: the probes run only
when the user asks for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from neuronscope.capture import torch_private
from neuronscope.capture.idioms import Builders, Evidence
from neuronscope.capture.timing import block_timer
from neuronscope.capture.timing import calibrate as quickest_loop
from neuronscope.capture.verify import floating_dtype, paired_difference, paired_saving_ns, time_variants

__all__ = ["chain_traffic", "compiled_call_ns", "device_costs", "eager_probes", "measuring", "optimizer_probes"]

#: Tensor sizes (bytes) the bandwidth is measured at: from a first-level cache's size to past
#: any last-level cache.
BANDWIDTH_SIZES = (64 << 10, 512 << 10, 4 << 20, 32 << 20)
#: Probe shapes for an idiom's eager replacement: one where the launches dominate a chain's cost
#: (a few KiB per tensor), one where the work on its elements does (1 MiB per tensor).
PROBE_SHAPES = ((16, 64), (256, 1024))
#: Paired rounds each eager probe is timed in (a millisecond a side each): at 7, RMSNorm's share
#: came out 0.20, 0.36 and 0.45 in three runs on a busy 2-core machine, where verify measured 0.2.
EAGER_REPEATS = 25
#: The two probes a fused optimizer's saving is solved from: (parameters, elements each), many
#: small ones and few large ones.
OPTIMIZER_PROBES = ((32, 1024), (2, 1 << 18))


class _Probe(NamedTuple):
    """The evidence an idiom's builder reads (:class:`~.idioms.Evidence`), for a probe shape."""

    pattern: str
    details: dict[str, Any]
    kind: str = "fusion"
    ops: tuple[str, ...] = ()
    calls: int = 1
    est_saving_us: float = 0.0


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """Where the probes run: outside any profiler, their random numbers from a forked and
    seeded stream (the user's is theirs)."""
    import torch

    with torch.autograd.profiler.profile(enabled=False), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def device_costs() -> tuple[float, tuple[tuple[int, float], ...]]:
    """A tiny op's call (ns) and the bandwidth of an add over tensors of each size in
    :data:`BANDWIDTH_SIZES` (bytes per ns), the quickest of a few loops each (a loop another
    process interrupted is not the op's cost)."""
    import torch

    def no_sync() -> None:  # the CPU's synchronisation: nothing to wait for
        pass

    per_op = quickest_loop(block_timer(torch.add, (torch.ones(8), 1.0), {}, no_sync), 5, 100) * 1e9
    points = []
    for size in BANDWIDTH_SIZES:
        x = torch.ones(size // 4)
        out = torch.empty_like(x)
        torch.add(x, 1.0, out=out)  # the pages of both, touched outside the timing
        t = quickest_loop(block_timer(torch.add, (x, 1.0), {"out": out}, no_sync), 3, max(1, (1 << 22) // size)) * 1e9
        points.append((size, 2 * size / max(t - per_op, 1.0)))
    return per_op, monotone_bandwidth(points)


def monotone_bandwidth(points: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """Measured (size, bytes per ns) points, each lifted to at least the figure of any larger
    size: a smaller tensor never moves slower (it sits in a nearer cache), and load only ever
    slows a probe (a 512 KiB add once measured 600x slow on a busy 2-core machine)."""
    out = list(points)
    for i in range(len(out) - 2, -1, -1):
        out[i] = (out[i][0], max(out[i][1], out[i + 1][1]))
    return tuple(out)


def compiled_call_ns() -> float | None:
    """One op compiled (Dynamo's guards and frame, no Inductor build) against the op itself, in
    ns; None where torch.compile cannot run here."""
    try:
        import torch

        x = torch.ones(8)

        def one(t: torch.Tensor) -> torch.Tensor:
            return t + 1.0

        compiled = torch_private.own_compile(one, backend="eager", dynamic=False)  # no use by the user
        with torch.no_grad():
            compiled(x)
            us = time_variants({"eager": lambda: one(x), "compiled": lambda: compiled(x)}, lambda: None, 9, 0.001)
        return max(0.0, paired_difference(us["compiled"], us["eager"]) * 1e3)
    except Exception:  # a torch.compile that cannot run here: no such cost is claimed
        return None


def eager_probes(pattern: str, build: Callable[[Evidence, Any, Any], Builders], dtype: str) -> list[tuple[int, list[int], float]] | None:
    """``pattern``'s chain, as its builder ``build`` (:mod:`.idioms`) makes it, against its eager
    replacement at each of :data:`PROBE_SHAPES`: (the chain's ops, its intermediates' bytes as
    :func:`chain_traffic` counts them, ns the replacement saves per call). None: no eager
    replacement, or a probe that cannot run here."""
    try:
        import torch

        rows = []
        with torch.no_grad():
            for shape in PROBE_SHAPES:
                probe = _Probe(pattern, {"shape": list(shape), "weight": True})
                chain, replacement, _ = build(probe, torch.randn(*shape, dtype=floating_dtype(dtype)), torch.device("cpu"))
                if replacement is None:
                    return None
                ops, tensors = chain_traffic(chain)
                rows.append((ops, tensors, paired_saving_ns(chain, replacement, EAGER_REPEATS)))
        return rows
    except Exception:  # a probe that cannot run here: the compiled form is the estimate
        return None


def optimizer_probes(cls: str, dtype: str) -> list[tuple[int, int, float]] | None:
    """One step of ``torch.optim.<cls>(fused=True)`` against its default (``foreach=False``)
    form on each of :data:`OPTIMIZER_PROBES`: (parameters, their elements, ns saved). None: an
    optimizer torch cannot fuse here."""
    try:
        import torch

        optim = getattr(torch.optim, cls)
        rows = []
        for count, numel in OPTIMIZER_PROBES:

            def build(numel: int = numel, count: int = count, **kind: bool) -> Any:
                params = [torch.randn(numel, dtype=floating_dtype(dtype), requires_grad=True) for _ in range(count)]
                for p in params:
                    p.grad = torch.randn_like(p)
                return optim(params, lr=1e-3, **kind)

            default, fused = build(foreach=False), build(fused=True)
            rows.append((count, count * numel, paired_saving_ns(default.step, fused.step, 5)))
        return rows
    except Exception:  # no fused form on this build
        return None


def chain_traffic(fn: Callable[[], Any]) -> tuple[int, list[int]]:
    """Run ``fn`` once and count its ops and its intermediates (bytes, one entry per read of a
    tensor an earlier op of it made), as the cost model counts a captured chain's."""
    import torch

    made: set[int] = set()
    tensors: list[int] = []
    ops = 0

    class _Count(torch_private.dispatch_mode_class()):  # type: ignore[misc]  # a class from torch_private
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            nonlocal ops
            out = func(*args, **(kwargs or {}))
            ops += 1
            for a in torch_private.tree_leaves((args, kwargs)):
                if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in made:
                    tensors.append(a.numel() * a.element_size())
            leaves = torch_private.tree_leaves(out)
            made.update(o.untyped_storage().data_ptr() for o in leaves if isinstance(o, torch.Tensor))
            return out

    with _Count():
        fn()
    return ops, tensors
