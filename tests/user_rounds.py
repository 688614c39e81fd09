"""What the newcomer rounds' test files (test_user_u38.py, test_user_u39.py) share: picking a
pattern's hints, applying a suggestion's own text, and small transformers configs."""

from __future__ import annotations

import re
from typing import Any

import torch

from neuronscope.result.hint import Hint


def of(hints: list[Hint], pattern: str) -> list[Hint]:
    return [h for h in hints if h.kind == "fusion" and h.pattern == pattern]


def call_in(text: str, fn: str) -> str:
    """The one ``torch.nn.functional.<fn>(...)`` call a suggestion names, with a method called
    on its output (sdpa's ``.transpose(-3, -2)`` back to the code's layout)."""
    (call,) = re.findall(rf"torch\.nn\.functional\.{fn}\((?:[^()]|\([^()]*\))*\)(?:\.\w+\([^()]*\))?", text)
    return call


def apply(call: str, **names: Any) -> torch.Tensor:
    return eval(call, {"torch": torch}, names)  # our own suggestion text


def eager(cfg: Any) -> Any:
    cfg._attn_implementation = "eager"
    return cfg


COMMON = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64,
}  # fmt: skip
