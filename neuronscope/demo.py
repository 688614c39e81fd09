"""The study that motivated neuronscope, on whatever backend is present.

A hand-written RMSNorm (square, mean, add eps, rsqrt, multiply, multiply by weight) against
``torch.rms_norm`` and against ``torch.compile`` of the hand-written one. On Trainium the
hand-written form cost about six times the device time of either fused form.
"""

from __future__ import annotations

from typing import Any

from .result import Comparison

__all__ = ["rms_norm_naive", "run_demo", "DEMO_SHAPE"]

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


def run_demo(backend: str = "auto", output_dir: str | None = None, export: bool = True, compile: bool = True) -> Comparison:
    """Compare naive, fused and compiled RMSNorm; return the :class:`Comparison`."""
    import torch

    from .capture import resolve_backend
    from .compare import compare
    from .config import build_options

    name = resolve_backend(build_options(None, backend=backend)).name
    device = {"cuda": "cuda", "neuron": "neuron"}.get(name, "cpu")
    torch.manual_seed(0)
    x = torch.randn(*DEMO_SHAPE, device=device)
    weight = torch.randn(DEMO_SHAPE[-1], device=device)
    variants = {"naive": rms_norm_naive, "fused": rms_norm_fused}
    if compile:
        variants["compiled"] = torch.compile(rms_norm_naive, backend="neuron" if name == "neuron" else "inductor")
    return compare(variants, x, weight, name="rms_norm_demo", backend=name, output_dir=output_dir, export=export)
