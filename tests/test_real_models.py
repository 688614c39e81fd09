"""Hints on real model code (tests/real_models.py): transformers models built from config,
a nanoGPT, a timm-style ViT block and a ResNet-style block, in inference and in a training
step with AdamW, with the default options of a decorated function.

Per model: exactly the expected idioms are hinted (nothing else), on exact data flow, at a
line of the model's own source, with a suggestion equivalent for that code. Timings are never
asserted (benchmarks/bench_real_models.py compares estimates with hint.verify()).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import real_models as rm

from neuronscope import from_trace, neuron_region, profile_on_neuron
from neuronscope.result.hint import Hint
from neuronscope.result.types import ProfileResult

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


_SUGGESTIONS_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
import real_models as rm
from neuronscope import profile_on_neuron
out = {}
for name in sys.argv[2:]:
    f = profile_on_neuron(rm.step_fn(rm.MODELS[name], False), export=False, backend="cpu", print_summary=False)
    f(); f()
    out[name] = {h.pattern: h.suggestion for h in f.last_result.hints}
json.dump(out, sys.stdout)
"""


def test_suggestions_are_equivalent_for_the_code_in_hand() -> None:
    """In a fresh process: where torch.compile is in use (earlier tests of this session), the
    observation records no Python numbers (see test_observing_a_compiled_function...)."""
    import json
    import os
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), os.environ.get("PYTHONPATH", "")]))
    names = ["llama", "gemma", "t5", "gpt2", "nanogpt", "timm_vit"]
    proc = subprocess.run(
        [sys.executable, "-c", _SUGGESTIONS_SCRIPT, str(here), *names],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    llama = got["llama"]
    assert "rms_norm(x, (64,), weight, eps=1e-06)" in llama["rms_norm"]
    assert 'attn_implementation="sdpa"' in llama["attention"]
    assert "scale=" not in llama["attention"]  # head_dim ** -0.5: sdpa's default
    assert "silu(gate) * up" in llama["silu_mul"]
    gemma = got["gemma"]
    assert "1 + weight" in gemma["rms_norm"]  # Gemma's RMSNorm scales by (1 + weight)
    assert "gelu(gate) * up" in gemma["silu_mul"]
    assert "scale=1.0" in got["t5"]["attention"]  # T5 does not scale the scores
    assert 'approximate="tanh"' in got["gpt2"]["gelu"]
    nano = got["nanogpt"]
    assert "attn_implementation" not in nano["attention"] and "attn_mask=~cond" in nano["attention"]  # masked_fill: inverted
    assert "scale=" not in got["timm_vit"]["attention"]  # scale on q, by head_dim ** -0.5


def test_one_norm_class_over_two_sizes_gets_a_call_for_each() -> None:
    """Qwen3RMSNorm normalises the hidden states (64) and, as q_norm / k_norm, each head (32):
    one line of code, two calls to write (one suggestion for both would raise on either)."""
    (result,) = captured(rm.step_fn(rm.MODELS["qwen3"], False))
    norms: dict[int, list[Hint]] = {}
    for h in result.hints:
        if h.pattern == "rms_norm":
            norms.setdefault(h.details["shape"][-1], []).append(h)
    assert set(norms) == {rm.HIDDEN, 32}
    assert all("rms_norm(x, (64,), weight" in h.suggestion for h in norms[rm.HIDDEN])
    assert all("rms_norm(x, (32,), weight" in h.suggestion for h in norms[32])
    # Two norms per layer and the final one over the hidden size; q_norm and k_norm per layer,
    # one hint over 32 whose two shapes (4 query heads, 2 key heads) are each costed at their own.
    assert [h.calls for h in norms[rm.HIDDEN]] == [2 * rm.LAYERS + 1]
    (heads,) = norms[32]
    assert heads.calls == 2 * rm.LAYERS
    assert sorted((tuple(s["shape"]), s["calls"]) for s in heads.details["shapes"]) == [((2, 16, 2, 32), 2), ((2, 16, 4, 32), 2)]


def test_a_scale_the_observation_could_not_read_is_not_taken_for_the_default() -> None:
    from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg
    from neuronscope.analysis.patterns import REGISTRY

    attention = REGISTRY[0]
    q = TensorArg(1, (2, 4, 8, 16), "float32", 1, 1024)
    s = TensorArg(2, (2, 4, 8, 8), "float32", 2, 512)
    nodes = [
        # q @ q^T: the product's operands as recorded, [.., L, E] @ [.., E, S] (a view of q)
        OpNode(0, "aten::matmul", "matmul", 1, 0, 1, [q, TensorArg(1, (2, 4, 16, 8), "float32", 1, 1024)], [-1, -1]),
        OpNode(1, "aten::mul", "mul", 1, 1, 2, [s, TensorArg(3, (), "float32", 3, 1)], [0, -1]),
        OpNode(2, "aten::softmax", "softmax", 1, 2, 3, [s], [1]),
        OpNode(3, "aten::matmul", "matmul", 1, 3, 4, [s, q], [2, -1]),
    ]
    for n in nodes:
        for p in n.producers:
            if p >= 0:
                nodes[p].consumers.append(n.index)
    g = OpGraph(nodes, "exact")
    assert attention.match is not None  # anchored at its last op, ``@ v``, as every derived matcher
    m = attention.match(g, nodes[3])
    assert m is not None
    assert "scale=<the scale your code applies>" in attention.suggest(m, "cpu")
    nodes[1].consts = (0.25,)  # 16 ** -0.5: sdpa's default
    m = attention.match(g, nodes[3])
    assert m is not None and "scale=" not in attention.suggest(m, "cpu")
    nodes[1].consts = (1.0,)
    m = attention.match(g, nodes[3])
    assert m is not None and "scale=1.0" in attention.suggest(m, "cpu")


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
    # Attention spans lines: it points where it starts, the scores (q @ k^T), not the @ v.
    (attention,) = [h for h in result.hints if h.pattern == "attention"]
    scores = source[int(attention.location.rsplit(":", 1)[1]) - 1]  # type: ignore[union-attr]
    assert "matmul" in scores and "key" in scores and "value" not in scores, scores


def test_the_same_hints_every_time() -> None:
    results = captured(rm.step_fn(rm.MODELS["llama"], False), calls=11, warmup=1, active=10)
    assert len(results) == 10
    first = signature(results[0].hints)
    assert all(signature(r.hints) == first for r in results[1:])


def test_a_capture_without_warm_up_has_exact_links_too() -> None:
    """Nothing observed before it: the capture records allocations itself (profile_memory)."""
    model = rm.MODELS["t5"]
    (result,) = captured(rm.step_fn(model, True), calls=1, warmup=0, active=1, name="t5-no-warmup")
    # the user's options as given; what the capture turned on by itself, and why, beside them
    assert result.options["profile_memory"] is False
    assert result.options_added["profile_memory"]["value"] is True and "warm-up" in result.options_added["profile_memory"]["why"]
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
    assert result.options_added == {}
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
    # A trace's suggestion drops nothing the code does: the weight and the mask are carried
    # over, and what op order cannot show (the eps, a scale's value) is named, not guessed.
    said = {h.pattern: h.suggestion for h in replay.hints if h.kind == "fusion"}
    for h in live.hints:
        if h.pattern == "rms_norm":
            assert ("weight" in said["rms_norm"]) == ("weight" in h.suggestion), said["rms_norm"]
            assert ", None," not in said["rms_norm"] or ", None," in h.suggestion
            assert "eps=<the eps your code uses>" in said["rms_norm"]
        if h.pattern == "attention":
            assert ("attn_mask=" in said["attention"]) == ("attn_mask=" in h.suggestion), said["attention"]


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
