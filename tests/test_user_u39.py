"""A newcomer's round on families no other test covers (u39): Phi3, Cohere, GPT-J, Mamba, Helium,
ESM, Persimmon, DeepSeek-V3, RoFormer and Swin v2 from transformers (built from config, random
weights), a Llama written from scratch as the blogs write it (RMSNorm, complex or ``cat`` RoPE,
SwiGLU, attention written out) and a diffusion U-Net's blocks with a hand-written GroupNorm and
DDPM's spatial self-attention.

Each suggestion is applied as written in place of the code it names and checked against what
the code computes; hints from a run's exported trace are compared with the live ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from user_rounds import COMMON, apply, built, call_in, captured, eager, enc, fusion_keys, lm, of

from neuronscope import from_profiler, profile_on_neuron

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_torch_thread", "no_compiled_code_yet")


# ---- helpers --------------------------------------------------------------------------------


IDS = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
IMG = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def build(name: str) -> tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """A 1-layer model of the family, eager attention, its forward under no_grad, its input."""
    tf = transformers
    torch.manual_seed(0)
    table: dict[str, tuple[Callable[[], nn.Module], Any, torch.Tensor]] = {
        "phi3": (lambda: tf.Phi3ForCausalLM(eager(tf.Phi3Config(**COMMON, pad_token_id=0))), lm, IDS),
        "cohere": (lambda: tf.CohereForCausalLM(eager(tf.CohereConfig(**COMMON, pad_token_id=0))), lm, IDS),
        "gptj": (
            lambda: tf.GPTJForCausalLM(eager(tf.GPTJConfig(n_embd=64, n_layer=1, n_head=4, vocab_size=128, n_positions=64, rotary_dim=8))),
            lm,
            IDS,
        ),
        "mamba": (lambda: tf.MambaModel(tf.MambaConfig(hidden_size=32, state_size=8, num_hidden_layers=1, vocab_size=128)), enc, IDS),
        "helium": (lambda: tf.HeliumForCausalLM(eager(tf.HeliumConfig(**COMMON, head_dim=16, pad_token_id=0))), lm, IDS),
        "esm": (
            lambda: tf.EsmModel(
                eager(
                    tf.EsmConfig(
                        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=33,
                        max_position_embeddings=64, position_embedding_type="rotary", pad_token_id=1, mask_token_id=32,
                    )
                )
            ),
            enc,
            IDS % 30 + 2,
        ),
        "persimmon": (lambda: tf.PersimmonForCausalLM(eager(tf.PersimmonConfig(**COMMON))), lm, IDS),
        "deepseek_v3": (
            lambda: tf.DeepseekV3ForCausalLM(
                eager(
                    tf.DeepseekV3Config(
                        **{**COMMON, "num_key_value_heads": 4}, moe_intermediate_size=32, n_routed_experts=4,
                        num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_group=1, topk_group=1,
                    )
                )
            ),
            lm,
            IDS,
        ),
        "roformer": (
            lambda: tf.RoFormerModel(
                eager(tf.RoFormerConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                        vocab_size=128, embedding_size=64, max_position_embeddings=64))
            ),
            enc,
            IDS,
        ),
        "canine": (
            lambda: tf.CanineModel(
                tf.CanineConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, downsampling_rate=2,
                                max_position_embeddings=64, num_hash_buckets=64, num_hash_functions=2)
            ),
            enc,
            IDS,
        ),
        "swinv2": (
            lambda: tf.Swinv2Model(
                eager(tf.Swinv2Config(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4))
            ),
            enc,
            IMG,
        ),
    }
    return built(table[name])


# ---- a Llama written from scratch, as the blogs write it -----------------------------------

D, HEADS, T, V = 64, 4, 16, 128
HD = D // HEADS


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.rand(d) + 0.5)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x.float()).type_as(x) * self.weight


def rope_complex(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Meta's reference: pairs as complex numbers, times ``exp(i theta)``."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)


def rope_cat(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The blogs' (and DeepSeek-V3's): each half rotated, the two concatenated."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, rope: str) -> None:
        super().__init__()
        self.rope = rope
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, freqs: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = (w(x).view(B, L, HEADS, HD) for w in (self.wq, self.wk, self.wv))
        if self.rope == "complex":
            q, k = rope_complex(q, freqs[0]), rope_complex(k, freqs[0])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.rope == "cat":
            q, k = rope_cat(q, *freqs[1:]), rope_cat(k, *freqs[1:])
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(HD)
        scores = F.softmax((scores + mask).float(), dim=-1).type_as(q)
        return self.wo(torch.matmul(scores, v).transpose(1, 2).contiguous().view(B, L, -1))


class Llama(nn.Module):
    def __init__(self, rope: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tok, self.out = nn.Embedding(V, D), nn.Linear(D, V, bias=False)
        self.attention, self.attention_norm, self.ffn_norm, self.norm = Attention(rope), RMSNorm(D), RMSNorm(D), RMSNorm(D)
        self.w1, self.w2, self.w3 = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False), nn.Linear(D, 4 * D, bias=False)
        angles = torch.outer(torch.arange(T).float(), 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD)))
        self.freqs = (torch.polar(torch.ones_like(angles), angles), angles.cos(), angles.sin())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        L = tokens.shape[1]
        x = self.tok(tokens)
        mask = torch.triu(torch.full((L, L), float("-inf")), diagonal=1)
        h = x + self.attention(self.attention_norm(x), tuple(f[:L] for f in self.freqs), mask)
        n = self.ffn_norm(h)
        h = h + self.w2(F.silu(self.w1(n)) * self.w3(n))
        return self.out(self.norm(h)).float()


TOKENS = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(0))


# ---- a diffusion U-Net's blocks: hand-written GroupNorm and swish, DDPM's attention ----------


class HandGroupNorm(nn.Module):
    def __init__(self, groups: int, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight, self.bias = nn.Parameter(torch.rand(channels) + 0.5), nn.Parameter(torch.randn(channels))
        self.normalize: str | None = None  # a layer_norm suggestion applied in place of the statistics

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C, H, W = x.shape
        x = x.view(N, self.groups, -1)
        if self.normalize is None:
            mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
            x = (x - mean) / torch.sqrt(var + self.eps)
        else:
            x = apply(self.normalize, x=x)
        return x.view(N, C, H, W) * self.weight.view(1, C, 1, 1) + self.bias.view(1, C, 1, 1)


class ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.n1, self.c1, self.n2, self.c2 = HandGroupNorm(4, c), nn.Conv2d(c, c, 3, padding=1), HandGroupNorm(4, c), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n1(x)
        h = self.c1(h * torch.sigmoid(h))
        h = self.n2(h)
        return x + self.c2(h * torch.sigmoid(h))


class DDPMAttention(nn.Module):
    """DDPM's spatial self-attention: ``k`` taken as ``[B, C, HW]`` (no transpose), the output
    ``bmm(v, w.permute(0, 2, 1))``: the attention weights are the second operand."""

    def __init__(self, c: int, qk: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Conv2d(c, qk, 1), nn.Conv2d(c, qk, 1), nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        q = self.q(x).reshape(B, -1, H * W).permute(0, 2, 1)
        k, v = self.k(x).reshape(B, -1, H * W), self.v(x).reshape(B, C, H * W)
        w = F.softmax(torch.bmm(q, k) * (int(q.shape[-1]) ** (-0.5)), dim=2)
        return x + self.o(torch.bmm(v, w.permute(0, 2, 1)).reshape(B, C, H, W))


class UNetMid(nn.Module):
    def __init__(self, qk: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.res, self.attn = ResBlock(32), DDPMAttention(32, qk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(self.res(x))


LATENT = torch.randn(2, 32, 8, 8, generator=torch.Generator().manual_seed(2))


def no_grad(m: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return m(x)

    return forward


# ---- what works -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "found"),
    [
        ("phi3", {"rms_norm", "rotary_embedding", "attention", "silu_mul"}),
        ("cohere", {"layer_norm", "rotary_embedding", "attention", "silu_mul"}),
        ("gptj", {"gelu", "rotary_embedding", "attention"}),
        ("mamba", {"rms_norm", "silu_mul"}),
        ("esm", {"gelu", "rotary_embedding", "attention"}),
    ],
)
def test_new_families_idioms_found_and_trace_hints_are_the_live_ones(family: str, found: set[str], tmp_path: Path) -> None:
    """On families no other test builds, each idiom the model's code writes out is found, and
    the run's trace file and the user's own profiler give the live capture's fusion hints."""
    _m, fwd, x = build(family)
    live, trace = captured(fwd, x, tmp=tmp_path)
    assert {h.pattern for h in live if h.kind == "fusion"} >= found
    with torch.profiler.profile(record_shapes=True) as prof:
        fwd(x)
    assert fusion_keys(trace) == fusion_keys(live) == fusion_keys(from_profiler(prof).hints)


def test_cohere_layer_norm_and_gptj_tanh_gelu_applied_as_written(tmp_path: Path) -> None:
    """Cohere's bias-free LayerNorm written out (eps 1e-5) and GPT-J's ``gelu_new``: each
    suggested call, put in place of the module, gives the model's logits."""
    m, fwd, x = build("cohere")
    for mod in m.modules():
        if type(mod).__name__ == "CohereLayerNorm":
            nn.init.uniform_(mod.weight, 0.5, 1.5)
    hints, _ = captured(fwd, x, tmp=tmp_path)
    expected = fwd(x)
    (ln,) = of(hints, "layer_norm")
    call = call_in(ln.suggestion, "layer_norm")
    assert "eps=1e-05" in call and "weight, None" in call, call
    norm_cls = type(m.model.norm)
    original = norm_cls.forward
    norm_cls.forward = lambda self, h: apply(call, x=h, weight=self.weight)
    try:
        torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)
    finally:
        norm_cls.forward = original

    m, fwd, x = build("gptj")
    hints, _ = captured(fwd, x, tmp=tmp_path)
    expected = fwd(x)
    (gelu,) = of(hints, "gelu")
    call = call_in(gelu.suggestion, "gelu")
    act_cls = type(m.transformer.h[0].mlp.act)
    original = act_cls.forward
    act_cls.forward = lambda self, h: apply(call, x=h)
    try:
        torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)
    finally:
        act_cls.forward = original


@pytest.mark.parametrize("family", ["esm", "persimmon", "helium"])
def test_attention_switch_holds_for_the_model(family: str, tmp_path: Path) -> None:
    """The hint says to load the model with ``attn_implementation="sdpa"`` (ESM: with the
    scale its code already applied to q, ``scale=1.0``; Persimmon: partial rotary, q/k
    LayerNorms); loaded so, the model's output."""
    m, fwd, x = build(family)
    hints, _ = captured(fwd, x, tmp=tmp_path)
    expected = fwd(x)
    (att,) = of(hints, "attention")
    assert 'attn_implementation="sdpa"' in att.suggestion
    m.set_attn_implementation("sdpa")
    torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)


def test_scratch_llama_norms_and_glu_found_each_suggestion_holds(tmp_path: Path) -> None:
    """A Llama written from scratch (Meta's complex RoPE): its RMSNorm (computed in float32,
    eps 1e-6), SwiGLU and written-out attention are found alike live and in the trace; the
    rms_norm call in place of the norms gives the model's logits."""
    m = Llama("complex").eval()
    fwd = no_grad(m)
    live, trace = captured(fwd, TOKENS, tmp=tmp_path)
    assert fusion_keys(live) == fusion_keys(trace)
    assert {h.pattern for h in live if h.kind == "fusion"} >= {"rms_norm", "silu_mul", "attention"}
    expected = fwd(TOKENS)
    (rms,) = of(live, "rms_norm")
    assert rms.calls == 3
    call = call_in(rms.suggestion, "rms_norm")
    assert "eps=1e-06" in call, call
    original = RMSNorm.forward
    RMSNorm.forward = lambda self, h: apply(call, x=h, weight=self.weight)  # type: ignore[method-assign]
    try:
        torch.testing.assert_close(fwd(TOKENS), expected, atol=1e-5, rtol=1e-4)
    finally:
        RMSNorm.forward = original  # type: ignore[method-assign]


def test_hand_group_norm_found_as_layer_norm_of_its_groups(tmp_path: Path) -> None:
    """A U-Net's GroupNorm written by hand (``x.view(N, G, -1)``, mean, biased var): a
    layer_norm over each group's elements, its call, put in place of the statistics, gives the
    block's output."""
    m = UNetMid().eval()
    fwd = no_grad(m)
    live, _ = captured(fwd, LATENT, tmp=tmp_path)
    expected = fwd(LATENT)
    (ln,) = of(live, "layer_norm")
    assert ln.calls == 2
    call = call_in(ln.suggestion, "layer_norm")
    assert "(512,)" in call and "eps=1e-05" in call, call
    for norm in (m.res.n1, m.res.n2):
        norm.normalize = call
    torch.testing.assert_close(fwd(LATENT), expected, atol=1e-5, rtol=1e-4)


def test_training_step_hints_are_the_same_each_step(tmp_path: Path) -> None:
    """Two Phi3 training steps (forward, cross-entropy, backward, AdamW) captured: the same
    hints each step, the forward's idioms and the optimizer's among them."""
    m, _fwd, x = build("phi3")
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def step(ids: torch.Tensor) -> torch.Tensor:
        logits = m(input_ids=ids).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    f = profile_on_neuron(step, backend="cpu", export=False, print_summary=False, active=None, name="u39_phi3_train")
    for _ in range(3):
        f(x)
    assert len(f.results) == 2

    def key(r: Any) -> list[tuple[Any, ...]]:
        return sorted((h.kind, h.pattern, h.calls, tuple(h.ops), h.location, h.suggestion) for h in r.hints)

    assert key(f.results[0]) == key(f.results[1])
    assert {h.pattern for h in f.results[0].hints} >= {"rms_norm", "rotary_embedding", "attention", "silu_mul", "per_parameter_update"}


def test_swinv2_cosine_attention_gets_no_float_scale(tmp_path: Path) -> None:
    """Swin v2 multiplies its cosine scores by a learned per-head tensor: no ``scale=`` of
    scaled_dot_product_attention is that, so no attention hint may name one."""
    _m, fwd, x = build("swinv2")
    live, _ = captured(fwd, x, tmp=tmp_path)
    assert not [h.suggestion for h in of(live, "attention") if "scale=" in h.suggestion]


def test_scores_scaled_by_a_tensor_name_no_scale_they_do_not_apply() -> None:
    """Scores times a one-element tensor: a scale the capture did not record, said as such (it
    was ``scale=1.0``); times a per-head tensor: no sdpa call, no attention hint."""

    def attention(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.matmul(F.softmax(torch.matmul(q, q.transpose(-2, -1)) * s, dim=-1), q)

    q = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(3))
    f = profile_on_neuron(attention, backend="cpu", export=False, print_summary=False)
    f(q, torch.tensor([0.125]))
    f(q, torch.tensor([0.125]))
    (att,) = of(f.last_result.hints, "attention")
    assert "scale=<the scale your code applies>" in att.suggestion, att.suggestion
    f = profile_on_neuron(attention, backend="cpu", export=False, print_summary=False)
    f(q, torch.full((4, 1, 1), 0.3))
    f(q, torch.full((4, 1, 1), 0.3))
    assert not of(f.last_result.hints, "attention")


@pytest.mark.parametrize("model", ["scratch_llama", "deepseek_v3"])
def test_rotary_of_halves_concatenated_is_found(model: str, tmp_path: Path) -> None:
    """The rotary embedding as DeepSeek-V3 (interleaved halves) and from-scratch Llamas
    (split halves) write it: one rotary_embedding hint for q and k, live and in the trace."""
    if model == "deepseek_v3":
        _m, fwd, x = build("deepseek_v3")
    else:
        fwd, x = no_grad(Llama("cat").eval()), TOKENS
    live, trace = captured(fwd, x, tmp=tmp_path)
    (rotary,) = of(live, "rotary_embedding")
    assert rotary.calls == 2
    assert not of(live, "elementwise_chain")
    assert fusion_keys(trace) == fusion_keys(live)


def test_roformer_rotary_found_in_the_trace_as_live(tmp_path: Path) -> None:
    _m, fwd, x = build("roformer")
    live, trace = captured(fwd, x, tmp=tmp_path)
    assert of(live, "rotary_embedding")
    assert fusion_keys(trace) == fusion_keys(live)


def test_canine_masked_attention_found_in_the_trace_as_live(tmp_path: Path) -> None:
    """Canine makes its mask, ``(1.0 - mask) * finfo.min``, between the scores' scale and their
    add: in the trace as live, its masked attention is found (with its unmasked ones)."""
    _m, fwd, x = build("canine")
    live, trace = captured(fwd, x, tmp=tmp_path)
    assert [h.details.get("mask") for h in of(live, "attention")].count("add") == 1
    assert fusion_keys(trace) == fusion_keys(live)
    # DDPM's attention with q, k and v of one shape: its weights, bmm's second input by their
    # shape, are no attention the trace claims (the live capture claims none).
    live, trace = captured(no_grad(UNetMid().eval()), LATENT, tmp=tmp_path)
    assert fusion_keys(trace) == fusion_keys(live)


def test_attention_whose_weights_are_read_again_is_no_sdpa_hint() -> None:
    """The code sums the attention weights after using them (Nystromformer reads its kernel_2
    six times more): sdpa returns no weights, so replacing the scores-softmax-matmul chain with
    it saves nothing the code can drop. No attention hint."""

    def attention(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = F.softmax(q @ q.transpose(-2, -1) * 0.25, dim=-1)
        return p @ q, p.sum(-2)

    q = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(4))
    f = profile_on_neuron(attention, backend="cpu", export=False, print_summary=False)
    f(q)
    f(q)
    assert not of(f.last_result.hints, "attention")


def test_ddpm_attention_trace_hints_are_the_live_ones(tmp_path: Path) -> None:
    """DDPM's spatial attention block, q and k of fewer channels than v: the trace says what the
    live capture says (the live one gives no attention hint: sdpa(q, k, v) as written is not
    this code)."""
    fwd = no_grad(UNetMid(qk=16).eval())
    live, trace = captured(fwd, LATENT, tmp=tmp_path)
    assert fusion_keys(trace) == fusion_keys(live)
