"""Hints on model families the test suite does not hold, and whether they repeat.

Each family is built from its config with random weights (nothing is downloaded), two layers,
hidden 64, eager attention; its inference forward is decorated with the default options and
called ``--captures`` + 1 times (the first is the observed warm-up). Printed per family: the
hints of the first capture (pattern, calls, the suggestion's start, GLU activation), and how
many captures gave the same hints (pattern, ops, suggestion) as the first.

    python3 benchmarks/bench_families.py [--families deberta_v2,bloom] [--captures 10]
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

from neuronscope import profile_on_neuron

_TEXT = {"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
_VISION = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "image_size": 32, "patch_size": 8}


def _hf(cls: str, cfg: str, **kw: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        config = getattr(transformers, cfg)(**kw)
        config._attn_implementation = "eager"
        return getattr(transformers, cls)(config).eval()

    return build


def _ids() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))}


def _pixels() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))}


FAMILIES: dict[str, tuple[Callable[[], nn.Module], Callable[[], dict[str, torch.Tensor]]]] = {
    "mistral": (_hf("MistralModel", "MistralConfig", num_key_value_heads=2, **_TEXT), _ids),
    "deberta_v2": (_hf("DebertaV2Model", "DebertaV2Config", **_TEXT), _ids),
    "bloom": (_hf("BloomModel", "BloomConfig", vocab_size=128, hidden_size=64, n_layer=2, n_head=4), _ids),
    "opt": (_hf("OPTModel", "OPTConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64), _ids),
    "falcon": (_hf("FalconModel", "FalconConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4), _ids),
    "dinov2": (_hf("Dinov2Model", "Dinov2Config", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8), _pixels),
    "siglip_vision": (_hf("SiglipVisionModel", "SiglipVisionConfig", **_VISION), _pixels),
    "convnextv2": (_hf("ConvNextV2Model", "ConvNextV2Config", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, image_size=32), _pixels),
}


def _key(result: Any) -> frozenset[tuple[str, tuple[str, ...], str]]:
    return frozenset((h.pattern, tuple(h.ops), h.suggestion) for h in result.hints)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--captures", type=int, default=10)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    for name in [f for f in args.families.split(",") if f]:
        build, inputs = FAMILIES[name]
        torch.manual_seed(0)
        try:
            model, kw = build(), inputs()
        except Exception as err:  # a family this transformers cannot build
            print(f"{name}: not built ({type(err).__name__}: {str(err)[:80]})")
            continue
        f = profile_on_neuron(lambda model=model, kw=kw: model(**kw), export=False, print_summary=False, backend="cpu", warmup=1, active=args.captures)
        with torch.no_grad():
            for _ in range(args.captures + 1):
                f()
        first = f.results[0]
        same = sum(_key(r) == _key(first) for r in f.results)
        for h in first.hints:
            act = h.details.get("activation")
            print(f"{name:<14} {h.kind}:{h.pattern:<22} calls {h.calls:>3}  {h.suggestion[:90]}{'  [' + act + ']' if act else ''}")
        if not first.hints:
            print(f"{name:<14} (no hint)")
        print(f"{name:<14} same hints in {same} of {len(f.results)} captures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
