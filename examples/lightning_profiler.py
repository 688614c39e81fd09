"""Profile a Lightning training run with neuronscope: ``Trainer(profiler=NeuronscopeProfiler())``.

The module normalises with a hand-written RMSNorm, the idiom neuronscope's hints point at.

Run:  python examples/lightning_profiler.py [--dirpath DIR]
"""

from __future__ import annotations

import argparse
import tempfile

import lightning.pytorch as pl
import torch
from torch import nn

from neuronscope.integrations.lightning import NeuronscopeProfiler


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), RMSNorm(256), nn.SiLU(), nn.Linear(256, 10))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dirpath", default=None, help="run root (default: NEURONSCOPE_OUTPUT_DIR or ./neuronscope-runs)")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(512, 64), torch.randint(0, 10, (512,)))
    # The default schedule: skip batch 0, warm up on batch 1, capture batch 2.
    profiler = NeuronscopeProfiler(dirpath=args.dirpath, name="classifier")
    with tempfile.TemporaryDirectory() as logs:
        trainer = pl.Trainer(
            max_steps=6,
            profiler=profiler,
            accelerator="cpu",
            default_root_dir=logs,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=32))
    # Lightning logged the summary (each capture's tables) when fit ended; the hints again:
    (result,) = profiler.results
    for hint in result.hints:
        print(f"{hint.kind}:{hint.pattern}  {' -> '.join(hint.ops)}  saves ~{hint.est_saving_us:.0f} us: {hint.suggestion}")


if __name__ == "__main__":
    main()
