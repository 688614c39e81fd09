"""Estimated savings against hint.verify() on hand-written idioms at several sizes.

The real models of bench_real_models.py are tiny (hidden 64); this checks that the cost model
(neuronscope/analysis/cost.py) holds at other sizes too: RMSNorm (with casts), the tanh and erf
GELU, a BERT-style LayerNorm, softmax and SwiGLU, each written out by hand, captured as a
decorated function with the default options, and each hint verified. Prints the estimate, the
verified saving, their ratio, and how many are within 2x (one torch thread).

``--families``: the same for the model families of bench_families.py (transformers models the
test suite does not hold, built from config, two layers, hidden 64), each inference forward
decorated with the default options, every fusion hint verify can rebuild verified. Run it with
``NEURONSCOPE_CACHE_DIR`` pointing at an empty folder to see what a machine never calibrated
gets (the shipped default constants).

``--channels-first``: a LayerNorm and an RMSNorm written over dim 1 of ``[1, C, L]`` (ConvNeXt's
channels_first norm), whose suggestion moves x (``movedim``) to the fused call's last dim.

    python3 benchmarks/bench_estimate_sizes.py [--shapes 8x64,64x512,256x1024,1024x1024] [--families] [--channels-first]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.nn.functional as F

from neuronscope import profile_on_neuron
from neuronscope.capture.verify import measure


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    u = x.mean(-1, keepdim=True)
    s = (x - u).pow(2).mean(-1, keepdim=True)
    return w * ((x - u) / torch.sqrt(s + 1e-12)) + b


def layer_norm_channels_first(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ConvNeXt's channels_first LayerNorm: over dim 1 of [N, C, L], weight [C, 1]."""
    u = x.mean(1, keepdim=True)
    s = (x - u).pow(2).mean(1, keepdim=True)
    return w[:, None] * ((x - u) / torch.sqrt(s + 1e-6)) + b[:, None]


def rms_norm_channels_first(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6) * w[:, None]


def softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return F.silu(g) * u


VERIFIABLE = ("rms_norm", "gelu", "layer_norm", "softmax", "log_softmax", "silu_mul")


def _row(label: str, shape: str, h: Any, tally: list[int]) -> None:
    """Verify ``h``, print its row, and count it: [within 2x, gains, positive where a loss]."""
    v = measure(h)
    ratio = v.estimate_ratio
    if ratio is not None:
        tally[1] += 1
        tally[0] += 0.5 <= ratio <= 2.0
    tally[2] += v.slower and v.est_saving_us > 0
    rtext = f"{ratio:.2f}" if ratio is not None else "loss"
    print(f"{label:<11} {shape:<12} {h.pattern:<11} {v.est_saving_us:>9.1f} {v.verified_saving_us:>12.1f} {rtext:>6}", flush=True)


def families() -> list[int]:
    """bench_families.py's models, each forward's verifiable fusion hints verified."""
    import warnings

    from bench_families import FAMILIES

    warnings.filterwarnings("ignore")
    tally = [0, 0, 0]
    for name, (build, inputs) in FAMILIES.items():
        torch.manual_seed(0)
        try:
            model, kw = build(), inputs()
        except Exception as err:  # a family this transformers cannot build
            print(f"{name}: not built ({type(err).__name__})")
            continue
        f = profile_on_neuron(lambda model=model, kw=kw: model(**kw), export=False, print_summary=False, backend="cpu", warmup=1, active=1)
        with torch.no_grad():
            f()
            f()
        for h in f.last_result.hints:
            if h.kind == "fusion" and h.pattern in VERIFIABLE:
                _row(name, "x".join(map(str, h.details.get("shape") or [])), h, tally)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="8x64,64x512,256x1024,1024x1024")
    parser.add_argument("--families", action="store_true", help="bench_families.py's models instead of the shapes")
    parser.add_argument("--channels-first", action="store_true", help="norms over dim 1 of [1, C, L] instead (RxC: L=R)")
    args = parser.parse_args()
    logging.getLogger("neuronscope").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    from neuronscope.analysis import calibration

    kept = "kept calibration" if calibration.load("cpu") is not None else "no calibration kept: the shipped defaults"
    print(f"torch {torch.__version__}, 1 thread, {kept}, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.families:
        print(f"{'family':<11} {'shape':<12} {'pattern':<11} {'est us':>9} {'verified us':>12} {'ratio':>6}")
        within, gains, wrong = families()
        print(f"within 2x: {within} of the {gains} verify measured a gain for; positive estimate where verify measured a loss: {wrong}")
        return 0
    print(f"{'idiom':<11} {'shape':<12} {'pattern':<11} {'est us':>9} {'verified us':>12} {'ratio':>6}")
    tally = [0, 0, 0]
    for text in args.shapes.split(","):
        shape = tuple(int(d) for d in text.split("x"))
        x, u = torch.randn(*shape), torch.randn(*shape)
        w, b = torch.randn(shape[-1]), torch.randn(shape[-1])
        xc = torch.randn(1, shape[-1], shape[0])  # as many elements, normalized over dim 1
        channels_first: dict[str, Callable[[], Any]] = {
            "ln_chfirst": partial(layer_norm_channels_first, xc, w, b),
            "rms_chfirst": partial(rms_norm_channels_first, xc, w),
        }
        idioms: dict[str, Callable[[], Any]] = channels_first if args.channels_first else {
            "rms_norm": partial(rms, x, w),
            "gelu_tanh": partial(gelu_tanh, x),
            "gelu_erf": partial(gelu_erf, x),
            "layer_norm": partial(layer_norm, x, w, b),
            "softmax": partial(softmax, x),
            "swiglu": partial(swiglu, x, u),
        }
        for name, fn in idioms.items():
            f = profile_on_neuron(fn, export=False, backend="cpu", print_summary=False, warmup=1, active=1, name=name)
            f()
            f()
            for h in f.last_result.hints:
                if h.kind == "fusion" and h.pattern in VERIFIABLE:
                    _row(name, text, h, tally)
    within, gains, wrong = tally
    print(f"within 2x: {within} of the {gains} verify measured a gain for; positive estimate where verify measured a loss: {wrong}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
