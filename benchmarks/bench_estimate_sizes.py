"""Estimated savings against hint.verify() on hand-written idioms at several sizes.

The real models of bench_real_models.py are tiny (hidden 64); this checks that the cost model
(neuronscope/analysis/cost.py) holds at other sizes too: RMSNorm (with casts), the tanh and erf
GELU, a BERT-style LayerNorm, softmax and SwiGLU, each written out by hand, captured as a
decorated function with the default options, and each hint verified. Prints the estimate, the
verified saving, their ratio, and how many are within 2x (one torch thread).

    python3 benchmarks/bench_estimate_sizes.py [--shapes 8x64,64x512,256x1024,1024x1024]
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


def softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return F.silu(g) * u


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="8x64,64x512,256x1024,1024x1024")
    args = parser.parse_args()
    logging.getLogger("neuronscope").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(f"{'idiom':<11} {'shape':<12} {'pattern':<11} {'est us':>9} {'verified us':>12} {'ratio':>6}")
    within = gains = wrong = 0
    for text in args.shapes.split(","):
        shape = tuple(int(d) for d in text.split("x"))
        x, u = torch.randn(*shape), torch.randn(*shape)
        w, b = torch.randn(shape[-1]), torch.randn(shape[-1])
        idioms: dict[str, Callable[[], Any]] = {
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
                if h.kind != "fusion" or h.pattern not in ("rms_norm", "gelu", "layer_norm", "softmax", "silu_mul"):
                    continue
                v = measure(h)
                ratio = v.estimate_ratio
                if ratio is not None:
                    gains += 1
                    within += 0.5 <= ratio <= 2.0
                wrong += v.slower and v.est_saving_us > 0
                rtext = f"{ratio:.2f}" if ratio is not None else "loss"
                print(f"{name:<11} {text:<12} {h.pattern:<11} {v.est_saving_us:>9.1f} {v.verified_saving_us:>12.1f} {rtext:>6}", flush=True)
    print(f"within 2x: {within} of the {gains} verify measured a gain for; positive estimate where verify measured a loss: {wrong}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
