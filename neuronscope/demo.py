"""The study that motivated neuronscope, on whatever backend is present.

A hand-written RMSNorm (square, mean, add eps, rsqrt, multiply, multiply by weight) against
``torch.rms_norm`` and against ``torch.compile`` of the hand-written one. On Trainium the
hand-written form cost about six times the device time of either fused form.
:func:`render_demo` answers the demo's question in one paragraph before the table.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from neuronscope.announce import ensure_log_handler
from neuronscope.compare.variants import compare
from neuronscope.result.comparison import Comparison

__all__ = ["DEMO_SHAPE", "STUDY", "answer", "render_demo", "rms_norm_fused", "rms_norm_naive", "run_demo"]

log = logging.getLogger("neuronscope")

#: Small enough that the whole demo (three variants, warm-up, one compile) finishes in well
#: under a minute on a 2-core CPU, large enough that the per-op costs stand out of the noise.
DEMO_SHAPE = (8, 256, 1024)
EPS = 1e-6
#: What the study measured on Trainium (device time per call; ../shared/CONTRACT.md).
STUDY = (
    "On Trainium the study measured 2,355 us of device time for the hand-written form over its six ops, "
    "against 403.3 us for one aten::_fused_rms_norm and 375.5 us for the torch.compile version, one region (about 6x)"
)
#: Why a CPU shows less: what fusion saves on an accelerator is mostly per-op cost.
CPU_DIFFERS = (
    "A CPU gains less: each op there is a vectorised loop started from the host with no device launch "
    "or separate kernel to pay for, so fusing saves only the extra passes over memory"
)


def rms_norm_naive(x: Any, weight: Any, eps: float = EPS) -> Any:
    """RMSNorm written out by hand, as in many model files: six separate ops."""
    import torch

    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def rms_norm_fused(x: Any, weight: Any, eps: float = EPS) -> Any:
    """The same computation through the fused API."""
    import torch

    return torch.rms_norm(x, (x.shape[-1],), weight, eps)


def answer(cmp: Comparison) -> str:
    """One paragraph: which variant is fastest, by how much (with its interval), and why
    (ops per call, what the study measured on Trainium, why this backend differs)."""
    if not cmp.rows:
        return "The comparison holds no variant."
    base = cmp.rows[0]
    others = cmp.rows[1:]
    told = [r for r in others if r.verdict in ("faster", "slower")]
    fastest = max(cmp.rows, key=lambda r: r.speedup)
    level = cmp.timing.get("confidence", 0.99)
    parts = []
    where = {"cpu": "on this CPU", "cuda": "on this GPU", "neuron": "on this Trainium device"}.get(cmp.backend or "", "here")
    if fastest is base or fastest.verdict != "faster":
        parts.append(
            f"Answer {where}: no variant is told apart as faster than {base.label} "
            + "("
            + "; ".join(f"{r.label} {r.speedup_text(base)}" for r in others)
            + f", {level:.0%} intervals)."
        )
    else:
        rest = [r for r in others if r is not fastest]
        parts.append(
            f"Answer {where}: {fastest.label} is fastest, {fastest.speedup:.2f}x the speed of {base.label} "
            f"({level:.0%} interval {fastest.speedup_low:.2f}-{fastest.speedup_high:.2f})"
            + "".join(f"; {r.label} {r.speedup_text(base)}" for r in rest)
            + "."
        )
    slower = [r for r in others if r.verdict == "slower" and r.speedup > 0]
    if slower:
        parts.append(
            "Slower: "
            + "; ".join(f"{r.label} takes {1 / r.speedup:.2f}x {base.label}'s time" for r in slower)
            + "."
        )
    if not told and others:
        parts.append("The differences here are within the machine's noise.")
    if any(r.op_count for r in cmp.rows):
        why = ", ".join(
            f"{r.label} {r.op_count}" + ("" if r.all_op_count is None else f" ({r.all_op_count} with the ops nested in them)")
            for r in cmp.rows
        )
        parts.append(f"Why: ops dispatched per call by each variant's own code: {why}.")
        # A "fused" op that runs more ops inside it than the hand-written form dispatches is
        # no fused kernel on this backend: say so, or the op table would contradict the row.
        composite = [r for r in others if r.op_count == 1 and (r.all_op_count or 0) >= max(base.op_count, 2) and r.top_op]
        parts.extend(
            f"Here {r.label}'s one op, {r.top_op}, is no single kernel: it runs {r.all_op_count} ops inside it."
            for r in composite
        )
    parts.append(STUDY + ".")
    if cmp.backend == "cpu":
        parts.append(CPU_DIFFERS + ".")
    return " ".join(parts)


def render_demo(cmp: Comparison) -> str:
    """The answer first, then the comparison table."""
    return answer(cmp) + "\n\n" + cmp.table()


def run_demo(
    backend: str = "auto",
    output_dir: str | None = None,
    export: bool = True,
    compile: bool = True,
    shape: tuple[int, ...] | None = None,
    **options: Any,
) -> Comparison:
    """Compare naive, fused and compiled RMSNorm on ``shape`` (default :data:`DEMO_SHAPE`);
    return the :class:`Comparison`. ``options`` go to :func:`~neuronscope.compare` (e.g.
    ``time_budget``).

    Where ``torch.compile`` cannot compile here (no C++ compiler for inductor on a CPU, for
    instance), the compiled variant is left out with a warning rather than failing the demo.
    """
    import torch

    from neuronscope.capture import resolve_backend
    from neuronscope.config import build_options

    ensure_log_handler()
    name = resolve_backend(build_options(None, backend=backend)).name
    device = {"cuda": "cuda", "neuron": "neuron"}.get(name, "cpu")
    torch.manual_seed(0)
    shape = tuple(shape or DEMO_SHAPE)
    log.info("neuronscope demo: hand-written RMSNorm vs torch.rms_norm%s on a %s tensor on %s",
             " vs torch.compile" if compile else "", "x".join(map(str, shape)), name)
    x = torch.randn(*shape, device=device)
    weight = torch.randn(shape[-1], device=device)
    variants: dict[str, Any] = {"naive": rms_norm_naive, "fused": rms_norm_fused}
    if compile:
        compiler = "neuron" if name == "neuron" else "inductor"
        log.info(
            "neuronscope demo: compiling the hand-written RMSNorm with torch.compile (backend %s; "
            "the first compile in a process takes 20-60 s on a 2-core CPU, not measured)...", compiler,
        )
        t0 = time.perf_counter()
        try:
            # torch.compile itself imports the compiler (which can fail in a broken install);
            # the first call compiles, here, so that a failure can be reported plainly.
            compiled = torch.compile(rms_norm_naive, backend=compiler)
            compiled(x, weight)
        except Exception as err:
            log.warning(
                "neuronscope demo: torch.compile does not work here (%s: %s); the compiled variant is left out",
                type(err).__name__,
                str(err).splitlines()[0] if str(err) else "",
            )
        else:
            log.info("neuronscope demo: torch.compile took %.1f s to compile (not measured)", time.perf_counter() - t0)
            variants["compiled"] = compiled
    return compare(variants, x, weight, name="rms_norm_demo", backend=name, output_dir=output_dir, export=export, **options)
