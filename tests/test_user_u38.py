"""A newcomer's round on families no other test covers (u38): Qwen3, Olmo2, GLM, Exaone4, Phi,
Gemma3, mT5, ALBERT, BEiT, Data2Vec-vision, XGLM, LongT5, Siglip2 from transformers (built from
config, random weights), and a nanoGPT written as the tutorials write it (minGPT's fused qkv
with a ``tril`` buffer and ``masked_fill``, Karpathy's per-head ``Head`` modules, a hand-written
LayerNorm and NewGELU).

Each suggestion is applied as written in place of the code it names and checked against what
the code computes; hints from the user's own ``torch.profiler`` and from its Chrome trace are
compared with the live ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from user_rounds import COMMON, apply, call_in, eager, enc, lm, of

import neuronscope
from neuronscope import from_profiler, profile_on_neuron
from neuronscope.result.hint import Hint

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_torch_thread", "no_compiled_code_yet")


# ---- helpers --------------------------------------------------------------------------------


def live_hints(fn: Callable[..., Any], *args: Any, **kw: Any) -> list[Hint]:
    """The hints of a decorated ``fn``: one warm-up call, one captured."""
    f = profile_on_neuron(fn, backend="cpu", export=False, **kw)
    f(*args)
    f(*args)
    return f.last_result.hints


def profiler_and_trace_hints(fn: Callable[..., Any], *args: Any, tmp: Path) -> tuple[list[Hint], list[Hint]]:
    """The hints of the user's own ``torch.profiler`` run, and of the trace it exported."""
    with torch.profiler.profile(record_shapes=True) as prof:
        fn(*args)
    path = tmp / "trace.json"
    prof.export_chrome_trace(str(path))
    return from_profiler(prof).hints, neuronscope.from_trace(str(path)).hints


def fusion_keys(hints: list[Hint]) -> list[tuple[str, int, int]]:
    """What op order can show of the fusion hints: pattern, calls, op count (no
    ``elementwise_chain``, which needs data flow)."""
    return sorted((h.pattern, h.calls, len(h.ops)) for h in hints if h.kind == "fusion" and h.pattern != "elementwise_chain")


T5 = {
    "d_model": 64,
    "d_ff": 128,
    "d_kv": 16,
    "num_layers": 1,
    "num_decoder_layers": 1,
    "num_heads": 4,
    "vocab_size": 100,
    "decoder_start_token_id": 0,
}
IDS = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))


def build(name: str) -> tuple[nn.Module, Callable[[nn.Module, torch.Tensor], torch.Tensor], torch.Tensor]:
    """A 1-layer model of the family, eager attention, and how to run it."""
    tf = transformers
    torch.manual_seed(0)
    s2s = lambda m, x: m(input_ids=x, decoder_input_ids=x)[0]
    img = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    vit = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "image_size": 32,
        "patch_size": 8,
    }
    table: dict[str, tuple[Callable[[], nn.Module], Any, torch.Tensor]] = {
        "qwen3": (lambda: tf.Qwen3ForCausalLM(eager(tf.Qwen3Config(**COMMON, head_dim=16))), lm, IDS),
        "olmo2": (lambda: tf.Olmo2ForCausalLM(eager(tf.Olmo2Config(**COMMON))), lm, IDS),
        "glm": (lambda: tf.GlmForCausalLM(eager(tf.GlmConfig(**COMMON, head_dim=16, pad_token_id=0))), lm, IDS),
        "exaone4": (lambda: tf.Exaone4ForCausalLM(eager(tf.Exaone4Config(**COMMON, pad_token_id=0))), lm, IDS),
        "phi": (lambda: tf.PhiForCausalLM(eager(tf.PhiConfig(**COMMON))), lm, IDS),
        "gemma3": (lambda: tf.Gemma3ForCausalLM(eager(tf.Gemma3TextConfig(**COMMON, head_dim=16))), lm, IDS),
        "mt5": (lambda: tf.MT5Model(eager(tf.MT5Config(**T5))), s2s, IDS),
        "albert": (
            lambda: tf.AlbertModel(eager(tf.AlbertConfig(**{**COMMON, "num_key_value_heads": 4}, embedding_size=32))),
            enc,
            IDS,
        ),
        "beit": (lambda: tf.BeitModel(eager(tf.BeitConfig(**vit, use_relative_position_bias=True))), enc, img),
        "data2vec_vision": (
            lambda: tf.Data2VecVisionModel(eager(tf.Data2VecVisionConfig(**vit, use_relative_position_bias=True))),
            enc,
            img,
        ),
        "xglm": (
            lambda: tf.XGLMForCausalLM(
                eager(
                    tf.XGLMConfig(
                        d_model=64, ffn_dim=128, num_layers=1, attention_heads=4, vocab_size=128, max_position_embeddings=64
                    )
                )
            ),
            lm,
            IDS,
        ),
        "longt5": (lambda: tf.LongT5Model(eager(tf.LongT5Config(**T5))), s2s, IDS),
        "gpt_neo": (
            lambda: tf.GPTNeoForCausalLM(
                eager(
                    tf.GPTNeoConfig(
                        hidden_size=64,
                        num_layers=2,
                        num_heads=4,
                        vocab_size=100,
                        max_position_embeddings=64,
                        attention_types=[[["global", "local"], 1]],
                        window_size=4,
                    )
                )
            ),
            lm,
            IDS,
        ),
        "imagegpt": (
            lambda: tf.ImageGPTModel(eager(tf.ImageGPTConfig(n_embd=64, n_layer=1, n_head=4, vocab_size=100, n_positions=64))),
            enc,
            IDS,
        ),
    }
    make, run, x = table[name]
    return make().eval(), run, x


def forward_of(m: nn.Module, run: Callable[[nn.Module, torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return run(m, x)

    return forward


# ---- nanoGPT, as the tutorials write it -----------------------------------------------------

N_EMBD, N_HEAD, BLOCK, VOCAB = 64, 4, 16, 96


class NewGELU(nn.Module):
    """minGPT's GELU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class HandLayerNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.rand(d) + 0.5), nn.Parameter(torch.randn(d)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class Head(nn.Module):
    """Karpathy's "Let's build GPT": one head, a ``tril`` buffer, v projected after the softmax."""

    def __init__(self, head_size: int) -> None:
        super().__init__()
        self.key = nn.Linear(N_EMBD, head_size, bias=False)
        self.query = nn.Linear(N_EMBD, head_size, bias=False)
        self.value = nn.Linear(N_EMBD, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(BLOCK, BLOCK)))
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _B, T, _C = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = F.softmax(wei, dim=-1)
        wei = self.dropout(wei)
        v = self.value(x)
        return wei @ v


class Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleList([Head(N_EMBD // N_HEAD) for _ in range(N_HEAD)])
        self.proj = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class CausalSelfAttention(nn.Module):
    """minGPT / nanoGPT's manual path: one fused qkv projection."""

    def __init__(self) -> None:
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(N_EMBD, 3 * N_EMBD), nn.Linear(N_EMBD, N_EMBD)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))
        self.sdpa: str | None = None  # a suggestion applied in place of the scores to ``@ v``

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        if self.sdpa is None:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        else:
            y = apply(self.sdpa, q=q, k=k, v=v, cond=self.bias[:, :, :T, :T] == 0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, per_head: bool) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = HandLayerNorm(N_EMBD), HandLayerNorm(N_EMBD)
        self.attn = Heads() if per_head else CausalSelfAttention()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(N_EMBD, 4 * N_EMBD), NewGELU(), nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, per_head: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wte, self.wpe = nn.Embedding(VOCAB, N_EMBD), nn.Embedding(BLOCK, N_EMBD)
        self.h = nn.ModuleList([Block(per_head)])
        self.ln_f, self.lm_head = HandLayerNorm(N_EMBD), nn.Linear(N_EMBD, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


TOKENS = torch.randint(0, VOCAB, (2, BLOCK), generator=torch.Generator().manual_seed(0))


# ---- what works -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["qwen3", "olmo2", "glm", "exaone4", "phi", "mt5", "albert", "beit"])
def test_profiler_and_trace_hints_are_the_live_ones(family: str, tmp_path: Path) -> None:
    """On families no other test builds, the user's own profiler and its trace file give the
    live capture's fusion hints: the same patterns, calls and op counts."""
    m, run, x = build(family)
    fwd = forward_of(m, run)
    live = live_hints(fwd, x)
    prof, trace = profiler_and_trace_hints(fwd, x, tmp=tmp_path)
    assert fusion_keys(live), "no fusion hint at all"
    assert fusion_keys(prof) == fusion_keys(live)
    assert fusion_keys(trace) == fusion_keys(live)


def _rms_norm_calls(hints: list[Any]) -> dict[str, str]:
    """Each rms_norm hint's call, by the size it normalizes (``(64,)`` -> ``"64"``)."""
    return {re.search(r"\((\d+),\)", h.suggestion).group(1): call_in(h.suggestion, "rms_norm") for h in of(hints, "rms_norm")}  # type: ignore[union-attr]


def _assert_norms_applied(m: Any, fwd: Any, x: torch.Tensor, expected: torch.Tensor, calls: dict[str, str]) -> None:
    """The model's norm modules, each replaced by the call of its size, give ``expected``."""
    norm_cls = type(m.model.norm)
    original = norm_cls.forward
    norm_cls.forward = lambda self, h: apply(calls[str(h.shape[-1])], x=h, weight=self.weight)
    try:
        torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)
    finally:
        norm_cls.forward = original


def test_qwen3_norm_and_attention_suggestions_hold_for_the_model() -> None:
    """Qwen3's norms over 64 and over its q/k heads of 16 are two hints; each rms_norm call,
    put in place of the norm modules of its size, and the sdpa switch give the model's logits."""
    m, run, x = build("qwen3")
    fwd = forward_of(m, run)
    hints = live_hints(fwd, x)
    expected = fwd(x)
    calls = _rms_norm_calls(hints)
    assert set(calls) == {"64", "16"}, calls
    _assert_norms_applied(m, fwd, x, expected, calls)
    (att,) = of(hints, "attention")
    assert 'attn_implementation="sdpa"' in att.suggestion
    m.set_attn_implementation("sdpa")
    torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)


def test_gemma3_one_plus_weight_norm_and_scaled_attention_hold_for_the_model() -> None:
    """Gemma3: ``1 + weight`` in the rms_norm call, and attention's scale (1/16 from
    ``query_pre_attn_scalar``); applied, the model's logits."""
    m, run, x = build("gemma3")
    fwd = forward_of(m, run)
    hints = live_hints(fwd, x)
    expected = fwd(x)
    calls = _rms_norm_calls(hints)
    assert all("1 + weight" in c for c in calls.values()), calls
    _assert_norms_applied(m, fwd, x, expected, calls)
    (att,) = of(hints, "attention")
    assert att.details.get("scale") == pytest.approx(0.0625)
    m.set_attn_implementation("sdpa")
    torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)


def test_nanogpt_layer_norm_gelu_and_masked_attention_applied_as_written(tmp_path: Path) -> None:
    """minGPT-style code: the hand LayerNorm, NewGELU and the ``masked_fill`` attention are
    found (live, profiler, trace alike) and each suggestion, applied as written, gives the
    model's logits."""
    m = GPT().eval()
    fwd = forward_of(m, lambda mm, t: mm(t))
    hints = live_hints(fwd, TOKENS)
    expected = fwd(TOKENS)
    assert {h.pattern for h in hints if h.kind == "fusion"} >= {"layer_norm", "gelu", "attention"}
    prof, trace = profiler_and_trace_hints(fwd, TOKENS, tmp=tmp_path)
    assert fusion_keys(prof) == fusion_keys(hints) == fusion_keys(trace)

    (ln,) = of(hints, "layer_norm")
    (gelu,) = of(hints, "gelu")
    (att,) = of(hints, "attention")
    ln_call, gelu_call = call_in(ln.suggestion, "layer_norm"), call_in(gelu.suggestion, "gelu")
    sdpa = call_in(att.suggestion, "scaled_dot_product_attention")
    assert "~cond" in sdpa, att.suggestion
    originals = HandLayerNorm.forward, NewGELU.forward
    HandLayerNorm.forward = lambda self, x: apply(ln_call, x=x, weight=self.weight, bias=self.bias)  # type: ignore[method-assign]
    NewGELU.forward = lambda self, x: apply(gelu_call, x=x)  # type: ignore[method-assign]
    m.h[0].attn.sdpa = sdpa
    try:
        torch.testing.assert_close(fwd(TOKENS), expected, atol=1e-5, rtol=1e-4)
    finally:
        HandLayerNorm.forward, NewGELU.forward = originals  # type: ignore[method-assign]


def test_ten_captures_give_the_same_hints() -> None:
    """Gemma3's forward captured 10 times (``active=None``) gives one set of hints: same
    patterns, ops, calls, lines, suggestions and details that say what to write."""
    m, run, x = build("gemma3")
    f = profile_on_neuron(forward_of(m, run), backend="cpu", export=False, active=None, name="u38_gemma3_ten")
    for _ in range(11):
        f(x)
    assert len(f.results) == 10

    def key(r: Any) -> list[tuple[Any, ...]]:
        return sorted(
            (
                h.kind,
                h.pattern,
                h.calls,
                tuple(h.ops),
                h.location,
                h.suggestion,
                str(h.details.get("eps")),
                str(h.details.get("scale")),
            )
            for h in r.hints
        )

    assert all(key(r) == key(f.results[0]) for r in f.results)


def test_data2vec_vision_attention_switch_holds_when_loaded_so() -> None:
    """The hint says to load Data2Vec-vision with ``attn_implementation="sdpa"``; loaded so
    (its own sdpa attention class), the encoder's output is the eager one's."""
    m, run, x = build("data2vec_vision")
    fwd = forward_of(m, run)
    (att,) = of(live_hints(fwd, x), "attention")
    assert 'attn_implementation="sdpa"' in att.suggestion
    cfg = transformers.Data2VecVisionConfig(**m.config.to_dict())
    cfg._attn_implementation = "sdpa"
    m2 = transformers.Data2VecVisionModel(cfg).eval()
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(forward_of(m2, run)(x), fwd(x), atol=1e-5, rtol=1e-4)


# ---- defects --------------------------------------------------------------------------------


def test_xglm_clamped_attention_is_found() -> None:
    m, run, x = build("xglm")
    hints = live_hints(forward_of(m, run), x)
    assert of(hints, "attention"), [h.pattern for h in hints]


def test_per_head_attention_is_found_by_op_order(tmp_path: Path) -> None:
    m = GPT(per_head=True).eval()
    fwd = forward_of(m, lambda mm, t: mm(t))
    live = live_hints(fwd, TOKENS)
    assert [h.calls for h in of(live, "attention")] == [N_HEAD]  # live: found, one hint, 4 calls
    prof, trace = profiler_and_trace_hints(fwd, TOKENS, tmp=tmp_path)
    assert fusion_keys(prof) == fusion_keys(live)
    assert fusion_keys(trace) == fusion_keys(live)


@pytest.mark.xfail(
    strict=True,
    reason="LongT5's local (einsum) attention is found live but not from the user's profiler or "
    "trace (3 of 4 attention hints there): between its scores' einsum and the bias add run ~30 "
    "ops computing the relative position bucket (arange, sub, abs, log, div, mul, where, "
    "embedding...), ops attention itself runs, after an einsum whose output shape op order does "
    "not show; left out only up to 8 ops that run no op the idiom may start with",
)
def test_longt5_local_attention_is_found_by_op_order(tmp_path: Path) -> None:
    m, run, x = build("longt5")
    fwd = forward_of(m, run)
    live = live_hints(fwd, x)
    assert any(h.ops[0] == "aten::einsum" for h in of(live, "attention"))
    prof, trace = profiler_and_trace_hints(fwd, x, tmp=tmp_path)
    assert fusion_keys(prof) == fusion_keys(live)
    assert fusion_keys(trace) == fusion_keys(live)


def einsum_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """LongT5's local attention, one block: q, k, v as ``[batch, query, heads, dim]``."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k)
    scores += bias
    weights = F.softmax(scores.float(), dim=-1).type_as(scores)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)


def _einsum_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (*(torch.randn(2, 8, 4, 16, generator=g) for _ in range(3)), torch.randn(1, 4, 8, 8, generator=g))


def test_einsum_attention_is_found_from_a_trace(tmp_path: Path) -> None:
    args = _einsum_inputs()
    live = live_hints(einsum_attention, *args)
    prof, trace = profiler_and_trace_hints(einsum_attention, *args, tmp=tmp_path)
    assert fusion_keys(live) == fusion_keys(prof) == [("attention", 1, 4)]
    assert fusion_keys(trace) == fusion_keys(live)


def test_einsum_attention_suggestion_applies_as_written() -> None:
    q, k, v, bias = _einsum_inputs()
    (att,) = of(live_hints(einsum_attention, q, k, v, bias), "attention")
    call = call_in(att.suggestion, "scaled_dot_product_attention")
    torch.testing.assert_close(apply(call, q=q, k=k, v=v, mask=bias), einsum_attention(q, k, v, bias))


def test_siglip2_pooling_attention_same_ops_by_op_order(tmp_path: Path) -> None:
    tf = transformers
    torch.manual_seed(0)
    cfg = eager(
        tf.Siglip2VisionConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, patch_size=8, num_patches=16
        )
    )
    m = tf.Siglip2VisionModel(cfg).eval()
    px = torch.randn(1, 16, 192)
    kw = {"spatial_shapes": torch.tensor([[4, 4]]), "pixel_attention_mask": torch.ones(1, 16, dtype=torch.long)}

    def fwd(p: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return m(p, **kw)[0]

    live = live_hints(fwd, px)
    prof, trace = profiler_and_trace_hints(fwd, px, tmp=tmp_path)
    assert fusion_keys(prof) == fusion_keys(live)
    assert fusion_keys(trace) == fusion_keys(live)


def test_a_capture_after_verify_keeps_its_eps() -> None:
    x = torch.randn(2, 16, 64)
    ln = HandLayerNorm(64)
    before = of(live_hints(ln, x, name="u38_ln_before"), "layer_norm")[0]
    assert before.details.get("eps") == pytest.approx(1e-5)
    before.verify()
    try:
        after = of(live_hints(ln, x, name="u38_ln_after"), "layer_norm")[0]
        assert after.suggestion == before.suggestion
    finally:
        torch._dynamo.reset()


def layer_norm_inline(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A one-line LayerNorm: Python runs ``x - mean`` before ``x.var``."""
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5) * w + b


def test_layer_norm_subtracting_before_var_is_found_by_op_order() -> None:
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 8, 64, generator=g), torch.rand(64, generator=g) + 0.5, torch.randn(64, generator=g)
    assert [h.calls for h in of(live_hints(layer_norm_inline, x, w, b), "layer_norm")] == [1]
    layer_norm_inline(x, w, b)
    with torch.profiler.profile(record_shapes=True) as prof:
        layer_norm_inline(x, w, b)
    assert of(from_profiler(prof).hints, "layer_norm")


class ReferenceRMSNorm(nn.Module):
    """RMSNorm as its authors' reference code writes it (bzhangGo/rmsnorm): eps added to the
    root mean square, outside the root."""

    def __init__(self, d: int, eps: float = 1e-2) -> None:
        super().__init__()
        self.scale, self.eps, self.d = nn.Parameter(torch.rand(d) + 0.5), eps, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms_x = x.norm(2, dim=-1, keepdim=True) * self.d ** (-1.0 / 2)
        return self.scale * (x / (rms_x + self.eps))


def test_rms_norm_with_eps_outside_the_root_is_not_called_identical() -> None:
    norm = ReferenceRMSNorm(64)
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0)) * 0.05  # activations of rms ~0.05
    (hint,) = of(live_hints(norm, x), "rms_norm")
    call = call_in(hint.suggestion, "rms_norm")
    with torch.no_grad():
        same = torch.allclose(apply(call, x=x, weight=norm.scale), norm(x), atol=1e-5, rtol=1e-4)
    assert same or "not identical" in hint.suggestion, hint.suggestion


def makemore_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Karpathy's makemore: softmax without the max, then the target's log probability."""
    counts = logits.exp()
    prob = counts / counts.sum(1, keepdims=True)
    return -prob[torch.arange(logits.shape[0]), y].log().mean()


def test_makemore_cross_entropy_is_a_loss_hint() -> None:
    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(32, 27, generator=g), torch.randint(0, 27, (32,), generator=g)
    hints = live_hints(makemore_loss, logits, y)
    assert "cross_entropy" in " ".join(h.suggestion for h in hints), [h.suggestion for h in hints]


def test_gpt_neo_unscaled_where_masked_attention_applied_as_written() -> None:
    """GPT-Neo (global and local layers) scales nothing and masks with ``torch.where`` to
    finfo.min: the hint says ``scale=1.0`` and one float mask; so applied in place of its
    ``_attn``, the logits."""
    from transformers.models.gpt_neo import modeling_gpt_neo

    m, run, x = build("gpt_neo")
    fwd = forward_of(m, run)
    (att,) = of(live_hints(fwd, x), "attention")
    assert att.calls == 2 and att.details.get("scale") == 1.0, att
    call = call_in(att.suggestion, "scaled_dot_product_attention")
    expected = fwd(x)

    def as_hinted(self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any = None) -> Any:
        q_len, k_len = query.size(-2), key.size(-2)
        mask = torch.where(self.bias[:, :, k_len - q_len : k_len, :k_len], 0.0, float("-inf"))
        mask = mask if attention_mask is None else mask + attention_mask
        return apply(call, q=query, k=key, v=value, mask=mask), None

    original = modeling_gpt_neo.GPTNeoSelfAttention._attn
    modeling_gpt_neo.GPTNeoSelfAttention._attn = as_hinted
    try:
        torch.testing.assert_close(fwd(x), expected, atol=1e-5, rtol=1e-4)
    finally:
        modeling_gpt_neo.GPTNeoSelfAttention._attn = original


@pytest.mark.parametrize("family", ["gpt_neo", "imagegpt", "data2vec_vision"])
def test_attention_is_found_by_op_order(family: str, tmp_path: Path) -> None:
    """Masked by ``where`` (GPT-Neo, ImageGPT), a position bias gathered amid the scores
    (Data2Vec-vision): op order finds what the live capture finds."""
    m, run, x = build(family)
    fwd = forward_of(m, run)
    live = live_hints(fwd, x)
    assert of(live, "attention")
    prof, trace = profiler_and_trace_hints(fwd, x, tmp=tmp_path)
    assert fusion_keys(prof) == fusion_keys(live)
    assert fusion_keys(trace) == fusion_keys(live)
