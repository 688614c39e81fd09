"""Capture one optimizer step of a Hugging Face Trainer fine-tuning a small Llama.

The model is built from its config with random weights and trained on random tokens, so nothing
is downloaded; with a real checkpoint, only the model and the dataset lines change.

Run:  python examples/hf_trainer_profile.py [--output-dir DIR] [--step N]
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from neuronscope.integrations.transformers import ProfileCallback


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Causal-LM samples of random token ids (the labels are the inputs, as for pre-training)."""

    def __init__(self, vocab: int, length: int = 32, size: int = 256) -> None:
        self.vocab, self.length, self.size = vocab, length, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, self.vocab, (self.length,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default=None, help="neuronscope's run root (default: NEURONSCOPE_OUTPUT_DIR)")
    parser.add_argument("--step", type=int, default=3, help="the optimizer step to capture (from 1)")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(config)
    options = {} if args.output_dir is None else {"output_dir": args.output_dir}
    callback = ProfileCallback(steps=[args.step], name="llama_finetune", **options)
    with tempfile.TemporaryDirectory() as checkpoints:
        training = TrainingArguments(
            output_dir=checkpoints,
            max_steps=args.step + 1,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,  # two forward/backward passes per optimizer step
            learning_rate=1e-4,
            max_grad_norm=1.0,
            use_cpu=not torch.cuda.is_available(),
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        Trainer(model=model, args=training, train_dataset=RandomTokens(config.vocab_size), callbacks=[callback]).train()

    (result,) = callback.results
    print(result.table(row_limit=10))
    for name in ("forward", "backward", "optimizer"):
        region = result.regions[name]
        print(f"{name:>10}: {region.calls} call(s), {region.time_us / 1e3:.3f} ms, {len(region.ops)} distinct ops")


if __name__ == "__main__":
    main()
