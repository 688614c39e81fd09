"""What the Hugging Face Trainer integration tests, their torchrun worker
(tests/integrations_dist_worker.py) and benchmarks/bench_integrations.py train: a two-layer
Llama built from config (nothing downloaded), a dataset of fixed random token rows, and
TrainingArguments for a quiet CPU run (no reports, checkpoints, logs or progress bars)."""

from __future__ import annotations

from typing import Any

import torch


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``length`` rows of 16 token ids below 128, row ``i`` always the same; labels = ids."""

    def __init__(self, length: int = 64) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def tiny_llama() -> torch.nn.Module:
    """A two-layer Llama (hidden 32, vocabulary 128), seeded weights."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config)


def cpu_args(output_dir: str, max_steps: int, **extra: Any) -> Any:
    """TrainingArguments for ``max_steps`` steps of 4 rows on the CPU, nothing reported or
    saved; ``extra`` adds or overrides arguments."""
    import transformers

    options: dict[str, Any] = {
        "output_dir": output_dir,
        "max_steps": max_steps,
        "per_device_train_batch_size": 4,
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
    }
    return transformers.TrainingArguments(**{**options, **extra})
