"""Hints on real model code (tests/real_models.py): transformers models built from config,
a nanoGPT, a timm-style ViT block and a ResNet-style block, in inference and in a training
step with AdamW, with the default options of a decorated function.

Per model: exactly the expected idioms are hinted (nothing else), on exact data flow, at a
line of the model's own source, with a suggestion equivalent for that code. Timings are never
asserted (benchmarks/bench_real_models.py compares estimates with hint.verify()).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import real_models as rm

from neuronscope import from_trace, neuron_region, profile_on_neuron
from neuronscope.result import Hint, ProfileResult


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def captured(step: Any, calls: int = 2, **options: Any) -> list[ProfileResult]:
    """Results of a decorated ``step`` called ``calls`` times (default window: one warm-up)."""
    opts: dict[str, Any] = {"export": False, "backend": "cpu", "print_summary": False, "warmup": 1, "active": calls - 1}
    opts.update(options)
    f = profile_on_neuron(step, **opts)
    for _ in range(calls):
        f()
    return list(f.results)


def kinds(hints: list[Hint]) -> set[str]:
    return {f"{h.kind}:{h.pattern}" for h in hints}


def signature(hints: list[Hint]) -> list[tuple[Any, ...]]:
    return sorted((h.kind, h.pattern, tuple(h.ops), h.calls, h.location, h.suggestion) for h in hints)


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
@pytest.mark.parametrize("name", list(rm.MODELS))
def test_exactly_the_expected_hints(name: str, train: bool) -> None:
    model = rm.MODELS[name]
    (result,) = captured(rm.step_fn(model, train))
    assert kinds(result.hints) == rm.expected(model, train), [h.message for h in result.hints]
    for h in result.hints:
        assert h.confidence == "dataflow"
        assert 0 <= h.est_saving_us <= h.time_us and h.time_us > 0
        if h.kind == "fusion":
            # The line that computes, in the model's own source (not a library helper).
            assert h.location is not None and model.source in h.location, h.location
            assert int(h.location.rsplit(":", 1)[1]) > 0


def _suggestions(name: str) -> dict[str, str]:
    (result,) = captured(rm.step_fn(rm.MODELS[name], False))
    return {h.pattern: h.suggestion for h in result.hints}


def test_suggestions_are_equivalent_for_the_code_in_hand() -> None:
    llama = _suggestions("llama")
    assert "rms_norm(x, (64,), weight, eps=1e-06)" in llama["rms_norm"]
    assert 'attn_implementation="sdpa"' in llama["attention"]
    assert "scale=" not in llama["attention"]  # head_dim ** -0.5: sdpa's default
    assert "silu(gate) * up" in llama["silu_mul"]
    gemma = _suggestions("gemma")
    assert "1 + weight" in gemma["rms_norm"]  # Gemma's RMSNorm scales by (1 + weight)
    assert "gelu(gate) * up" in gemma["silu_mul"]
    t5 = _suggestions("t5")
    assert "scale=1.0" in t5["attention"]  # T5 does not scale the scores
    assert 'approximate="tanh"' in _suggestions("gpt2")["gelu"]
    nano = _suggestions("nanogpt")
    assert "attn_implementation" not in nano["attention"] and "attn_mask=mask" in nano["attention"]
    timm = _suggestions("timm_vit")
    assert "scale=" not in timm["attention"]  # scale on q, by head_dim ** -0.5


def test_rotary_points_at_the_line_that_computes() -> None:
    """Not at the decorator above apply_rotary_pos_emb: at ``q_embed = ...``."""
    import transformers.models.llama.modeling_llama as llama_src

    (result,) = captured(rm.step_fn(rm.MODELS["llama"], False))
    (rotary,) = [h for h in result.hints if h.pattern == "rotary_embedding"]
    path, line = rotary.location.rsplit(":", 1)  # type: ignore[union-attr]
    source = Path(llama_src.__file__).read_text().splitlines()
    assert Path(path).name == "modeling_llama.py"
    assert "q_embed" in source[int(line) - 1] and "rotate_half" in source[int(line) - 1]
    (silu,) = [h for h in result.hints if h.pattern == "silu_mul"]
    assert "act_fn" in source[int(silu.location.rsplit(":", 1)[1]) - 1]  # type: ignore[union-attr]


def test_the_same_hints_every_time() -> None:
    results = captured(rm.step_fn(rm.MODELS["llama"], False), calls=11, warmup=1, active=10)
    assert len(results) == 10
    first = signature(results[0].hints)
    assert all(signature(r.hints) == first for r in results[1:])


def test_a_capture_without_warm_up_has_exact_links_too() -> None:
    """Nothing observed before it: the capture records allocations itself (profile_memory)."""
    model = rm.MODELS["t5"]
    (result,) = captured(rm.step_fn(model, True), calls=1, warmup=0, active=1, name="t5-no-warmup")
    assert result.options["profile_memory"] is True
    assert kinds(result.hints) == rm.expected(model, True)
    assert all(h.confidence == "dataflow" for h in result.hints)


def test_a_windowed_region_is_observed_in_its_warm_up_pass() -> None:
    model = rm.MODELS["resnet"]
    step = rm.step_fn(model, True)
    results: list[ProfileResult] = []
    for _ in range(2):
        with neuron_region("resnet-step", warmup=1, active=1, export=False, backend="cpu", print_summary=False) as region:
            step()
        results = region.results
    (result,) = results
    assert result.options["profile_memory"] is False  # links came from the warm-up pass
    assert kinds(result.hints) == rm.expected(model, True)


@pytest.mark.parametrize("name", ["llama", "t5"])
def test_trace_parity(name: str, tmp_path: Path) -> None:
    """from_trace on a run's own trace (a training step): the same idioms and optimizer hint,
    with the same counts, said to rest on op order only, naming what op order cannot give."""
    model = rm.MODELS[name]
    (live,) = captured(rm.step_fn(model, True), export=True, output_dir=str(tmp_path))
    assert live.run_dir is not None
    (trace,) = [p for p in Path(live.run_dir).iterdir() if p.name.startswith("trace.json")]
    replay = from_trace(trace)
    assert sorted((h.pattern, h.calls) for h in replay.hints) == sorted((h.pattern, h.calls) for h in live.hints)
    assert all(h.confidence == "sequence" for h in replay.hints)
    for h in replay.hints:
        if h.kind == "fusion":
            assert h.details["not_from_op_order"] == ["elementwise_chain"]


def test_observing_a_compiled_function_adds_no_recompile() -> None:
    """Dynamo guards compiled code on the torch function mode stack: where torch.compile is
    in use the observation names lines with a trace function instead of a mode, so the
    warm-up's compile serves the capture and no recompile is reported."""

    def norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    compiled = torch.compile(norm, backend="eager")  # Dynamo and its guards, without a slow Inductor build
    x = torch.randn(8, 64)
    (result,) = captured(lambda: compiled(x), name="compiled-norm")
    assert not [h for h in result.hints if h.kind in ("recompile", "graph_break")], [h.message for h in result.hints]
    # The same model gives the same hints and lines with the trace function as with the mode.
    (llama,) = captured(rm.step_fn(rm.MODELS["llama"], False))
    assert kinds(llama.hints) == rm.expected(rm.MODELS["llama"], False)
    (rotary,) = [h for h in llama.hints if h.pattern == "rotary_embedding"]
    assert rotary.location is not None and "modeling_llama.py" in rotary.location
