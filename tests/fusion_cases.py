"""The fusion case suite: each idiom in the spellings real model code uses, and negatives.

Each :class:`Case` is a snippet that runs on CPU with small shapes, and what a capture of it
must yield: ``expect`` maps a pattern to the number of calls its hint must have (one hint per
pattern here), ``absent`` lists patterns that must not appear. The spellings follow well-known
model code (HF Llama / T5 / Gemma / BERT / GPT-2 / GPT-J, the Annotated Transformer, CLIP).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neuronscope.analysis.opgraph import OpGraph, OpNode
from neuronscope.result.hint import Hint

torch.manual_seed(0)

HIDDEN = 64
BATCH, SEQ, HEADS, HEAD_DIM = 2, 8, 4, 16


@dataclass
class Case:
    name: str
    run: Callable[[], object]
    expect: dict[str, int] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
    #: the snippet's function, for checking that a hint's location points into it
    where: Callable[..., object] | None = None


def _x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


# ---- rms_norm ----------------------------------------------------------------------------------


class LlamaRMSNorm(nn.Module):
    """As in transformers' modeling_llama.py."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class T5LayerNorm(nn.Module):
    """As in transformers' modeling_t5.py (an RMSNorm despite the name)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class GemmaRMSNorm(nn.Module):
    """As in transformers' modeling_gemma.py: float compute, ``(1 + weight)``."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class LayerNorm2d(nn.Module):
    """ConvNeXt's channels_first LayerNorm (facebookresearch/ConvNeXt) / Segment Anything's
    LayerNorm2d, by hand over dim 1 of ``[N, C, H, W]``, eps 1e-6."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(channels)), nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + 1e-6)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def rms_square_sqrt(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x*x`` and ``x / sqrt(...)``."""
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def rms_reciprocal(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``x ** 2`` and ``1 / sqrt``, no weight."""
    return x * (1.0 / torch.sqrt(torch.mean(x**2, dim=-1, keepdim=True) + eps))


def rms_from_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The RMS from a vector norm scaled by ``d ** -0.5`` (as in some lucidrains models)."""
    norm = x.norm(2, dim=-1, keepdim=True) * (x.shape[-1] ** -0.5)
    return x / (norm + eps) * w


# ---- layer_norm --------------------------------------------------------------------------------


class BertLayerNormTF(nn.Module):
    """The TF-style LayerNorm of the original BERT port (epsilon inside the sqrt)."""

    def __init__(self, hidden_size: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.weight * x + self.bias


class AnnotatedLayerNorm(nn.Module):
    """The Annotated Transformer's LayerNorm: ``std`` and ``a_2 * (x - mean) / (std + eps)``."""

    def __init__(self, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def ln_var_rsqrt(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * w + b


def ln_var_mean(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def centred_over_variance(x: torch.Tensor) -> torch.Tensor:
    """Divided by the variance, not its root: no LayerNorm."""
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) ** 2 + 1e-5)


def centred_over_fourth_root(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5))


def centred_over_scaled_variance(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(2 * x.var(-1, keepdim=True, unbiased=False) + 1e-5)


# ---- softmax -----------------------------------------------------------------------------------


def softmax_max(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def log_softmax_shifted(x: torch.Tensor) -> torch.Tensor:
    z = x - x.amax(-1, keepdim=True)
    return z - torch.log(torch.exp(z).sum(-1, keepdim=True))


def softmax_amax(x: torch.Tensor) -> torch.Tensor:
    z = x - x.amax(-1, keepdim=True)
    return torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)


def softmax_naive(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x) / torch.sum(torch.exp(x), dim=-1, keepdim=True)


def softmax_over_dim1(x: torch.Tensor) -> torch.Tensor:
    """Pooling weights over the sequence (dim 1), not the last dim."""
    e = torch.exp(x - x.amax(1, keepdim=True))
    return e / e.sum(1, keepdim=True)


def exp_over_two_dims(x: torch.Tensor) -> torch.Tensor:
    """exp(x) over its sum across two dims: no softmax (torch.softmax takes one dim)."""
    e = torch.exp(x)
    return e / e.sum((1, 2), keepdim=True)


def exp_over_transposed_sum(x: torch.Tensor) -> torch.Tensor:
    """Columns' sums, transposed into a column: no softmax over any one dim."""
    e = torch.exp(x)
    return e / e.sum(-2, keepdim=True).transpose(-1, -2)


def exp_times_reciprocal_over_two_dims(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x)
    return e * e.sum((2, 3), keepdim=True).reciprocal()


# ---- gelu --------------------------------------------------------------------------------------


def gelu_gpt2(x: torch.Tensor) -> torch.Tensor:
    """NewGELUActivation (GPT-2, BERT's gelu_new)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """The original BERT gelu."""
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_fast(x: torch.Tensor) -> torch.Tensor:
    """FastGELUActivation."""
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def silu_as_tanh(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) written through tanh: SiLU, GELU's shape with a linear argument."""
    return x * 0.5 * (1.0 + torch.tanh(x / 2.0))


def erf_of_half(x: torch.Tensor) -> torch.Tensor:
    """GELU's erf shape with 0.5 where GELU has 1/sqrt(2): another function."""
    return 0.5 * x * (1.0 + torch.erf(x * 0.5))


#: GELU's shape with other numbers: told apart only where the user's numbers were recorded.
NEAR_GELUS_BY_NUMBERS = {
    "erf_over_2": lambda x: x * 0.5 * (1.0 + torch.erf(x / 2.0)),
    "erf_times_2": lambda x: x * 0.5 * (1.0 + torch.erf(x * 2.0)),
    "tanh_no_constants": lambda x: 0.5 * x * (1.0 + torch.tanh(x + x**3)),
    "tanh_half_scale": lambda x: 0.5 * x * (1.0 + torch.tanh(0.5 * (x + 0.044715 * x**3))),
    "two_plus_erf": lambda x: x * 0.5 * (2.0 + torch.erf(x / math.sqrt(2.0))),
}


#: GELU in spellings whose numbers are GELU's however written (a square in the cubic term, a
#: numpy or tensor constant, sqrt(pi / 2) divided by): GELU hints.
GELUS_BY_OTHER_NUMBERS = {
    "cubic_as_square": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * x * (1 + 0.044715 * x**2))),
    "numpy_constant": lambda x: 0.5 * x * (1 + torch.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "tensor_constant": lambda x: 0.5 * x * (1 + torch.tanh(torch.tensor(0.7978845608) * (x + 0.044715 * x**3))),
    "divided_by_root": lambda x: 0.5 * x * (1 + torch.tanh((x + 0.044715 * x**3) / math.sqrt(math.pi / 2))),
}


def gelu_without_half(x: torch.Tensor) -> torch.Tensor:
    """Twice a GELU: no halving anywhere."""
    return x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def tanh_of_cube(x: torch.Tensor) -> torch.Tensor:
    """No linear term under tanh."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * x**3))


def tanh_minus_cube(x: torch.Tensor) -> torch.Tensor:
    """The cubic term subtracted."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x - 0.044715 * x**3)))


class GPT2MLP(nn.Module):
    """fc -> hand-written gelu -> proj, a gelu between two matmuls."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(gelu_gpt2(self.c_fc(x)))


# ---- silu_mul ----------------------------------------------------------------------------------


class LlamaMLP(nn.Module):
    """As in transformers' modeling_llama.py."""

    def __init__(self, d: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, inter, bias=False)
        self.up_proj = nn.Linear(d, inter, bias=False)
        self.down_proj = nn.Linear(inter, d, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def swiglu_sigmoid(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor) -> torch.Tensor:
    a = x @ wg
    return a * torch.sigmoid(a) * (x @ wu)


def swiglu_chunk(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    gate, up = (x @ w).chunk(2, dim=-1)
    return F.silu(gate) * up


# ---- attention ---------------------------------------------------------------------------------


def attention_masked_fill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The Annotated Transformer's ``attention``."""
    d_k = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, v)


def attention_hf_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
    """transformers' ``eager_attention_forward``: additive mask, float32 softmax, dropout."""
    scaling = q.shape[-1] ** -0.5
    attn_weights = torch.matmul(q, k.transpose(2, 3)) * scaling
    attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
    attn_weights = F.dropout(attn_weights, p=0.0, training=False)
    return torch.matmul(attn_weights, v)


def attention_einsum(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)


def attention_manual_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    s = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return torch.bmm(e / e.sum(-1, keepdim=True), v)


# ---- rotary ------------------------------------------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """As in transformers' modeling_llama.py."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """As in transformers' modeling_gptj.py."""
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def rope_gptj(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    return (x * cos) + (rotate_every_two(x) * sin)


# ---- elementwise chains -----------------------------------------------------------------------


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """CLIP's QuickGELU: not the gelu formula, but three dependent elementwise ops."""
    return x * torch.sigmoid(1.702 * x)


def softcap(logits: torch.Tensor, cap: float = 30.0) -> torch.Tensor:
    """Gemma 2's logit soft-capping."""
    logits = logits / cap
    logits = torch.tanh(logits)
    return logits * cap


# ---- negatives ---------------------------------------------------------------------------------


def unrelated_adjacent(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, e: torch.Tensor) -> list[torch.Tensor]:
    """RMSNorm's op names in RMSNorm's order, each on a different tensor."""
    return [a.pow(2), b.mean(-1, keepdim=True), c + 1e-6, torch.rsqrt(d), e * b]


def unrelated_consumed(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Three elementwise ops on three tensors, one after another, their results used later."""
    ea, sb, cc = a.exp(), b.sin(), c.cos()
    return torch.stack((ea, sb, cc))


def normalise_by_other(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x scaled by y's RMS: RMSNorm's shape of ops, but not an RMSNorm of anything."""
    return x * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)


def fused_rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), w, 1e-6)


def _compiled_rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + 1e-6))


# ---- a whole model ------------------------------------------------------------------------------


class TinyLlamaLayer(nn.Module):
    """A Llama decoder layer in the eager spelling: RMSNorm, rotary, eager attention, SwiGLU."""

    def __init__(self, d: int = HIDDEN, heads: int = HEADS) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.input_layernorm = LlamaRMSNorm(d)
        self.post_attention_layernorm = LlamaRMSNorm(d)
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.mlp = LlamaMLP(d, 2 * d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        residual = x
        h = self.input_layernorm(x)
        shape = (b, s, self.heads, self.head_dim)
        q = self.q_proj(h).view(shape).transpose(1, 2)
        k = self.k_proj(h).view(shape).transpose(1, 2)
        v = self.v_proj(h).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        attn = attention_hf_eager(q, k, v, mask)
        h = residual + self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))
        return h + self.mlp(self.post_attention_layernorm(h))


class TinyLlama(nn.Module):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TinyLlamaLayer() for _ in range(layers))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return x


def tiny_llama_case(layers: int = 4) -> Case:
    """Every layer repeats the same idioms: one hint per idiom, with calls = occurrences."""
    model = TinyLlama(layers)
    x = _x(BATCH, SEQ, HIDDEN)
    cos, sin = _x(SEQ, HEAD_DIM), _x(SEQ, HEAD_DIM)
    mask = torch.zeros(SEQ, SEQ).masked_fill(torch.ones(SEQ, SEQ).tril() == 0, float("-inf"))
    return Case(
        "tiny_llama",
        _bound(model, x, cos, sin, mask),
        {"rms_norm": 2 * layers, "rotary_embedding": 2 * layers, "attention": layers, "silu_mul": layers},
        frozenset({"softmax", "elementwise_chain"}),
    )


# ---- the suite ----------------------------------------------------------------------------------


def _bound(fn: Callable[..., object], *args: object) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return fn(*args)

    return run


def cases() -> list[Case]:
    """Build the suite (inputs and modules are made here, outside any capture)."""
    h = HIDDEN
    x = _x(BATCH, SEQ, h)
    xb = x.to(torch.bfloat16)
    w, b = torch.randn(h), torch.randn(h)
    q, k, v = (_x(BATCH, HEADS, SEQ, HEAD_DIM) for _ in range(3))
    mask = torch.ones(SEQ, SEQ).tril()
    causal = torch.zeros(SEQ, SEQ).masked_fill(mask == 0, float("-inf"))
    cos, sin = _x(SEQ, HEAD_DIM), _x(SEQ, HEAD_DIM)
    q3, k3, v3 = (_x(BATCH * HEADS, SEQ, HEAD_DIM) for _ in range(3))
    wg, wu = torch.randn(h, 2 * h), torch.randn(h, 2 * h)
    big = torch.randn(256, 256)

    llama_norm, t5_norm, gemma_norm = LlamaRMSNorm(h), T5LayerNorm(h), GemmaRMSNorm(h)
    bert_ln, annotated_ln = BertLayerNormTF(h), AnnotatedLayerNorm(h)
    gpt2_mlp, llama_mlp = GPT2MLP(h), LlamaMLP(h, 2 * h)
    linear = nn.Linear(h, h)
    torch_ln, torch_gelu_mlp = nn.LayerNorm(h), nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))

    rms_ = "rms_norm"
    ln_ = "layer_norm"
    return [
        # rms_norm
        Case("rms_llama_bf16", _bound(llama_norm, xb), {rms_: 1}, where=LlamaRMSNorm.forward),
        Case("rms_llama_fp32", _bound(llama_norm, x), {rms_: 1}, where=LlamaRMSNorm.forward),
        Case("rms_t5", _bound(t5_norm, x), {rms_: 1}, where=T5LayerNorm.forward),
        Case("rms_gemma", _bound(gemma_norm, xb), {rms_: 1}, where=GemmaRMSNorm._norm),
        Case("rms_square_sqrt", _bound(rms_square_sqrt, x, w), {rms_: 1}, where=rms_square_sqrt),
        Case("rms_reciprocal", _bound(rms_reciprocal, x), {rms_: 1}, where=rms_reciprocal),
        Case("rms_from_norm", _bound(rms_from_norm, x, w), {rms_: 1}, where=rms_from_norm),
        # layer_norm
        Case("ln_bert_tf", _bound(bert_ln, x), {ln_: 1}, where=BertLayerNormTF.forward),
        Case("ln_annotated_std", _bound(annotated_ln, x), {ln_: 1}, where=AnnotatedLayerNorm.forward),
        Case("ln_var_rsqrt", _bound(ln_var_rsqrt, x, w, b), {ln_: 1}, where=ln_var_rsqrt),
        Case("ln_var_mean", _bound(ln_var_mean, x, w, b), {ln_: 1}, where=ln_var_mean),
        Case("neg_centred_over_variance", _bound(centred_over_variance, x), absent=frozenset({ln_})),
        Case("neg_centred_over_fourth_root", _bound(centred_over_fourth_root, x), absent=frozenset({ln_})),
        Case("neg_centred_over_scaled_variance", _bound(centred_over_scaled_variance, x), absent=frozenset({ln_})),
        # softmax
        Case("softmax_max", _bound(softmax_max, q), {"softmax": 1}, where=softmax_max),
        Case("softmax_amax", _bound(softmax_amax, q), {"softmax": 1}, where=softmax_amax),
        Case("log_softmax_shifted", _bound(log_softmax_shifted, q), {"log_softmax": 1}, absent=frozenset({"softmax"}), where=log_softmax_shifted),
        Case("neg_fused_log_softmax", _bound(torch.log_softmax, q, -1), absent=frozenset({"log_softmax"})),
        Case("softmax_naive", _bound(softmax_naive, q), {"softmax": 1}, where=softmax_naive),
        Case("softmax_over_dim1", _bound(softmax_over_dim1, q), {"softmax": 1}, where=softmax_over_dim1),
        Case("neg_exp_over_two_dims", _bound(exp_over_two_dims, q), absent=frozenset({"softmax"})),
        Case("neg_exp_over_transposed_sum", _bound(exp_over_transposed_sum, _x(BATCH, HEADS, SEQ, SEQ)), absent=frozenset({"softmax"})),
        Case("neg_reciprocal_over_two_dims", _bound(exp_times_reciprocal_over_two_dims, q), absent=frozenset({"softmax"})),
        # gelu
        Case("gelu_gpt2_tanh", _bound(gelu_gpt2, x), {"gelu": 1}, where=gelu_gpt2),
        Case("gelu_bert_erf", _bound(gelu_erf, x), {"gelu": 1}, where=gelu_erf),
        Case("gelu_fast", _bound(gelu_fast, x), {"gelu": 1}, where=gelu_fast),
        Case("gelu_in_mlp", _bound(gpt2_mlp, x), {"gelu": 1}, where=gelu_gpt2),
        # silu_mul
        Case("swiglu_llama_mlp", _bound(llama_mlp, x), {"silu_mul": 1}, where=LlamaMLP.forward),
        Case("swiglu_sigmoid", _bound(swiglu_sigmoid, x, wg, wu), {"silu_mul": 1}, where=swiglu_sigmoid),
        Case("swiglu_chunk", _bound(swiglu_chunk, x, torch.randn(h, 4 * h)), {"silu_mul": 1}, where=swiglu_chunk),
        # attention
        Case("attn_masked_fill", _bound(attention_masked_fill, q, k, v, mask), {"attention": 1},
             frozenset({"softmax"}), where=attention_masked_fill),
        Case("attn_hf_eager", _bound(attention_hf_eager, q, k, v, causal), {"attention": 1},
             frozenset({"softmax"}), where=attention_hf_eager),
        Case("attn_einsum", _bound(attention_einsum, q, k, v), {"attention": 1}, where=attention_einsum),
        Case("attn_manual_softmax", _bound(attention_manual_softmax, q3, k3, v3), {"attention": 1},
             frozenset({"softmax"}), where=attention_manual_softmax),
        # rotary
        Case("rope_llama_q_and_k", _bound(apply_rotary_pos_emb, q, k, cos, sin), {"rotary_embedding": 2},
             where=apply_rotary_pos_emb),
        Case("rope_gptj_interleaved", _bound(rope_gptj, q, sin.repeat_interleave(2, -1)[..., :HEAD_DIM],
                                             cos.repeat_interleave(2, -1)[..., :HEAD_DIM]),
             {"rotary_embedding": 1}, where=rope_gptj),
        # elementwise chains
        Case("chain_quick_gelu", _bound(quick_gelu, x), {"elementwise_chain": 1}, frozenset({"gelu"}), where=quick_gelu),
        Case("chain_softcap", _bound(softcap, x), {"elementwise_chain": 1}, where=softcap),
        Case("chain_silu_as_tanh", _bound(silu_as_tanh, x), {"elementwise_chain": 1}, frozenset({"gelu"}), where=silu_as_tanh),
        Case("neg_gelu_without_half", _bound(gelu_without_half, x), absent=frozenset({"gelu"})),
        Case("neg_tanh_of_cube", _bound(tanh_of_cube, x), absent=frozenset({"gelu"})),
        Case("neg_tanh_minus_cube", _bound(tanh_minus_cube, x), absent=frozenset({"gelu"})),
        # negatives: fused APIs, unrelated ops, compiled code, plain layers
        Case("neg_torch_rms_norm", _bound(fused_rms, x, w)),
        Case("neg_F_layer_norm", _bound(torch_ln, x)),
        Case("neg_F_softmax", _bound(F.softmax, q, -1)),
        Case("neg_F_gelu_tanh", _bound(lambda t: F.gelu(t, approximate="tanh"), x)),
        Case("neg_gelu_module_mlp", _bound(torch_gelu_mlp, x)),
        Case("neg_sdpa", _bound(F.scaled_dot_product_attention, q, k, v)),
        Case("neg_unrelated_adjacent", _bound(unrelated_adjacent, _x(4, h), _x(4, h), _x(4, 1), _x(4, 1), _x(4, h))),
        Case("neg_normalise_by_other", _bound(normalise_by_other, x, _x(BATCH, SEQ, h)), absent=frozenset({rms_})),
        Case("neg_single_matmul", _bound(torch.matmul, big, big)),
        Case("neg_linear_relu", _bound(lambda t: F.relu(linear(t)), x)),
        Case("neg_silu_alone", _bound(F.silu, x)),
        Case("neg_unrelated_consumed", _bound(unrelated_consumed, _x(4, h), _x(4, h), _x(4, h))),
    ]


def compiled_case() -> Case:
    """A torch.compile'd RMSNorm: already fused, no hint (compiles once, a few seconds)."""
    fn = torch.compile(_compiled_rms)
    x, w = _x(4, HIDDEN), torch.randn(HIDDEN)
    fn(x, w)  # compile outside the capture
    return Case("neg_torch_compile", _bound(fn, x, w))


# ---- estimate vs verified saving (run in a subprocess, see test_fusion) ----------------------


def calibration(attempts: int = 4, calls: int = 9) -> dict[str, list[dict[str, float]]]:
    """Capture a hand-written RMSNorm and LayerNorm at 256x1024 float32, take the fusion hint,
    and verify it; up to ``attempts`` times per pattern, stopping at the first estimate within
    a factor of two of the verified saving. Returns the numbers of every attempt."""
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.capture.verify import measure
    from neuronscope.drive.pipeline import from_profiler

    x = torch.randn(256, 1024)
    modules = {"rms_norm": LlamaRMSNorm(1024), "layer_norm": BertLayerNormTF(1024)}
    out: dict[str, list[dict[str, float]]] = {}
    for pattern, module in modules.items():
        tries = out[pattern] = []
        for _ in range(attempts):
            with torch.no_grad():
                for _ in range(3):
                    module(x)
                with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                    for _ in range(calls):
                        module(x)
            hint = next(h for h in from_profiler(prof).hints if h.pattern == pattern)
            v = measure(hint)
            tries.append(
                {
                    "calls": hint.calls,
                    "time_us": hint.time_us,
                    "est_saving_us": hint.est_saving_us,
                    "verified_saving_us": v.verified_saving_us,
                    "chain_us": v.chain_us,
                    "replacement_us": v.replacement_us or 0.0,
                    "compiled_us": v.compiled_us or 0.0,
                }
            )
            ratio = v.estimate_ratio
            if ratio is not None and 0.5 <= ratio <= 2.0:
                break
    return out


if __name__ == "__main__":
    import json
    import sys

    torch.set_num_threads(1)
    from neuronscope.analysis import calibration as kept

    if kept.load("cpu") is None:  # the cost model's constants, measured once here (neuronscope calibrate)
        kept.calibrate("cpu")
    json.dump(calibration(), sys.stdout)


def attention_blocks(n: int) -> OpGraph:
    """A trace's op graph (no shapes, no links) of ``n`` unscaled attention blocks back to back:
    op-order matching's case for a look-back that must not grow with the trace (its test in
    tests/test_attack_k36.py, its timing in benchmarks/bench_analysis.py section 4)."""
    nodes: list[OpNode] = []
    for _ in range(n):
        for op in ("bmm", "_softmax", "bmm"):
            i = len(nodes)
            nodes.append(OpNode(index=i, name=f"aten::{op}", op=op.lstrip("_"), tid=1, start_ns=10 * i, end_ns=10 * i + 5, cpu_ns=5))
    return OpGraph(nodes, "none")


def hints_by(how: str, fn: Callable[..., object], *args: object) -> list[Hint]:
    """The hints on ``fn(*args)`` as a user gets them ``how``: ``"decorated"`` (the default
    options: the observed warm-up call, then the capture) or ``"from_profiler"`` (their own
    ``torch.profiler`` with shapes, then :func:`neuronscope.from_profiler`)."""
    from neuronscope import from_profiler, profile_on_neuron

    if how == "decorated":
        f = profile_on_neuron(fn, export=False, backend="cpu")
        f(*args)
        f(*args)
        return f.last_result.hints
    with torch.profiler.profile(record_shapes=True) as prof:
        fn(*args)
    return from_profiler(prof).hints
