"""Run under ``torchrun --nproc_per_node=2`` by tests/test_integrations.py: a Hugging Face
Trainer (DDP on gloo, CPU) fine-tunes a two-layer Llama built from its config, with
``ProfileCallback(steps=[2])``; each rank writes what its callback captured to OUT/rank<r>.json.

    torchrun --nproc_per_node=2 tests/integrations_dist_worker.py OUT
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import transformers

from neuronscope.integrations.transformers import ProfileCallback


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    callback = ProfileCallback(steps=[2], name="ddp_llama", output_dir=str(out / "runs"))
    with tempfile.TemporaryDirectory() as checkpoints:
        args = transformers.TrainingArguments(
            output_dir=checkpoints,
            max_steps=3,
            per_device_train_batch_size=4,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            ddp_backend="gloo",
        )
        trainer = transformers.Trainer(
            model=transformers.LlamaForCausalLM(config), args=args, train_dataset=Tokens(), callbacks=[callback]
        )
        trainer.train()
    rank = dist.get_rank() if dist.is_initialized() else -1
    record = {
        "rank": rank,
        "world": dist.get_world_size() if dist.is_initialized() else 1,
        "ddp": type(trainer.model_wrapped).__name__,
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
            for r in callback.results
        ],
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record, default=str))


if __name__ == "__main__":
    main()
