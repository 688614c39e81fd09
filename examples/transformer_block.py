"""Decorate a small transformer block's forward and see where its time goes.

Run:  python examples/transformer_block.py
(runs go to ./neuronscope-runs, or to $NEURONSCOPE_OUTPUT_DIR)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from neuronscope import profile_on_neuron


class RMSNorm(nn.Module):
    """The hand-written RMSNorm found in many model files."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class Block(nn.Module):
    """Pre-norm attention + SwiGLU MLP, written out by hand."""

    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = RMSNorm(dim)
        self.gate = nn.Linear(dim, 2 * dim, bias=False)
        self.up = nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    @profile_on_neuron(warmup=1, active=1)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def main() -> None:
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(4, 64, 256)
    with torch.no_grad():
        for _ in range(5):  # the first call warms up, the second is captured, the rest run free
            block(x)
    result = Block.forward.last_result  # type: ignore[attr-defined]
    print(result.table(row_limit=10))


if __name__ == "__main__":
    main()
