"""The study that motivated neuronscope: hand-written RMSNorm vs torch.rms_norm vs
torch.compile, side by side on whatever backend is present.

Run:  python examples/rms_norm_study.py [--output-dir DIR] [--no-compile] [--time-budget SECONDS]
"""

from __future__ import annotations

import argparse

import torch

import neuronscope


def rms_norm_naive(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def rms_norm_fused(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), weight, eps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--time-budget", type=float, default=10.0, help="seconds for the timing rounds")
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(8, 256, 1024)
    weight = torch.randn(1024)
    variants = {"naive": rms_norm_naive, "fused": rms_norm_fused}
    if not args.no_compile:
        variants["compiled"] = torch.compile(rms_norm_naive)
    cmp = neuronscope.compare(
        variants, x, weight, name="rms_norm_study", output_dir=args.output_dir, time_budget=args.time_budget
    )
    print(cmp.table())
    for row in cmp.rows[1:]:
        # "faster" / "slower" only when the interval of the speedup excludes 1.0; else "noise".
        print(f"{row.label}: {row.verdict}, {row.speedup_text(cmp.rows[0])} against {cmp.rows[0].label}")
    naive = cmp.results["naive"]
    for hint in naive.hints:
        print(hint.message)


if __name__ == "__main__":
    main()
