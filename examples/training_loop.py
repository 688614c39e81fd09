"""Wrap the blocks of a short training loop (forward, backward, optimizer step) in regions.

Run:  python examples/training_loop.py [--output-dir DIR]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from neuronscope import neuron_region


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(64, 128)
    target = torch.randint(0, 10, (64,))
    step_result = None
    for _ in range(args.steps):
        # Steps 1-2 warm up, step 3 is captured, the rest run uncaptured.
        with neuron_region("train_step", warmup=2, active=1, output_dir=args.output_dir) as step:
            with neuron_region("forward"):
                loss = nn.functional.cross_entropy(model(data), target)
            with neuron_region("backward"):
                loss.backward()
            with neuron_region("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
        step_result = step.result or step_result
    assert step_result is not None
    print(step_result.table(row_limit=10))
    for name in ("forward", "backward", "optimizer"):
        region = step_result.regions[name]
        print(f"{name:>10}: {region.time_us / 1e3:.3f} ms, {len(region.ops)} distinct ops")


if __name__ == "__main__":
    main()
