"""Real model code for the hint tests and benchmarks: tiny models nobody here wrote.

- Hugging Face transformers models built from config with random weights (nothing is
  downloaded): Llama, GPT-2, BERT, T5, Gemma, Phi, GPT-NeoX, each with two layers, hidden 64,
  and ``attn_implementation="eager"`` (the hand-written attention the hints are about).
- A nanoGPT-style GPT as Karpathy's nanoGPT writes it (model.py, MIT licence): causal
  self-attention with ``masked_fill``, ``nn.GELU``, ``F.layer_norm`` with an optional bias.
- A timm-style ViT block as timm's ``Attention`` / ``Mlp`` write it (Apache-2.0): the scale
  applied to q before the matmul. timm itself is not imported: it imports torchvision at top
  level (transforms, datasets, ops), whose public wheels do not load next to the CPU torch
  here, and a stand-in for all of that would be more test code than the block itself.
- A ResNet-style conv / batch-norm / ReLU block with a residual add (no torchvision):
  nothing to fuse by hand, so it must get no fusion hint.

Each :class:`Model` says which hints a capture of it must give, by ``kind:pattern``, and
nothing else.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

HIDDEN, LAYERS, HEADS, VOCAB, BATCH, SEQ = 64, 2, 4, 128, 2, 16


@dataclass
class Model:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict[str, torch.Tensor]]
    #: ``kind:pattern`` of every hint an inference forward must give.
    forward_hints: frozenset[str]
    #: The file the fusion hints must point into (a path fragment).
    source: str
    #: Loss from the model's output, for a training step (None: the output has ``.loss``).
    loss: Callable[[Any], torch.Tensor] | None = None


def _ids() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)}


def _lm_inputs() -> dict[str, torch.Tensor]:
    ids = _ids()["input_ids"]
    return {"input_ids": ids, "labels": ids}


def _t5_inputs() -> dict[str, torch.Tensor]:
    ids = _ids()["input_ids"]
    return {"input_ids": ids, "decoder_input_ids": ids, "labels": ids}


def _transformers(cls_name: str, cfg_name: str, **cfg: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        logging.getLogger("transformers").setLevel(logging.ERROR)
        torch.manual_seed(0)
        config = getattr(transformers, cfg_name)(attn_implementation="eager", **cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(transformers, cls_name)(config)

    return build


_DEC: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "intermediate_size": 2 * HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
}

# ---- nanoGPT (after karpathy/nanoGPT model.py) --------------------------------------------


class LayerNorm(nn.Module):
    """LayerNorm but with an optional bias (nanoGPT)."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias=True)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = LayerNorm(n_embd, bias=True)
        self.mlp = MLP(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class NanoGPT(nn.Module):
    def __init__(self, vocab: int = VOCAB, n_embd: int = HIDDEN, n_head: int = HEADS, n_layer: int = LAYERS, block_size: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = LayerNorm(n_embd, bias=True)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        t = input_ids.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if labels is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


# ---- a timm-style ViT block (after timm's Attention / Mlp / Block) ---------------------------


class TimmAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class TimmBlock(nn.Module):
    def __init__(self, dim: int = HIDDEN, num_heads: int = HEADS) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TimmAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class TimmViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(TimmBlock(), TimmBlock())
        self.head = nn.Linear(HIDDEN, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x).mean(1))


# ---- a ResNet-style block (conv / bn / relu, residual add) -------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class TinyResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 32, 1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def _image() -> dict[str, torch.Tensor]:
    return {"x": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))}


def _tokens() -> dict[str, torch.Tensor]:
    return {"x": torch.randn(2, 16, HIDDEN, generator=torch.Generator().manual_seed(0))}


def _mean_loss(out: Any) -> torch.Tensor:
    return out.float().pow(2).mean()


def _built(cls: type[nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return cls()

    return build


MODELS: dict[str, Model] = {
    m.name: m
    for m in [
        Model(
            "llama",
            _transformers("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2, **_DEC),
            _lm_inputs,
            frozenset({"fusion:rms_norm", "fusion:rotary_embedding", "fusion:attention", "fusion:silu_mul"}),
            "transformers/models/llama/",
        ),
        Model(
            "gpt2",
            _transformers("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=64),
            _lm_inputs,
            frozenset({"fusion:gelu", "fusion:attention"}),
            "transformers/models/gpt2/",
        ),
        Model(
            "bert",
            _transformers("BertForMaskedLM", "BertConfig", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * HIDDEN),
            _lm_inputs,
            frozenset({"fusion:attention"}),
            "transformers/models/bert/",
        ),
        Model(
            "t5",
            _transformers("T5ForConditionalGeneration", "T5Config", vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN, num_layers=LAYERS, num_heads=HEADS),
            _t5_inputs,
            frozenset({"fusion:rms_norm", "fusion:attention"}),
            "transformers/models/t5/",
        ),
        Model(
            "gemma",
            _transformers("GemmaForCausalLM", "GemmaConfig", num_key_value_heads=1, head_dim=16, **_DEC),
            _lm_inputs,
            frozenset({"fusion:rms_norm", "fusion:rotary_embedding", "fusion:attention", "fusion:silu_mul"}),
            "transformers/models/gemma/",
        ),
        Model(
            "phi",
            _transformers("PhiForCausalLM", "PhiConfig", **_DEC),
            _lm_inputs,
            frozenset({"fusion:gelu", "fusion:rotary_embedding", "fusion:attention"}),
            "transformers/models/phi/",
        ),
        Model(
            "qwen3",  # RMSNorm over the hidden size and, on q and k, over head_dim: two hints
            _transformers("Qwen3ForCausalLM", "Qwen3Config", num_key_value_heads=2, head_dim=32, **_DEC),
            _lm_inputs,
            frozenset({"fusion:rms_norm", "fusion:rotary_embedding", "fusion:attention", "fusion:silu_mul"}),
            "transformers/models/qwen3/",
        ),
        Model(
            "gpt_neox",
            _transformers("GPTNeoXForCausalLM", "GPTNeoXConfig", **_DEC),
            _lm_inputs,
            frozenset({"fusion:rotary_embedding", "fusion:attention"}),
            "transformers/models/gpt_neox/",
        ),
        Model("nanogpt", _built(NanoGPT), _lm_inputs, frozenset({"fusion:attention"}), "real_models.py", loss=lambda out: out),
        Model("timm_vit", _built(TimmViT), _tokens, frozenset({"fusion:attention"}), "real_models.py", loss=_mean_loss),
        Model("resnet", _built(TinyResNet), _image, frozenset(), "real_models.py", loss=_mean_loss),
    ]
}


def step_fn(model: Model, train: bool) -> Callable[[], Any]:
    """One inference forward (no grad, eval mode), or one training step with AdamW."""
    net = model.build()
    inputs = model.inputs()
    if not train:
        net.eval()
        if "labels" in inputs and model.loss is None:
            inputs = {k: v for k, v in inputs.items() if k != "labels"}
        if model.name == "nanogpt":
            inputs = {"input_ids": inputs["input_ids"]}

        def forward() -> Any:
            with torch.no_grad():
                return net(**inputs)

        return forward
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def train_step() -> Any:
        out = net(**inputs)
        loss = out.loss if model.loss is None else model.loss(out)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return train_step


def expected(model: Model, train: bool) -> frozenset[str]:
    """The hints a capture must give: the forward's, and in training AdamW's per-parameter
    update (torch.optim's default on CPU)."""
    return model.forward_hints | ({"optimizer:per_parameter_update"} if train else frozenset())
