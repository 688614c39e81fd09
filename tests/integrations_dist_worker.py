"""Run under ``torchrun --nproc_per_node=2`` by tests/test_integrations.py, DDP on gloo (CPU):

- ``hf``: a Hugging Face Trainer fine-tunes a two-layer Llama built from its config, with
  ``ProfileCallback(steps=[2])``;
- ``lightning``: a Lightning Trainer (``strategy="ddp"``, ``devices=2``) fits a small module with
  ``NeuronscopeProfiler()`` (its default schedule captures batch 2).

Each rank writes what was captured to OUT/rank<r>.json.

    torchrun --nproc_per_node=2 tests/integrations_dist_worker.py hf|lightning OUT
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tiny_trainer import Tokens, cpu_args, tiny_llama

from neuronscope.result.types import ProfileResult


def hf(out: Path) -> tuple[str, list[ProfileResult]]:
    import transformers

    from neuronscope.integrations.transformers import ProfileCallback

    callback = ProfileCallback(steps=[2], name="ddp_llama", output_dir=str(out / "runs"))
    with tempfile.TemporaryDirectory() as checkpoints:
        args = cpu_args(checkpoints, max_steps=3, ddp_backend="gloo")
        trainer = transformers.Trainer(model=tiny_llama(), args=args, train_dataset=Tokens(), callbacks=[callback])
        trainer.train()
    return type(trainer.model_wrapped).__name__, callback.results


def lightning(out: Path) -> tuple[str, list[ProfileResult]]:
    import lightning.pytorch as pl
    from torch import nn

    from neuronscope.integrations.lightning import NeuronscopeProfiler

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(16, 4)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    profiler = NeuronscopeProfiler(dirpath=out / "runs", name="ddp_lightning")
    trainer = pl.Trainer(
        max_steps=4,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        profiler=profiler,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(out / "pl"),
    )
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=8))
    return type(trainer.strategy).__name__, profiler.results


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    wrapper, results = {"hf": hf, "lightning": lightning}[mode](out)
    rank = dist.get_rank() if dist.is_initialized() else -1
    record: dict[str, Any] = {
        "rank": rank,
        "world": dist.get_world_size() if dist.is_initialized() else 1,
        "ddp": wrapper,
        "results": [
            {
                "name": r.name,
                "status": r.status,
                "rank": r.rank,
                "world_size": r.world_size,
                "ranks": r.ranks,
                "run_dir": r.run_dir,
                "regions": sorted(r.regions),
                "allreduce": any("allreduce" in op.name.lower() for op in r.ops),
            }
            for r in results
        ],
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record, default=str))
    # As torch's docs ask of every job: without it, gloo's worker threads can outlive the
    # interpreter and abort the process at exit ("terminate called without an active
    # exception", SIGABRT; pytorch/pytorch#179291), about one run in a few dozen here.
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
