"""Guards of the analysis that no other test held: each test here fails when its guard is
removed, and says which wrong hint a user would then read.

Real torch profiler (CPU), live captures (``@profile_on_neuron``, default options: an observed
warm-up call, then the capture), the user's own profiler (``from_profiler``) and its trace
(``from_trace``); transformers models built from config with random weights.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from neuronscope import from_profiler, from_trace, profile_on_neuron
from neuronscope.analysis.patterns.attention import UNKNOWN_SCALE
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _live_hints(fn: Any, *args: torch.Tensor) -> list[Hint]:
    """The fusion hints of a decorated ``fn(*args)`` (the warm-up call, then the captured one)."""
    f = profile_on_neuron(fn, export=False, print_summary=False, backend="cpu")
    with torch.no_grad():
        f(*args)
        f(*args)
    assert f.last_result is not None
    return [h for h in f.last_result.hints if h.kind == "fusion"]


# ---- 1. example tensors of a spelling are different values (matcher._Walk.distinct) ---------


def _silu_times_its_input(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x) * x  # SiLU(x) * x: not a GLU, whose gate and up are two projections


def _rotary_with_x_for_its_tables(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    # rotary's shape, x * cos + rotate_half(x) * sin, with one tensor c for both tables
    return x * c + torch.cat((-x[..., 4:], x[..., :4]), -1) * c


def test_silu_times_its_own_input_is_no_silu_mul() -> None:
    """``F.silu(x) * x`` has silu_mul's ops, but its gate and up are one tensor: without the
    check that a spelling's example tensors are bound to different values, the user was told
    to fuse it as ``silu_mul`` (a GLU of two projections the code does not have)."""
    hints = _live_hints(_silu_times_its_input, torch.randn(2, 8, 16))
    assert not [h for h in hints if h.pattern == "silu_mul"], [(h.pattern, h.ops) for h in hints]


def test_rotary_shape_with_one_tensor_for_cos_and_sin_is_no_rotary_embedding() -> None:
    """``x * c + rotate_half(x) * c``: rotary's ops, but one tensor stands for both cos and sin.
    Without the distinctness check, the hint said ``rotary_embedding`` and its fused call
    (which takes two tables) would have replaced code that has one."""
    hints = _live_hints(_rotary_with_x_for_its_tables, torch.randn(2, 8, 8), torch.randn(2, 8, 8))
    assert not [h for h in hints if h.pattern == "rotary_embedding"], [(h.pattern, h.ops) for h in hints]


# ---- 2. a scale of q read through a view (patterns/attention.py only_mm1) -------------------


def _tiny_opt() -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.OPTConfig(
        hidden_size=64,
        num_hidden_layers=1,
        ffn_dim=128,
        num_attention_heads=4,
        vocab_size=100,
        max_position_embeddings=64,
        word_embed_proj_dim=64,
        attn_implementation="eager",
    )
    return transformers.OPTModel(cfg).eval()


def test_opt_scales_q_before_its_view_and_the_hint_says_so() -> None:
    """OPT multiplies ``q_proj(h)`` by ``head_dim ** -0.5`` and only then views it into heads;
    its scores are multiplied by 1.0. Without reading q's scale through that view, the hint
    left the scale of q out of its ops and said ``scale=1.0`` with no word on q; it must say
    that its q, k are the code's before that scale (sdpa's default scale then applies it).
    That suggestion, applied as written to the model's own q, k, v and mask, gives the
    model's attention output."""
    m = _tiny_opt()
    ids = torch.randint(0, 100, (1, 8))

    def forward() -> None:
        m(input_ids=ids)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (hint,) = [h for h in _live_hints(forward) if h.pattern == "attention"]
    # Where torch.compile ran earlier in the process the observation records no numbers: the
    # hint then names the scale for the user to fill in (tests/test_user_u35.py), never 1.0.
    unknown = hint.details.get("scale") == UNKNOWN_SCALE
    assert hint.details.get("scale_on_inputs") is True and ("scale" not in hint.details or unknown), hint.details
    assert hint.ops[0] == "aten::mul" and ("scale=" not in hint.suggestion or unknown), (hint.ops, hint.suggestion)

    # The suggestion as written: sdpa(q, k, v, attn_mask=mask), q and k before the code's scale.
    attn = m.decoder.layers[0].self_attn
    seen: dict[str, Any] = {}
    attn.register_forward_hook(lambda mod, args, kwargs, out: seen.update(kwargs, out=out[0]), with_kwargs=True)
    with torch.no_grad():
        m(input_ids=ids)
        h, mask = seen["hidden_states"], seen["attention_mask"]
        heads = lambda t: t.view(1, 8, 4, 16).transpose(1, 2)
        q, k, v = heads(attn.q_proj(h)), heads(attn.k_proj(h)), heads(attn.v_proj(h))
        assert list(q.shape) == hint.details["q"] and list(k.shape) == hint.details["k"]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **({"scale": 16**-0.5} if unknown else {}))
        got = attn.out_proj(out.transpose(1, 2).reshape(1, 8, 64))
    torch.testing.assert_close(got, seen["out"])


# ---- 3. a norm's own statistic is no weight at batch 1 (matcher._Walk.vectors_outside) ------


def _times_its_statistic_again(x: torch.Tensor) -> torch.Tensor:
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return x * r * r.mean(1, keepdim=True)  # the statistic, reduced over T, multiplied once more


def test_a_norms_statistic_at_batch_one_is_no_weight() -> None:
    """At batch 1, ``r.mean(1, keepdim=True)`` of ``[1, 6, 4, 1]`` is ``[1, 1, 4, 1]``: it
    broadcasts onto x as a per-head weight would, and the batch rule of vector shapes no
    longer tells it apart. Without the check that a weight is not made by the match's own ops,
    the hint said ``rms_norm(x) * weight``: but the fused call replaces the ops that make it."""
    (hint,) = [h for h in _live_hints(_times_its_statistic_again, torch.randn(1, 6, 4, 8)) if h.pattern == "rms_norm"]
    assert "vector_shapes" not in hint.details and "* weight" not in hint.suggestion, hint.suggestion
    assert [o.rsplit("::", 1)[-1] for o in hint.ops] == ["pow", "mean", "add", "rsqrt", "mul"]


# ---- 4. a softmax over another dim in op order (fusion.find_sequence_matches) ---------------


def _attention_over_the_queries(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=1), v)  # dim=1 of [B, T, T]


def _profiled(fn: Any, *args: torch.Tensor) -> Any:
    with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
        fn(*args)
    return prof


def test_attention_with_softmax_over_the_queries_from_a_profiler_is_no_sdpa() -> None:
    """``softmax(q @ k.T, dim=1) @ v`` normalises over the queries; sdpa over the keys. The
    user's profiler records the softmax's dim: without the op-order check of it, the hint told
    the user to replace this with ``scaled_dot_product_attention``, which computes another
    thing."""
    q, k, v = (torch.randn(2, 8, 16) for _ in range(3))
    hints = from_profiler(_profiled(_attention_over_the_queries, q, k, v)).hints
    assert not [h for h in hints if h.pattern == "attention"], [(h.pattern, h.suggestion) for h in hints]


def test_attention_with_softmax_over_the_queries_from_a_trace_is_no_sdpa(tmp_path: Path) -> None:
    """The same code read from its trace: the trace records ``dim=1`` (``Concrete Inputs``)
    and the reader keeps it as the op's scalars, so the softmax is not over the last dim.
    Without them the hint said sdpa."""
    q, k, v = (torch.randn(2, 8, 16) for _ in range(3))
    path = tmp_path / "trace.json"
    _profiled(_attention_over_the_queries, q, k, v).export_chrome_trace(str(path))
    hints = from_trace(str(path)).hints
    assert not [h for h in hints if h.pattern == "attention"], [(h.pattern, h.suggestion) for h in hints]
