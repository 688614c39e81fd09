"""Suggestions that hold for the code they name, read from a trace: the attention scale of a q
scaled right after its projection (Whisper), a norm's weight right before unscaled attention
in a trace without shapes, and the cost of a norm whose weight stays outside the fused call."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from neuronscope import from_profiler, profile_on_neuron
from neuronscope.analysis.patterns.attention import UNKNOWN_SCALE
from neuronscope.drive.traces import from_trace
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _attention(hints: list[Hint]) -> list[Hint]:
    return [h for h in hints if h.pattern == "attention"]


def _whisper() -> tuple[Any, Any]:
    """A tiny Whisper (encoder and decoder, one layer each) and one no-grad forward of it."""
    transformers = pytest.importorskip("transformers")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
        max_source_positions=16, max_target_positions=32, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1, attn_implementation="eager",
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.WhisperForConditionalGeneration(config).eval()
    features, tokens = torch.randn(1, 16, 32), torch.randint(0, 128, (1, 8))

    def forward() -> Any:
        with torch.no_grad():
            return model(input_features=features, decoder_input_ids=tokens)

    return model, forward


def test_whisper_attention_read_from_a_trace_takes_q_before_its_scale(tmp_path: Path) -> None:
    """Whisper multiplies q by ``head_dim ** -0.5`` right after ``q_proj``, projects k and v,
    then its attention function multiplies the scores by ``scaling=1.0``. The op-order hint saw
    that ``* 1.0`` and looked no further back: ``scale=<the scale your code applies>`` at the
    attention function, where the code's 1.0 filled in is right but ``head_dim ** -0.5``, the
    usual scale, scales twice, and nothing said q had been scaled. Now every attention of the
    model (encoder and decoder self-attention, cross-attention) read by op order, with or
    without shapes, says q and k are read before any scale; the live capture, which sees
    where the multiply goes, keeps the code's scaled q (``scale=1.0``)."""
    _model, forward = _whisper()
    f = profile_on_neuron(forward, export=True, output_dir=str(tmp_path), backend="cpu", print_summary=False)
    f()
    f()
    live = _attention(f.last_result.hints)
    # 1.0 on the code's scaled q; not known where torch.compile ran earlier in the process (the
    # observation then records no numbers); never the usual scale, which would apply it twice.
    assert live and all(h.details.get("scale") in (1.0, UNKNOWN_SCALE) for h in live), [h.suggestion for h in live]
    (trace,) = Path(str(f.last_result.run_dir)).glob("trace.json*")
    read = {"from_trace": from_trace(trace).hints}
    for shapes in (False, True):
        forward()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
            forward()
        read[f"from_profiler(record_shapes={shapes})"] = from_profiler(prof).hints
    for how, hints in read.items():
        attention = _attention(hints)
        assert sum(h.calls for h in attention) == sum(h.calls for h in live) == 3, (how, attention)
        for h in attention:
            assert h.details.get("inputs_maybe_scaled"), (how, h.details)
            assert "q, k: before any scale your code multiplies them by" in h.suggestion, (how, h.suggestion)


def test_a_trace_does_not_take_a_gelu_or_another_tensors_multiply_for_a_scale_of_q() -> None:
    """What the look-back for a scale of q or k passes over: a GELU's ``0.5 * x`` of the layer
    before (an idiom's op), and a multiply of a tensor of another size than q's and k's (a
    table of positions) between them and the one projection of q, k and v (GPT-2's): the
    scores' own scale is then the hint's, q and k the code's. Each alone would be read as one:
    the GELU's multiply is of q's size."""

    def block(x: torch.Tensor, proj: torch.nn.Linear, table: torch.Tensor) -> torch.Tensor:
        h = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))
        _pos = table * 2.0  # another size than q and k: no scale of them
        q, k, v = proj(h).split(64, dim=-1)
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 0.125, dim=-1), v)

    torch.manual_seed(0)
    x, proj, table = torch.randn(2, 16, 64), torch.nn.Linear(64, 192), torch.randn(16, 16)
    with torch.no_grad():
        block(x, proj, table)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            block(x, proj, table)
    hints = from_profiler(prof).hints
    assert {h.pattern for h in hints} >= {"gelu", "attention"}, [h.pattern for h in hints]
    (attention,) = _attention(hints)
    assert not attention.details.get("inputs_maybe_scaled"), attention.suggestion


def _rms_norm_then_attention(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return torch.matmul(torch.matmul(h, h.transpose(-2, -1)).softmax(dim=-1), h)


@pytest.mark.parametrize("how", ["from_profiler", "from_trace"])
def test_a_norms_weight_before_unscaled_attention_stays_the_norms_without_shapes(how: str, tmp_path: Path) -> None:
    """Without shapes, the weight mul of an RMSNorm right before unscaled attention reads as
    attention's optional ``q * scale`` too. Attention, claimed first, left it to the norm
    (``yielding_head``); the norm then left it to that attention (``yielding_tail``, which
    looked for the next idiom among ops attention had already taken): it went to neither, the
    norm's hint five ops and no weight, and attention's look-back read it as a scale of q.
    Now the hints are the live capture's, of the same ops."""
    x, w = torch.randn(2, 16, 64), torch.randn(64)
    _rms_norm_then_attention(x, w)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as live:
        _rms_norm_then_attention(x, w)
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # no record_shapes
        _rms_norm_then_attention(x, w)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    read = from_profiler(prof) if how == "from_profiler" else from_trace(path)

    def found(hints: list[Hint]) -> list[tuple[str, tuple[str, ...]]]:
        return sorted((h.pattern, tuple(h.ops)) for h in hints if h.kind == "fusion")

    assert found(read.hints) == found(from_profiler(live).hints), found(read.hints)
    (norm,) = [h for h in read.hints if h.pattern == "rms_norm"]
    assert norm.ops[-2:] == ["aten::mul", "aten::mul"], norm.ops
    (attention,) = _attention(read.hints)
    assert attention.details.get("scale") == 1.0 and not attention.details.get("inputs_maybe_scaled"), attention.suggestion


def _per_head_layer_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Cohere's LayerNorm of q and k: per head, its weight ``[heads, head_dim]``."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).pow(2).mean(-1, keepdim=True)
    return weight * ((x - mean) * torch.rsqrt(variance + 1e-5))


def test_a_norm_whose_weight_is_applied_after_the_fused_call_is_costed_with_that_pass() -> None:
    """``layer_norm(x, (d,), eps) * weight``, the suggestion for a per-head weight, runs the
    fused call and one elementwise pass more: the estimate counted the fused call alone (the
    cost model's two passes, and every launch and intermediate but the fused call's removed).
    Now its model says three passes, and the estimate is at most the eager form's saving with
    the multiply's launch and the intermediate it reads left in."""
    from neuronscope.analysis import cost
    from neuronscope.analysis.dataflow import graph_from_profiler
    from neuronscope.analysis.fusion import find_matches

    x, weight = torch.randn(2, 16, 4, 16), torch.randn(4, 16)
    _per_head_layer_norm(x, weight)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        _per_head_layer_norm(x, weight)
    (hint,) = [h for h in from_profiler(prof).hints if h.pattern == "layer_norm"]
    assert hint.details.get("vector_shapes") == {"weight": [4, 16]}, hint.details
    assert hint.details["estimate_model"].startswith("sum(op times) - 3 pass(es)"), hint.details["estimate_model"]
    g = graph_from_profiler(prof, None)
    (m,) = [m for m in find_matches(g) if m.pattern == "layer_norm"]
    fused_call_alone, with_the_multiply = (cost.fused_forms_ns("layer_norm", m.nodes, g, "cpu", after=n) for n in (0, 1))
    assert fused_call_alone is not None and with_the_multiply is not None
    assert with_the_multiply["eager"] < fused_call_alone["eager"]
    assert hint.est_saving_us * 1e3 <= max(0.0, *with_the_multiply.values()) + 1e-6, (hint.est_saving_us, with_the_multiply)
