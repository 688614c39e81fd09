"""The study that motivated neuronscope, on whatever backend is present.

A hand-written RMSNorm (square, mean, add eps, rsqrt, multiply, multiply by weight) against
``torch.rms_norm`` and against ``torch.compile`` of the hand-written one. On Trainium the
hand-written form cost about six times the device time of either fused form.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .result import Comparison

__all__ = ["DEMO_SHAPE", "rms_norm_fused", "rms_norm_naive", "run_demo"]
#: Captured calls per variant: ten, so that the medians hold on a shared machine (with five
#: the ranking of naive and fused flipped from run to run on a 2-core VM).
DEMO_REPEATS = 10

log = logging.getLogger("neuronscope")

#: Small enough that the whole demo (three variants, warm-up, one compile) finishes in well
#: under a minute on a 2-core CPU, large enough that the per-op costs stand out of the noise.
DEMO_SHAPE = (8, 256, 1024)
EPS = 1e-6


def rms_norm_naive(x: Any, weight: Any, eps: float = EPS) -> Any:
    """RMSNorm written out by hand, as in many model files: six separate ops."""
    import torch

    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def rms_norm_fused(x: Any, weight: Any, eps: float = EPS) -> Any:
    """The same computation through the fused API."""
    import torch

    return torch.rms_norm(x, (x.shape[-1],), weight, eps)


def run_demo(
    backend: str = "auto",
    output_dir: str | None = None,
    export: bool = True,
    compile: bool = True,
    shape: tuple[int, ...] | None = None,
) -> Comparison:
    """Compare naive, fused and compiled RMSNorm on ``shape`` (default :data:`DEMO_SHAPE`);
    return the :class:`Comparison`.

    Where ``torch.compile`` cannot compile here (no C++ compiler for inductor on a CPU, for
    instance), the compiled variant is left out with a warning rather than failing the demo.
    """
    import torch

    from .announce import ensure_log_handler as _ensure_log_handler
    from .capture import resolve_backend
    from .compare import compare
    from .config import build_options

    name = resolve_backend(build_options(None, backend=backend)).name
    device = {"cuda": "cuda", "neuron": "neuron"}.get(name, "cpu")
    torch.manual_seed(0)
    shape = tuple(shape or DEMO_SHAPE)
    x = torch.randn(*shape, device=device)
    weight = torch.randn(shape[-1], device=device)
    variants: dict[str, Any] = {"naive": rms_norm_naive, "fused": rms_norm_fused}
    if compile:
        compiled = torch.compile(rms_norm_naive, backend="neuron" if name == "neuron" else "inductor")
        t0 = time.perf_counter()
        try:
            compiled(x, weight)  # the first compile, here, so a failure can be reported plainly
        except Exception as err:
            log.warning(
                "neuronscope demo: torch.compile does not work here (%s: %s); the compiled variant is left out",
                type(err).__name__,
                str(err).splitlines()[0] if str(err) else "",
            )
        else:
            _ensure_log_handler()
            log.info("neuronscope demo: torch.compile took %.1f s to compile (not measured)", time.perf_counter() - t0)
            variants["compiled"] = compiled
    return compare(
        variants, x, weight, name="rms_norm_demo", backend=name, output_dir=output_dir, export=export, active=DEMO_REPEATS
    )
