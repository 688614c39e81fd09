"""Tests of the fusion hints: neuronscope.analysis.fusion, .dataflow and .verify.

Every case runs a real CPU capture (``torch.profiler.profile`` with the default options plus
``record_shapes=True``) of a snippet from tests/fusion_cases.py and checks the pattern found
(or its absence) and the evidence, never the wording of the suggestion.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
from pathlib import Path
from typing import Any

import fusion_cases as fc
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import neuronscope.analysis.fusion as fusion_mod
from neuronscope.analysis.context import AnalysisContext
from neuronscope.analysis.cost import estimate_saving_ns
from neuronscope.analysis.dataflow import graph_from_profiler, graph_from_table
from neuronscope.analysis.fusion import find_sequence_matches, fusion_hints
from neuronscope.analysis.patterns import PATTERNS, REGISTRY, pattern_named
from neuronscope.analysis.patterns.attention import UNKNOWN_SCALE
from neuronscope.capture.observe import observe_dataflow
from neuronscope.drive.pipeline import build_result, from_profiler
from neuronscope.errors import NeuronscopeError
from neuronscope.events import KIND_OP, EventTable, table_from_profiler
from neuronscope.result.hint import Hint
from neuronscope.result.summary import summarize
from neuronscope.result.types import ProfileResult

CASES = {c.name: c for c in fc.cases()}
HERE = Path(__file__).resolve().parent


def capture(run: Any, calls: int = 1, **options: Any) -> Any:
    """A finished CPU profiler around ``calls`` runs of ``run`` (after one warm-up run)."""
    run()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, **options) as prof:
        for _ in range(calls):
            run()
    return prof


def fusion(result: ProfileResult) -> dict[str, Hint]:
    hints = [h for h in result.hints if h.kind == "fusion"]
    by_pattern = {h.pattern: h for h in hints}
    assert len(by_pattern) == len(hints), f"one hint per pattern expected here: {hints}"
    return by_pattern


def check_evidence(h: Hint, confidence: str = "dataflow") -> None:
    assert h.kind == "fusion" and h.pattern in PATTERNS
    assert h.confidence == confidence
    assert h.ops and all(o.startswith("aten::") for o in h.ops)
    assert h.calls >= 1
    assert h.time_us > 0
    # A named idiom is reported even when fusing it would save nothing measurable (0: torch.compile
    # being its only fused form, whose entry cost exceeds what a small idiom saves).
    assert 0 <= h.est_saving_us <= h.time_us
    assert h.suggestion
    assert h.details["shape"]
    if confidence != "sequence":  # a trace records shapes but not dtypes
        assert h.details["dtype"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- the case suite -----------------------------------------------------------------------------


def observed_result(run: Any, calls: int = 1, **options: Any) -> ProfileResult:
    """A default capture (no profile_memory) analysed with an observation pass over the
    warm-up call, as a decorated function or windowed region gets it."""
    with observe_dataflow() as obs:
        run()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, **options) as prof:
        for _ in range(calls):
            run()
    table = table_from_profiler(prof, record_shapes=True)
    return build_result(table, name="observed", backend="cpu", profiler=prof, extra={"observed": obs})


#: What op order and shapes cannot tell, with no links to follow (a default capture): column
#: sums transposed into a row statistic's shape are taken for a softmax's.
OP_ORDER_LIMITS = {"neg_exp_over_transposed_sum": "claimed"}


@pytest.mark.parametrize("mode", ["sequence", "exact", "observed"])
@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, mode: str) -> None:
    """Each case with the default options (no tensor ids, nothing observed: matched on op
    order and shapes, as a trace is, and no chain is claimed), with profile_memory=True
    (links exact, through the profiler's tensor ids) and with an observation pass over the
    warm-up call (links exact, taken from it)."""
    case = CASES[name]
    if mode == "observed":
        result = observed_result(case.run)
    else:
        result = from_profiler(capture(case.run, profile_memory=mode == "exact"))
    got = fusion(result)
    if mode == "sequence" and name in OP_ORDER_LIMITS:
        expect = set(case.absent) if OP_ORDER_LIMITS[name] == "claimed" else set()
        assert set(got) == expect and all(h.confidence == "sequence" for h in got.values()), got
        return
    for pattern, calls in case.expect.items():
        if mode == "sequence" and pattern == "elementwise_chain":
            assert pattern not in got
            continue
        assert pattern in got, f"{name}: no {pattern} hint; got {[h.message for h in got.values()]}"
        check_evidence(got[pattern], "sequence" if mode == "sequence" else "dataflow")
        assert got[pattern].calls == calls
        if mode != "observed":
            assert got[pattern].location is None  # no with_stack
    for pattern in case.absent:
        assert pattern not in got, f"{name}: unexpected {got[pattern].message}"
    if not case.expect and not case.absent:
        assert not got, f"{name} is already fused or not a candidate, got {[h.message for h in got.values()]}"


def test_suite_size() -> None:
    negatives = [c for c in CASES.values() if not c.expect]
    covered = {p for c in CASES.values() for p in c.expect}
    assert len(CASES) >= 30 and len(negatives) >= 10
    assert covered == set(PATTERNS)


def test_ops_are_the_idiom_in_order() -> None:
    got = fusion(from_profiler(capture(CASES["rms_llama_bf16"].run)))
    assert got["rms_norm"].ops == [
        "aten::to", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::to", "aten::mul",
    ]
    got = fusion(from_profiler(capture(CASES["gelu_bert_erf"].run)))
    assert got["gelu"].ops == ["aten::mul", "aten::div", "aten::erf", "aten::add", "aten::mul"]
    assert got["gelu"].details["approximate"] == "none"
    got = fusion(from_profiler(capture(CASES["attn_hf_eager"].run)))
    # The float32 softmax is cast .to(q.dtype), float32 too: no copy, no op in the idiom.
    assert got["attention"].ops == ["aten::matmul", "aten::mul", "aten::add", "aten::softmax", "aten::matmul"]


@pytest.mark.parametrize("name", ["rms_llama_fp32", "gelu_gpt2_tanh", "swiglu_llama_mlp", "attn_masked_fill", "ln_var_mean"])
def test_location_points_at_the_users_line(name: str) -> None:
    case = CASES[name]
    got = fusion(from_profiler(capture(case.run, with_stack=True)))
    (pattern,) = case.expect
    loc = got[pattern].location
    assert loc is not None
    path, line = loc.rsplit(":", 1)
    assert Path(path).name == "fusion_cases.py"
    assert case.where is not None
    lines, first = inspect.getsourcelines(case.where)
    assert first <= int(line) < first + len(lines), f"{loc} is outside {case.where.__qualname__}"


def test_linking_mode_follows_profile_memory() -> None:
    for memory, linking in ((False, "none"), (True, "exact")):
        prof = capture(CASES["rms_llama_bf16"].run, profile_memory=memory)
        graph = graph_from_profiler(prof, table_from_profiler(prof, record_shapes=True))
        assert graph is not None and graph.linking == linking


def test_op_order_finds_what_exact_links_find() -> None:
    """Without ids (and nothing observed) a Llama-style model is matched on op order and
    shapes: the same idioms, as many calls, over several forward passes, as with exact links."""
    case = fc.tiny_llama_case(layers=2)

    def found(memory: bool) -> dict[str, tuple[int, str]]:
        got = fusion(from_profiler(capture(case.run, calls=3, profile_memory=memory)))
        return {p: (h.calls, h.confidence) for p, h in got.items()}

    exact, ordered = found(True), found(False)
    assert set(exact) == set(case.expect) and all(c == "dataflow" for _, c in exact.values())
    assert {p: calls for p, (calls, _) in ordered.items()} == {p: calls for p, (calls, _) in exact.items() if p != "elementwise_chain"}
    assert all(c == "sequence" for _, c in ordered.values())


def test_rms_norm_in_a_training_step_with_a_loss_target() -> None:
    """Forward, loss against a target from outside the capture, backward, optimizer step:
    the target has the shape of the norm's statistic. Pointer links once gave the statistic
    to the loss, and half of these captures named an ``elementwise_chain`` (relu -> pow ->
    mul -> mul) instead of the RMSNorm; op order finds the norm each time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), fc.T5LayerNorm(256), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch, target = torch.randn(32, 64, 256), torch.randn(32, 64, 1)

    def step() -> None:
        torch.nn.functional.mse_loss(model(batch), target).backward()
        opt.step()
        opt.zero_grad()

    found = [sorted(fusion(from_profiler(capture(step))).keys()) for _ in range(8)]
    assert found == [["rms_norm"]] * 8, found


def test_no_norm_from_a_statistic_computed_on_the_side() -> None:
    """The RMS of ``h`` is computed (for monitoring) and returned, while ``h`` is multiplied by
    a tensor of the statistic's shape that an earlier op already read: not a norm, as the data
    flow says. Op order alone (a default capture) cannot tell that tensor from the statistic."""
    x, gate = torch.randn(4, 16, 64), torch.rand(4, 16, 1)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        h = x + gate
        stat = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h * gate, stat

    assert "rms_norm" not in fusion(from_profiler(capture(run, calls=3, profile_memory=True)))
    assert fusion(from_profiler(capture(run, calls=3)))["rms_norm"].confidence == "sequence"


def _training_step(optimizer: str, **opt_kwargs: Any) -> Any:
    """Forward through a hand-written RMSNorm, backward, and an optimizer step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), fc.T5LayerNorm(64), torch.nn.Linear(64, 8))
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=1e-3, **opt_kwargs)
    batch = torch.randn(16, 32, 64)

    def step() -> None:
        model(batch).square().mean().backward()
        opt.step()
        opt.zero_grad()

    return step


def test_an_optimizer_updating_parameter_by_parameter_is_one_hint(calibrated: Any) -> None:
    """AdamW's default CPU update (a chain of elementwise ops per parameter) is one optimizer
    hint naming fused=True, not a fusion hint per parameter, and none of its ops ends up in a
    fusion hint."""
    result = from_profiler(capture(_training_step("AdamW"), with_stack=True))
    (opt,) = [h for h in result.hints if h.kind == "optimizer"]
    assert opt.pattern == "per_parameter_update" and opt.details["optimizer"] == "AdamW"
    assert opt.calls >= 2 and "aten::addcdiv_" in opt.ops and opt.details["ops"] >= 5 * opt.calls
    assert "fused=True" in opt.suggestion and 0 < opt.est_saving_us <= opt.time_us
    # The model on the profiled times, at most what AdamW(fused=True) saves timed here on the
    # model's own parameter shapes (the profiled times carry the profiler's per-op overhead).
    from neuronscope.analysis.cost import fused_optimizer_saving_ns

    shapes = tuple(tuple(p.shape) for p in torch.nn.Sequential(torch.nn.Linear(64, 64), fc.T5LayerNorm(64), torch.nn.Linear(64, 8)).parameters())
    timed = fused_optimizer_saving_ns("AdamW", shapes, "float32", "cpu")  # the analysis' own, cached
    assert timed is not None and opt.details["fused_step_saving_us"] == pytest.approx(timed / 1e3)
    assert opt.est_saving_us <= max(timed, 0.0) / 1e3 + 1e-9
    assert "torch.optim.AdamW(fused=True) saves per step" in opt.details["estimate_model"]
    assert "upper bound" not in opt.details["estimate_model"] and "saving_upper_bound" not in opt.details
    assert opt.location is not None and opt.location.startswith("test_fusion.py:")  # the opt.step() line
    assert set(fusion(result)) == {"rms_norm"}
    update_ops = {"aten::lerp_", "aten::addcmul_", "aten::addcdiv_"}
    assert not any(update_ops & set(h.ops) for h in result.hints if h.kind == "fusion")


def test_a_fused_optimizer_or_single_op_updates_get_no_optimizer_hint() -> None:
    for optimizer, kwargs in (("AdamW", {"fused": True}), ("SGD", {})):
        result = from_profiler(capture(_training_step(optimizer, **kwargs)))
        assert not [h for h in result.hints if h.kind == "optimizer"], optimizer
        assert set(fusion(result)) == {"rms_norm"}, optimizer


def test_an_optimizer_step_that_runs_the_model_leaves_the_forward_to_the_fusion_rules() -> None:
    """opt.step(closure): forward and backward run inside the step's range, before the update.
    The hand-written norm in the closure is still found, and the optimizer hint holds the
    update only."""
    torch.manual_seed(0)
    w, b = torch.nn.Parameter(torch.ones(64)), torch.nn.Parameter(torch.zeros(64))
    opt = torch.optim.AdamW([w, b], lr=1e-3)
    x = torch.randn(16, 64)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w + b).square().mean()
        loss.backward()
        return loss

    result = from_profiler(capture(lambda: opt.step(closure), calls=3))
    assert "rms_norm" in {h.pattern for h in result.hints if h.kind == "fusion"}
    (update,) = [h for h in result.hints if h.kind == "optimizer"]
    assert update.calls >= 2  # chains found: one per parameter, from the update's op order
    assert "aten::addcdiv_" in update.ops and not {"aten::pow", "aten::mean", "aten::rsqrt"} & set(update.ops)


def test_a_chain_through_a_view_keeps_its_link() -> None:
    x = torch.randn(256, 256)
    result = from_profiler(capture(lambda: ((x * 2.0).view(-1) + 1.0).exp(), calls=5, profile_memory=True))
    (chain,) = [h for h in result.hints if h.pattern == "elementwise_chain"]
    assert chain.ops == ["aten::mul", "aten::add", "aten::exp"] and chain.calls == 5


def test_a_chain_needs_exact_links() -> None:
    """Links not made exactly (an activation and an optimizer state of as many elements, one
    after the other) make no chain at all; the same links made exactly do."""
    from neuronscope.analysis.fusion import find_matches
    from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg

    act, state = TensorArg(1, (8, 64, 128), "float32", 1, 65536), TensorArg(2, (512, 128), "float32", 2, 65536)

    def graph(linking: str) -> OpGraph:
        nodes = [
            OpNode(0, "aten::add", "add", 1, 0, 10, inputs=[act, act], producers=[-1, -1]),
            OpNode(1, "aten::mul_", "mul", 1, 20, 30, inputs=[state], producers=[0]),
            OpNode(2, "aten::add_", "add", 1, 40, 50, inputs=[state], producers=[1]),
            OpNode(3, "aten::sqrt", "sqrt", 1, 60, 70, inputs=[state], producers=[2]),
        ]
        for n in nodes:
            for p in n.producers:
                if p >= 0:
                    nodes[p].consumers.append(n.index)
        return OpGraph(nodes, linking)

    unlinked = [m for m in find_matches(graph("none")) if m.pattern == "elementwise_chain"]
    assert unlinked == []
    exact = [m for m in find_matches(graph("exact")) if m.pattern == "elementwise_chain"]
    assert [[n.name for n in m.nodes] for m in exact] == [["aten::add", "aten::mul_", "aten::add_", "aten::sqrt"]]


# ---- grouping, ranking, compiled code ----------------------------------------------------------


def test_grouping_one_hint_per_idiom_with_calls() -> None:
    case = fc.tiny_llama_case(layers=4)
    got = fusion(observed_result(case.run))
    assert {p: h.calls for p, h in got.items()} == case.expect
    for h in got.values():
        check_evidence(h)


def test_four_layers_of_one_norm_are_one_hint() -> None:
    norm = fc.LlamaRMSNorm(fc.HIDDEN)
    layers = [torch.nn.Sequential(norm, torch.nn.Linear(fc.HIDDEN, fc.HIDDEN)) for _ in range(4)]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(2, 8, fc.HIDDEN)
    with torch.no_grad():
        got = fusion(from_profiler(capture(lambda: model(x))))
    assert got["rms_norm"].calls == 4


def test_ranked_by_estimated_saving() -> None:
    big = torch.randn(128, 1024)
    small = torch.randn(2, 64)
    norm = fc.LlamaRMSNorm(1024)

    def run() -> None:
        with torch.no_grad():
            norm(big)
            fc.gelu_erf(small)
            fc.softmax_naive(small)

    hints = [h for h in from_profiler(capture(run, calls=3)).hints if h.kind == "fusion"]
    assert {h.pattern for h in hints} == {"rms_norm", "gelu", "softmax"}
    savings = [h.est_saving_us for h in hints]
    assert savings == sorted(savings, reverse=True)


def test_torch_compiled_function_gets_no_hint() -> None:
    case = fc.compiled_case()
    prof = capture(case.run)
    names = {e.name() for e in prof.profiler.kineto_results.events()}
    assert any(n.startswith("Torch-Compiled Region") for n in names)
    assert not fusion(from_profiler(prof))


# ---- trace files: sequence matching -------------------------------------------------------------


def test_trace_file_gives_sequence_hints(tmp_path: Path) -> None:
    from neuronscope.drive.traces import from_trace

    case = fc.tiny_llama_case(layers=2)
    prof = capture(case.run)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    live = fusion(from_profiler(prof))
    traced = fusion(from_trace(path))
    for pattern in ("rms_norm", "attention", "rotary_embedding", "silu_mul"):
        check_evidence(traced[pattern], confidence="sequence")
        assert traced[pattern].calls == live[pattern].calls
        assert traced[pattern].ops == live[pattern].ops
    assert "elementwise_chain" not in traced  # needs data flow


@pytest.mark.parametrize(
    "first, second",
    [
        ("softmax_naive", "gelu_erf"),  # the softmax's div once read as the GELU's first op: GELU lost
        ("gelu_fast", "gelu_erf"),  # the first GELU took the second's mul: one GELU of ten ops
        ("gelu_erf", "gelu_fast"),
        ("gelu_gpt2", "gelu_gpt2"),
        ("ln_var_rsqrt", "gelu_erf"),  # the norm keeps its weight and bias (the trace's suggestion dropped them)
        ("softmax_max", "softmax_naive"),
        ("rotary", "gelu_erf"),  # the GELU's optional leading ops took the rotary's last add: rotary lost
        ("gelu_erf", "mul_other_shape"),  # a trailing mul of another shape: the GELU was lost whole
    ],
)
def test_idioms_back_to_back_in_a_trace_are_the_live_captures(tmp_path: Path, first: str, second: str) -> None:
    """Two idioms one right after the other, on one tensor: read from the trace (op order and
    shapes only) they are the same hints, of the same ops, as the live capture finds by data
    flow, though an optional trailing op of the first (GELU's last mul, a norm's weight) could as
    well begin the second in op order."""
    from neuronscope.drive.traces import from_trace

    x, w, b = torch.randn(64, 256), torch.randn(256), torch.randn(256)
    cos, sin, row = torch.randn(64, 256), torch.randn(64, 256), torch.randn(1, 256)
    extra = {
        "rotary": lambda x: x * cos + fc.rotate_half(x) * sin,
        "mul_other_shape": lambda x: x * row,
        "ln_var_rsqrt": lambda x: fc.ln_var_rsqrt(x, w, b),
    }

    def run() -> None:
        for name in (first, second):
            (extra.get(name) or getattr(fc, name))(x)

    run()
    prof = capture(run, profile_memory=True)  # exact links live: the reference the trace must meet
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))

    def found(res: Any) -> list[tuple[str, tuple[str, ...], int, str]]:
        return sorted((h.pattern, tuple(h.ops), h.calls, h.suggestion) for h in res.hints if h.kind == "fusion")

    live, traced = found(from_profiler(prof)), found(from_trace(path))
    idioms = sum(name not in ("mul_other_shape",) for name in (first, second))
    assert traced == live and sum(calls for _, _, calls, _ in live) == idioms


@pytest.mark.parametrize(
    "first, second",
    [
        ("rms_reciprocal", "gelu_erf"),  # the norm's optional weight mul took the GELU's first: GELU lost
        ("rms_reciprocal", "gelu_fast"),
        ("gelu_fast", "gelu_erf"),
        ("softmax_naive", "gelu_erf"),
    ],
)
def test_idioms_back_to_back_in_a_trace_without_shapes_are_the_live_captures(tmp_path: Path, first: str, second: str) -> None:
    """Without shapes nothing but op order tells an optional trailing op (a norm's weight)
    from the next idiom's first op: the split is the one that leaves the next idiom whole
    (``_OpText.yielding_tail``), the same ops the live capture finds by data flow."""
    from neuronscope.drive.traces import from_trace

    x = torch.randn(64, 256)

    def run() -> None:
        for name in (first, second):
            getattr(fc, name)(x)

    run()
    live = capture(run, profile_memory=True)
    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # no record_shapes
        run()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))

    def found(res: Any) -> list[tuple[str, tuple[str, ...], int]]:
        return sorted((h.pattern, tuple(h.ops), h.calls) for h in res.hints if h.kind == "fusion")

    assert found(from_trace(path)) == found(from_profiler(live)) and len(found(from_profiler(live))) == 2


def test_a_norms_weight_is_not_taken_for_the_attention_scale_in_a_trace_without_shapes(tmp_path: Path) -> None:
    """An RMSNorm's weight mul right before unscaled attention reads, in op order without
    shapes, as attention's optional scale of q: the attention leaves the op to the idiom that
    ends there (``_OpText.yielding_head``)."""
    from neuronscope.drive.traces import from_trace

    x, w = torch.randn(2, 16, 64), torch.randn(64)

    def run() -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return torch.matmul(torch.matmul(h, h.transpose(-2, -1)).softmax(dim=-1), h)

    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # no record_shapes
        run()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    (attention,) = [h for h in from_trace(path).hints if h.pattern == "attention"]
    assert attention.ops == ["aten::matmul", "aten::softmax", "aten::matmul"]


_IDIOM_MODULE = """\
import functools

import torch


def passing(fn):
    return fn


@passing
@functools.lru_cache(
    maxsize=None,
)
def decorated(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def plain(x, w):
    h = x * _inv_rms(x)
    return h * w


def _inv_rms(x):
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def attention(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) / 8.0
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)
"""


def test_hint_lines_from_a_profilers_stacks(tmp_path: Path) -> None:
    """With torch.profiler's own stacks (with_stack=True, no observation): live, the idiom's
    exact line (a builtin call's) rather than its function's def line (all an operator such
    as ``h * w`` leaves), but not a line in a helper it calls, even one defined below it;
    attention's where it starts (its scores), not its softmax's. From the trace, whose frames
    name functions, the function's ``def`` line, never its decorator's."""
    import importlib.util

    from neuronscope.drive.traces import from_trace

    path = tmp_path / "idioms.py"
    path.write_text(_IDIOM_MODULE)
    spec = importlib.util.spec_from_file_location("idioms", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lines = _IDIOM_MODULE.splitlines()

    def line(text: str) -> str:
        return f"{path}:{next(i for i, t in enumerate(lines, 1) if t.startswith(text))}"

    x, w, q = torch.randn(8, 32), torch.randn(32), torch.randn(2, 4, 16, 8)
    for fn, pattern, live_line, trace_line in (
        (lambda: mod.decorated.__wrapped__(x, w), "rms_norm", "    return x * torch.rsqrt", "def decorated"),
        (lambda: mod.plain(x, w), "rms_norm", "def plain", "def plain"),
        (lambda: mod.attention(q, q, q), "attention", "    s = torch.matmul", "def attention"),
    ):
        prof = capture(fn, with_stack=True)
        (live,) = [h for h in from_profiler(prof).hints if h.pattern == pattern]
        trace = tmp_path / "trace.json"
        prof.export_chrome_trace(str(trace))
        (traced,) = [h for h in from_trace(trace).hints if h.pattern == pattern]
        assert (live.location, traced.location) == (line(live_line), line(trace_line)), pattern


def test_def_line_reads_past_decorators(tmp_path: Path) -> None:
    from neuronscope.capture.frames import def_line

    path = tmp_path / "m.py"
    path.write_text(_IDIOM_MODULE)
    lines = _IDIOM_MODULE.splitlines()
    at = {t: i for i, t in enumerate(lines, 1)}
    assert def_line(str(path), at["@passing"]) == at["def decorated(x, w):"]  # arguments over lines
    assert def_line(str(path), at["def plain(x, w):"]) == at["def plain(x, w):"]
    assert def_line(str(tmp_path / "gone.py"), 3) == 3  # a file not here: the line as recorded


_SOFTCAP_MODULE = """\
import torch


def _scaled(x, cap):
    return x / cap


def softcap(scores, mask, cap):
    scores = scores / cap
    scores = torch.tanh(scores)
    scores = scores * cap
    return scores + mask


def softcap_via_helper(scores, mask, cap):
    y = torch.tanh(_scaled(scores, cap))
    y = y * cap
    return y + mask
"""


def test_a_multi_line_hint_points_at_its_first_line(tmp_path: Path) -> None:
    """Gemma2's attention softcap (``/ softcap``, ``tanh``, ``* softcap``, ``+ mask`` over
    four lines) was reported at its last line: the location is the first line of the code
    the hint covers, in the function that computes its result (not a helper it calls, here
    defined above it), and ``details["end_line"]`` its last, as the message shows."""
    import importlib.util

    import neuronscope as ns

    path = tmp_path / "softcap.py"
    path.write_text(_SOFTCAP_MODULE)
    spec = importlib.util.spec_from_file_location("softcap", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lines = _SOFTCAP_MODULE.splitlines()

    def at(text: str) -> int:
        return next(i for i, t in enumerate(lines, 1) if t.startswith(text))

    scores, mask = torch.randn(8, 4, 64, 64), torch.randn(8, 4, 64, 64)
    for fn, first, last in (
        (mod.softcap, "    scores = scores / cap", "    return scores + mask"),
        (mod.softcap_via_helper, "    y = torch.tanh", "    return y + mask"),
    ):
        wrapped = ns.profile_on_neuron(fn, backend="cpu", export=False, print_summary=False)
        for _ in range(2):
            wrapped(scores, mask, 50.0)
        (hint,) = [h for h in wrapped.last_result.hints if h.pattern == "elementwise_chain"]
        assert hint.ops == ["aten::div", "aten::tanh", "aten::mul", "aten::add"]
        assert (hint.location, hint.details.get("end_line")) == (f"{path}:{at(first)}", at(last)), fn.__name__
        assert f" at {path}:{at(first)}-{at(last)} " in hint.message


def test_sequence_matching_claims_order_not_data_flow() -> None:
    """``x`` scaled by the RMS of another ``y`` of its shape: no hint from the data flow, nor
    by op order from a default capture (its storages show that the ops reading the idiom's
    ``x`` read two tensors), a ``sequence`` hint from a trace (op order and shapes are all it
    has). RMSNorm's op names on five tensors of unrelated shapes are no hint from either."""
    case = CASES["neg_normalise_by_other"]
    for memory in (True, False):
        assert "rms_norm" not in fusion(from_profiler(capture(case.run, profile_memory=memory)))
    table = table_from_profiler(capture(case.run), record_shapes=True)
    ctx = AnalysisContext(table=table, summary=summarize(table), backend="cpu", profiler=None, source="trace")
    (hint,) = fusion_hints(ctx)
    assert hint.pattern == "rms_norm" and hint.confidence == "sequence"
    table = table_from_profiler(capture(CASES["neg_unrelated_adjacent"].run), record_shapes=True)
    assert not fusion_hints(AnalysisContext(table=table, summary=summarize(table), backend="cpu", profiler=None, source="trace"))


def _table(rows: list[tuple[str, list[list[int]]]], dev: bool = False) -> EventTable:
    table = EventTable()
    t = 1_000
    for name, shapes in rows:
        table.append(name, KIND_OP, 1, t, t + 10_000, device=5_000 if dev else 0, shapes=shapes)
        t += 11_000
    table.has_device = dev
    return table


def test_sequence_hints_from_a_hand_built_table() -> None:
    x, r, w = [4, 8, 64], [4, 8, 1], [64]
    rms = [("aten::pow", [x, []]), ("aten::mean", [x, [], [], []]), ("aten::add", [r, [], []]),
           ("aten::rsqrt", [r]), ("aten::mul", [x, r]), ("aten::mul", [w, x])]
    table = _table(rms * 3 + [("aten::linear", [x, [64, 64]])], dev=True)
    ctx = AnalysisContext(table=table, summary=summarize(table), backend="neuron", profiler=None, source="trace")
    (hint,) = fusion_hints(ctx)
    assert hint.pattern == "rms_norm" and hint.calls == 3 and hint.confidence == "sequence"
    assert hint.ops == [n for n, _ in rms]
    assert hint.time_us == pytest.approx(3 * 6 * 5.0)  # device time where there is one
    assert 0 < hint.est_saving_us <= hint.time_us
    assert "rms_norm" in hint.suggestion  # the fused op on Neuron
    # Shapes that do not chain up are no RMSNorm.
    bad = [(n, [[3, 3]] if n == "aten::mean" else s) for n, s in rms]
    t2 = _table(bad)
    assert not fusion_hints(AnalysisContext(table=t2, summary=summarize(t2), backend="cpu"))


def test_op_names_with_spaces_do_not_break_the_sequence_text() -> None:
    """An op name may hold a space before a word a pattern names (a custom op's, a hostile
    file's): as a token it is one word, so no idiom is taken to start inside it (a KeyError),
    and the ops after it keep their places."""
    x, h = [4, 8, 64], [4, 8, 32]
    ops = [("custom::foo mul", [x]), ("aten::neg", [h]), ("aten::cat", [[h, h]]), ("aten::mul", [x, x]), ("aten::add", [x, x]),
           ("aten::mul", [x, x]), ("aten::neg", [h]), ("aten::cat", [[h, h]]), ("aten::mul", [x, x]), ("aten::add", [x, x])]
    table = _table(ops)
    hints = fusion_hints(AnalysisContext(table=table, summary=summarize(table), backend="cpu", source="trace"))
    assert [(h.pattern, h.calls) for h in hints] == [("rotary_embedding", 1)]
    assert hints[0].ops == ["aten::mul", "aten::neg", "aten::cat", "aten::mul", "aten::add"]


def test_sequence_matching_reads_each_idiom_from_its_spellings() -> None:
    """A trace's idioms are matched on the op orders their declared PyTorch spellings run (no
    regular expression per idiom): over every case and a real training trace, every pattern a
    trace can show is found, each match's ops are one of its pattern's orders (views aside),
    and no op that no order names (an autograd node's) is ever part of one."""
    from neuronscope.analysis.opgraph import VIEW_OPS
    from neuronscope.analysis.patterns.spelling import op_orders
    from neuronscope.drive.traces import table_from_trace

    tables = [table_from_profiler(capture(case.run), record_shapes=True) for case in CASES.values()]
    tables.append(table_from_trace(Path(__file__).parent / "data" / "traces" / "training_mm_record_shapes.json.gz")[0])
    found: set[str] = set()
    for g in map(graph_from_table, tables):
        for m in find_sequence_matches(g):
            record = pattern_named(m.pattern)
            assert record is not None and record.spellings
            ops = tuple(n.op for n in g.nodes[m.nodes[0].index : m.nodes[-1].index + 1] if n.op not in VIEW_OPS)
            assert ops in op_orders(record.spellings), (m.pattern, ops)
            found.add(m.pattern)
    assert found == {p.name for p in REGISTRY if p.spellings} == set(PATTERNS) - set(fusion_mod.NOT_FROM_OP_ORDER)


def test_graph_from_table_takes_user_level_ops_only() -> None:
    table = EventTable()
    table.append("aten::rms_norm", KIND_OP, 1, 0, 100)
    table.append("aten::_fused_rms_norm", KIND_OP, 1, 10, 90)
    table.append("aten::pow", KIND_OP, 1, 20, 30)
    table.append("Torch-Compiled Region: 0/0", KIND_OP, 1, 200, 300)
    table.append("aten::mm", KIND_OP, 1, 210, 250)
    table.append("aten::exp", KIND_OP, 1, 400, 410)
    graph = graph_from_table(table)
    assert [n.name for n in graph.nodes] == ["aten::rms_norm", "aten::exp"]
    assert graph.nodes[0].cpu_ns == 100 and graph.linking == "none"


# ---- the estimate model and verify() ------------------------------------------------------------


def test_estimate_model(calibrated: Any) -> None:
    from neuronscope.analysis.cost import device_costs, grounded_saving_ns, model_text

    # Elementwise idiom: one pass stays.
    assert estimate_saving_ns("gelu", [10, 10, 10, 10], [True] * 4) == 30
    # A norm: two passes stay, on every backend (no belief about a machine's fused kernels).
    full = [True, True, False, False, True, True]
    assert estimate_saving_ns("rms_norm", [10, 10, 1, 1, 10, 10], full, "cuda") == 22
    assert estimate_saving_ns("rms_norm", [10, 10, 2, 1, 10, 10], full, "cpu") == 23
    assert estimate_saving_ns("softmax", [5], [True]) == 0
    # The grounded bound: the CPU's kept constants, none for other devices.
    costs = device_costs("cpu")
    assert costs is not None and costs.per_op_ns > 0 and device_costs("cpu") == costs
    sizes = [size for size, _ in costs.bandwidth]
    assert sizes == sorted(sizes) and all(bw > 0 for _, bw in costs.bandwidth)
    assert device_costs("cuda") is None
    assert "measured per-op cost" in model_text("rms_norm", "cpu", bound="measured")
    from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg

    t = TensorArg(1, (256, 1024), "float32", 1, 256 * 1024)
    nodes = [OpNode(0, "aten::exp", "exp", 1, 0, 1, [t], [-1]), OpNode(1, "aten::sin", "sin", 1, 1, 2, [t], [0])]
    saving = grounded_saving_ns("elementwise_chain", nodes, OpGraph(nodes, "exact"), "cpu")
    # A chain is compiled with its region: no entry cost per occurrence.
    assert saving == pytest.approx(costs.per_op_ns + 2 * t.numel * 4 / costs.bytes_per_ns(t.numel * 4))


def test_a_hint_verified_slower_suggests_keeping_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """After verify() measures the fused form slower, the suggestion agrees with the message
    (before: "keep the code as it is" printed, "use ..." still in .suggestion). The real
    measurement, with its verdict set: a loss cannot be had on demand on a shared machine."""
    import dataclasses

    import neuronscope.result.hint as hint_mod
    from neuronscope.result.hint import VERIFIED_SLOWER_TEXT

    (hint,) = fusion(from_profiler(capture(CASES["gelu_gpt2_tanh"].run))).values()
    real = hint_mod.measure
    monkeypatch.setattr(hint_mod, "measure", lambda h, **o: dataclasses.replace(real(h, **o), slower=True))
    slower = hint.verify(repeats=3)
    assert slower.suggestion == VERIFIED_SLOWER_TEXT and VERIFIED_SLOWER_TEXT in str(slower)
    assert slower.details["suggestion_before_verify"] == hint.suggestion != slower.suggestion
    monkeypatch.setattr(hint_mod, "measure", real)
    again = slower.verify(repeats=3)  # measured again: the suggestion comes back unless slower
    assert again.suggestion == (VERIFIED_SLOWER_TEXT if again.details.get("verified_slower") else hint.suggestion)


@pytest.mark.parametrize("name", ["softmax_max", "gelu_gpt2_tanh", "swiglu_sigmoid"])
def test_verify_measures_and_stores(name: str) -> None:
    case = CASES[name]
    result = from_profiler(capture(case.run))
    (hint,) = fusion(result).values()
    # torch has no eager SwiGLU: torch.compile is its only replacement (a few seconds).
    before, result_before = hint.to_dict(), result.to_dict()
    verified = hint.verify(compile=hint.pattern == "silu_mul", repeats=3)
    v = verified.details["verification"]
    assert v["pattern"] == hint.pattern and v["shape"] == hint.details["shape"]
    assert v["chain_us"] > 0
    if hint.pattern == "silu_mul":
        assert v["replacement"] is None  # torch.compile is the only replacement
    else:
        assert v["replacement_us"] is not None and v["replacement_us"] > 0
    assert verified.verified_saving_us == pytest.approx(v["verified_saving_us"])
    assert hint.to_dict() == before and hint.verified_saving_us is None  # a new hint; this one unchanged
    assert result.to_dict() == result_before and hint in result.hints  # and the result it came from
    assert Hint.from_dict(json.loads(json.dumps(verified.to_dict()))) == verified


def test_verify_refuses_what_it_cannot_rebuild() -> None:
    hint = Hint("fusion", "attention", ["aten::matmul"], details={"shape": [2, 4]})
    with pytest.raises(NeuronscopeError, match="not available for pattern 'attention'"):
        hint.verify()
    with pytest.raises(NeuronscopeError, match="record_shapes"):
        Hint("fusion", "rms_norm", ["aten::pow"]).verify()
    if not torch.cuda.is_available():
        with pytest.raises(NeuronscopeError, match="device='cpu'"):
            Hint("fusion", "gelu", ["aten::erf"], details={"shape": [2, 4], "device": "cuda"}).verify(compile=False)
    # SwiGLU has only torch.compile to compare with: without it, the error says so (not that
    # a compile that never ran failed).
    with pytest.raises(NeuronscopeError, match="compile=False left torch.compile out, and torch has no eager replacement"):
        Hint("fusion", "silu_mul", ["aten::silu", "aten::mul"], details={"shape": [2, 8], "device": "cpu"}).verify(compile=False)


def test_nothing_to_match() -> None:
    empty = EventTable()
    assert fusion_hints(AnalysisContext(table=empty, summary=summarize(empty), backend="cpu")) == []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        pass
    assert fusion(from_profiler(prof)) == {}
    # Without record_shapes there are no tensor inputs to follow: op order is all there is.
    run = CASES["rms_llama_fp32"].run
    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    (hint,) = fusion(from_profiler(prof)).values()
    assert hint.pattern == "rms_norm" and hint.confidence == "sequence"


# ---- what a suggestion claims holds for the user's own formula -----------------------------------
def test_a_softmax_over_another_dim_is_suggested_over_that_dim() -> None:
    x = torch.randn(2, 8, 16)
    hint = fusion(from_profiler(capture(lambda: fc.softmax_over_dim1(x), profile_memory=True)))["softmax"]
    assert hint.details["dim"] == -2 and "torch.softmax(x, dim=-2)" in hint.suggestion
    # hint.verify() times the user's formula against the call it suggests: the same numbers.
    chain, replacement, _ = pattern_named("softmax").verify(hint, x, "cpu")
    assert torch.allclose(chain(), fc.softmax_over_dim1(x)) and torch.allclose(replacement(), chain())


def _ln(unbiased: bool | None, correction: int | None = None) -> Any:
    def norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        if correction is not None:
            var = x.var(-1, keepdim=True, correction=correction)
        elif unbiased is None:
            var = x.var(-1, keepdim=True)
        else:
            var = x.var(-1, keepdim=True, unbiased=unbiased)
        return (x - mean) * torch.rsqrt(var + 1e-5) * w + b

    return norm


@pytest.mark.parametrize(
    ("norm", "differs"),
    [(_ln(None), True), (_ln(True), True), (_ln(None, correction=1), True), (_ln(False), False), (_ln(None, correction=0), False)],
)
def test_a_layer_norm_on_the_unbiased_variance_says_layer_norm_differs(norm: Any, differs: bool) -> None:
    """x.var() divides by N - 1 by default, layer_norm by N: the suggestion says so."""
    x, w, b = torch.randn(4, 8, 64), torch.randn(64), torch.randn(64)
    hint = fusion(from_profiler(capture(lambda: norm(x, w, b), profile_memory=True)))["layer_norm"]
    assert hint.details.get("unbiased", False) is differs
    assert ("N - 1" in hint.suggestion and "x1.0079 at 64" in hint.suggestion) is differs
    # The user's spread is what verify() times as the chain.
    chain, replacement, _ = pattern_named("layer_norm").verify(hint, x, "cpu")
    assert torch.allclose(chain(), replacement(), atol=1e-4) is not differs


def test_a_norm_times_another_activation_is_no_weight() -> None:
    """A norm's weight is 1-D of x's last dim (a declared vector): a product of the norm with
    another activation of x's shape is not taken for one, by data flow or by op order."""
    x, y = torch.randn(4, 8, 64), torch.randn(4, 8, 64)

    def run() -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * y

    for result in (from_profiler(capture(run, profile_memory=True)), from_profiler(capture(run))):
        hint = fusion(result)["rms_norm"]
        assert hint.details["weight"] is False and "(x, (64,), None," in hint.suggestion
        assert [o.rsplit("::", 1)[-1] for o in hint.ops] == ["pow", "mean", "add", "rsqrt", "mul"]


def test_a_spellings_own_numbers_are_exact() -> None:
    """A spelling's numbers that are no named parameter are the idiom's: ``pow(3)`` shaped like
    an RMSNorm is no RMSNorm, by exact links (the profiler's recorded scalars) or by an
    observation (the user's Python numbers); its eps and dim are the code's to choose."""
    x, w = torch.randn(4, 8, 64), torch.randn(64)

    def norm(power: int, eps: float, dim: int) -> Any:
        return lambda: w * (x * torch.rsqrt(x.pow(power).mean(dim, keepdim=True) + eps))

    def results(power: int, eps: float, dim: int) -> list[Any]:
        run = norm(power, eps, dim)
        return [from_profiler(capture(run, profile_memory=True)), observed_result(run)]

    for result in results(3, 1e-6, -1):
        assert "rms_norm" not in {h.pattern for h in result.hints}
    for result in results(2, 1e-5, 2):
        hint = fusion(result)["rms_norm"]
        assert hint.details["weight"] is True and len(hint.ops) == 6


def test_verify_rebuilds_the_norm_with_the_eps_the_hint_found() -> None:
    """hint.verify() times the user's formula: with the user's eps, where the hint read it."""
    x = torch.randn(4, 8, 64) * 0.1  # a spread the eps weighs on

    def norm() -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 0.5)

    hint = fusion(from_profiler(capture(norm, profile_memory=True)))["rms_norm"]
    # The eps as an observation reads it from the user's numbers (a capture alone does not
    # record them; in a process where torch.compile ran, nor does an observation).
    hint = dataclasses.replace(hint, details={**hint.details, "eps": 0.5})
    chain, replacement, _ = pattern_named("rms_norm").verify(hint, x, "cpu")
    assert torch.allclose(chain(), norm()) and torch.allclose(replacement(), norm(), atol=1e-6)


def test_a_layer_norm_over_n_minus_2_says_so() -> None:
    x, w, b = torch.randn(4, 8, 256), torch.randn(256), torch.randn(256)
    hint = fusion(from_profiler(capture(lambda: _ln(None, correction=2)(x, w, b), profile_memory=True)))["layer_norm"]
    assert hint.details["correction"] == 2 and "N - 2" in hint.suggestion and "x1.0039 at 256" in hint.suggestion


def test_the_annotated_transformers_layer_norm_is_said_to_differ_twice() -> None:
    """std (unbiased) and eps outside the root: both differences named."""
    hint = fusion(from_profiler(capture(CASES["ln_annotated_std"].run, profile_memory=True)))["layer_norm"]
    assert "not identical" in hint.suggestion and "N - 1" in hint.suggestion and "(std + eps)" in hint.suggestion


_CONSTANTS_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import fusion_cases as fc
from neuronscope import profile_on_neuron
x = torch.randn(4, 8, 64)
out = {}
fns = {name: getattr(fc, name) for name in ("erf_of_half", "gelu_erf", "gelu_fast", "gelu_gpt2")}
for name, fn in {**fns, **fc.NEAR_GELUS_BY_NUMBERS, **fc.GELUS_BY_OTHER_NUMBERS}.items():
    f = profile_on_neuron(fn, export=False, backend="cpu", print_summary=False)
    f(x); f(x)
    out[name] = sorted(h.pattern for h in f.last_result.hints)
json.dump(out, sys.stdout)
"""


def test_gelus_shape_with_other_constants_is_no_gelu_where_the_numbers_were_seen() -> None:
    """0.5 * x * (1 + erf(x * 0.5)): GELU has 1/sqrt(2) there. The observation pass records the
    user's numbers (in a process where torch.compile is not in use: a fresh one); a capture
    alone does not, and the structure cannot tell them apart."""
    import os
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", _CONSTANTS_SCRIPT, str(here)], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert "gelu" in got["gelu_erf"] and "gelu" in got["gelu_fast"] and "gelu" in got["gelu_gpt2"]
    wrong = [name for name in ("erf_of_half", *fc.NEAR_GELUS_BY_NUMBERS) if "gelu" in got[name]]
    missed = [name for name in fc.GELUS_BY_OTHER_NUMBERS if "gelu" not in got[name]]
    assert not wrong and not missed, (wrong, missed)


def _ln_root_mean_square_plus_eps(x: torch.Tensor) -> torch.Tensor:
    d = x - x.mean(-1, keepdim=True)
    return d / (torch.sqrt((d * d).mean(-1, keepdim=True)) + 1e-5)


def _ln_std_without_eps(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)


def _ln_sqrt_of_var_plus_eps(x: torch.Tensor) -> torch.Tensor:
    d = x - x.mean(-1, keepdim=True)
    return d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5)


@pytest.mark.parametrize(
    ("norm", "outside"),
    [(_ln_root_mean_square_plus_eps, True), (_ln_std_without_eps, False), (_ln_sqrt_of_var_plus_eps, False)],
)
def test_an_eps_outside_the_root_is_named_wherever_the_spread_comes_from(norm: Any, outside: bool) -> None:
    """sqrt(mean(d*d)) + eps differs from layer_norm's sqrt(var + eps); no eps at all is no eps
    outside the root."""
    x = torch.randn(4, 8, 64)
    hint = fusion(from_profiler(capture(lambda: norm(x), profile_memory=True)))["layer_norm"]
    assert bool(hint.details.get("eps_outside_root")) is outside
    assert ("(std + eps)" in hint.suggestion) is outside


def test_one_line_on_two_shapes_is_costed_at_each_shape() -> None:
    """Costed (and verified) at the first occurrence's shape, a GELU line run on [8, 16] and on
    [256, 256] promised the small one's saving for both: other feature sizes are other hints;
    batches of other lengths one hint, each shape costed at its own, the savings added."""

    small, large = torch.randn(8, 16), torch.randn(256, 256)
    result = from_profiler(capture(lambda: (fc.gelu_erf(small), fc.gelu_erf(large))))
    gelus = sorted((h for h in result.hints if h.pattern == "gelu"), key=lambda h: h.details["shape"])
    assert [(h.details["shape"], h.calls) for h in gelus] == [([8, 16], 1), ([256, 256], 1)]
    short, long = torch.randn(2, 8, 64), torch.randn(2, 64, 64)
    result = from_profiler(capture(lambda: (fc.gelu_erf(short), fc.gelu_erf(long), fc.gelu_erf(long))))
    (gelu,) = [h for h in result.hints if h.pattern == "gelu"]
    assert gelu.calls == 3 and gelu.details["shape"] == [2, 64, 64]  # the most-called, which verify rebuilds
    assert gelu.details["shapes"] == [{"shape": [2, 64, 64], "calls": 2}, {"shape": [2, 8, 64], "calls": 1}]


def _residual_then_silu_as_tanh(x: torch.Tensor) -> torch.Tensor:
    """A residual add and scales right before SiLU-through-tanh: ops a window can take in."""
    h = x + x.flip(-1)
    h = h * x * 0.9 * 1.1
    return fc.silu_as_tanh(h)


@pytest.mark.parametrize(
    ("fn", "is_gelu"),
    [(fc.gelu_gpt2, True), (fc.gelu_fast, True), (fc.gelu_erf, True), (fc.silu_as_tanh, False), (_residual_then_silu_as_tanh, False)],
)
def test_a_traces_gelu_needs_a_cubic_term_under_tanh(tmp_path: Path, fn: Any, is_gelu: bool) -> None:
    """From op order alone: SiLU written through tanh (``tanh(x / 2)``) is no GELU, nor with a
    residual add and scales before it."""
    from neuronscope.drive.traces import from_trace

    x = torch.randn(4, 8, 64)
    prof = capture(lambda: fn(x))
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    assert ("gelu" in {h.pattern for h in from_trace(path).hints}) is is_gelu


@pytest.mark.parametrize(
    ("act", "spelling"),
    [("silu", lambda g, u: torch.nn.functional.silu(g) * u), ("silu", lambda g, u: g * torch.sigmoid(g) * u), ("gelu", lambda g, u: torch.nn.functional.gelu(g, approximate="tanh") * u)],
)
def test_the_glu_family_says_which_activation(act: str, spelling: Any, tmp_path: Any) -> None:
    """silu_mul covers SwiGLU and GeGLU: details["activation"] and the text name it, live and from
    the trace."""
    from torch.profiler import ProfilerActivity, profile

    g, u = torch.randn(8, 64), torch.randn(8, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        spelling(g, u)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    from neuronscope import from_trace

    for result in (from_profiler(prof), from_trace(tmp_path / "t.json")):
        (h,) = [h for h in result.hints if h.pattern == "silu_mul"]
        assert h.details["activation"] == act and f"{act}(gate) * up" in h.suggestion
        assert ("GeGLU" if act == "gelu" else "SwiGLU") in h.suggestion
        assert "MLP block" not in h.suggestion  # a gate anywhere (Mamba's y * silu(z)), not only an MLP's


#: nn.MultiheadAttention with its default need_weights=True, decorated; its attention hints'
#: suggestions and scales. A file of its own: the observation names only lines of code in files.
_MHA_WITH_WEIGHTS = """
import json, torch
from neuronscope import profile_on_neuron

torch.manual_seed(0)
mha = torch.nn.MultiheadAttention(128, 4, batch_first=True).eval()
q, x = torch.randn(2, 1, 128), torch.randn(2, 16, 128)
f = profile_on_neuron(lambda: mha(q, x, x)[0], export=False, print_summary=False, backend="cpu")
with torch.no_grad():
    f()
    f()
HINTS = [[h.suggestion, h.details.get("scale")] for h in f.last_result.hints if h.pattern == "attention"]
if __name__ == "__main__":
    print(json.dumps(HINTS))
"""


def test_multihead_attention_with_weights_is_told_need_weights_false(tmp_path: Path) -> None:
    """nn.MultiheadAttention's default need_weights=True writes attention out inside
    F.multi_head_attention_forward: the advice is its switch, and no number of that enclosing
    call (embed_dim=128) is read as the scale of an op inside it. After a torch.compile in
    this process the observation names lines only (no enclosing call to name the switch by):
    then the same code runs in a fresh process, so the switch is checked whatever ran before."""
    import runpy

    from reliability_helpers.fresh import run_fresh

    from neuronscope.capture.observe import _compile_in_use

    script = tmp_path / "mha_with_weights.py"
    script.write_text(_MHA_WITH_WEIGHTS)
    if _compile_in_use():
        hints = json.loads(run_fresh(tmp_path / "fresh", f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"))
    else:
        hints = runpy.run_path(str(script))["HINTS"]
    ((suggestion, scale),) = hints
    assert scale != 128.0 and "attn_implementation" not in suggestion, suggestion
    assert "need_weights=False" in suggestion, suggestion


def test_the_sdpa_switch_is_named_only_where_the_model_class_declares_it() -> None:
    """attn_implementation="sdpa" is the advice only for a model module whose classes declare
    they take it (DeBERTa-v2's raise ValueError for it); a module that says nothing: None."""
    import importlib

    from neuronscope.analysis.patterns.attention import supports_sdpa_switch

    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    deberta = importlib.import_module("transformers.models.deberta_v2.modeling_deberta_v2")
    assert supports_sdpa_switch(llama.__file__) is True
    assert supports_sdpa_switch(deberta.__file__) is False
    assert supports_sdpa_switch(__file__) is None


class _GeluFunction(torch.autograd.Function):
    """GELU written out inside a custom autograd.Function's forward, as Bloom's GeLUFunction."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def test_an_idiom_inside_an_autograd_functions_forward_is_found() -> None:
    """The profiler records an autograd.Function's forward as one op named after its class:
    the ops it ran are the user's, matched as any others (decorated, and with profile_memory)."""
    from torch.profiler import profile

    from neuronscope import profile_on_neuron

    x = torch.randn(8, 64, requires_grad=True)
    f = profile_on_neuron(lambda: _GeluFunction.apply(x).sum().backward(), export=False, print_summary=False, backend="cpu")
    f()
    f()
    assert [h.pattern for h in f.last_result.hints if h.kind == "fusion"] == ["gelu"]
    with profile(record_shapes=True, profile_memory=True) as prof:
        _GeluFunction.apply(x).sum().backward()
    assert [h.pattern for h in from_profiler(prof).hints if h.kind == "fusion"] == ["gelu"]


def _drop_path(x: torch.Tensor, p: float = 0.1) -> torch.Tensor:
    """timm / DINOv2's DropPath, in a training step."""
    keep = 1 - p
    mask = keep + torch.rand((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype)
    mask.floor_()
    return x.div(keep) * mask


def test_droppath_in_a_training_step_is_an_elementwise_chain() -> None:
    """A layer scale, then DropPath's div and mask multiply: dependent elementwise ops on the
    activation, found in a training step (the backward's reads of what the forward saved do
    not end the chain, and the random mask, made after the chain started but not from it, is
    one more input)."""
    from neuronscope import profile_on_neuron

    torch.manual_seed(0)
    fc, gamma = torch.nn.Linear(64, 64), torch.nn.Parameter(torch.full((64,), 1e-5))
    x = torch.randn(8, 16, 64)
    f = profile_on_neuron(lambda: (x + _drop_path(fc(x) * gamma)).pow(2).mean().backward(), export=False, print_summary=False, backend="cpu")
    f()
    f()
    (chain,) = [h for h in f.last_result.hints if h.pattern == "elementwise_chain"]
    assert {"aten::div", "aten::floor_"} <= set(chain.ops) and chain.ops.count("aten::mul") >= 2


def _grn(x: torch.Tensor) -> torch.Tensor:
    """ConvNeXtV2's global response norm: a chain whose first op is on a per-channel statistic."""
    gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
    nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
    return 0.5 * (x * nx) + 0.1 + x


def test_one_chain_line_on_two_channel_counts_is_two_hints() -> None:
    """The chain's shape is its largest input's, not its first op's (GRN's ``mean + eps`` on a
    per-channel statistic): two GRNs of other channel counts are two hints, each costed at its
    own shape."""
    from neuronscope import profile_on_neuron

    small, large = torch.randn(2, 8, 8, 16), torch.randn(2, 4, 4, 32)
    f = profile_on_neuron(lambda: (_grn(small), _grn(large)), export=False, print_summary=False, backend="cpu")
    with torch.no_grad():
        f()
        f()
    chains = sorted((h for h in f.last_result.hints if h.pattern == "elementwise_chain"), key=lambda h: h.details["shape"][-1])
    assert [(h.details["shape"], h.calls) for h in chains] == [([2, 8, 8, 16], 1), ([2, 4, 4, 32], 1)]


def _gemma_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return h * (1.0 + w.float())


def test_a_gemma_norm_from_its_trace_is_the_live_hint(tmp_path: Any) -> None:
    """Gemma's ``x * (1 + weight)``: the trace's op order holds the add on the weight, so its
    hint has the live one's ops and suggestion (before, it stopped before the add)."""
    from torch.profiler import ProfilerActivity, profile

    from neuronscope import from_trace

    x, w = torch.randn(4, 16, 64), torch.randn(64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        _gemma_norm(x, w)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    (live,) = [h for h in from_profiler(prof).hints if h.pattern == "rms_norm"]
    (traced,) = [h for h in from_trace(tmp_path / "t.json").hints if h.pattern == "rms_norm"]
    assert traced.ops == live.ops and traced.details.get("weight_plus_one") is True
    assert "1 + weight" in traced.suggestion and "1 + weight" in live.suggestion


def test_a_gelu_times_a_per_channel_statistic_is_no_glu() -> None:
    """ConvNeXtV2: a GELU, then its global response norm multiplies it by a per-channel
    statistic of itself: not a second projection of the same shape, so no silu_mul."""
    x = torch.randn(2, 8, 8, 64)

    def block() -> torch.Tensor:
        h = torch.nn.functional.gelu(x)
        gx = torch.norm(h, p=2, dim=(1, 2), keepdim=True)
        return h * (gx / (gx.mean(dim=-1, keepdim=True) + 1e-6))

    for prof in (capture(block), capture(block, profile_memory=True)):
        assert "silu_mul" not in {h.pattern for h in from_profiler(prof).hints}


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


_T = 6
_CAUSAL = torch.tril(torch.ones(_T, _T)).view(1, 1, _T, _T)
_KEEP = torch.rand(2, 1, _T, _T) > 0.3
_KEEP[..., 0] = True  # no row all masked: there masked_fill gives NaN where sdpa may not
_FLOAT_MASK = torch.zeros(2, 1, _T, _T).masked_fill(~_KEEP, float("-inf"))
_BIAS = torch.randn(1, 2, _T, _T)

#: Each way code masks attention scores, and what the names of the suggestion stand for there.
MASKINGS: dict[str, tuple[Any, dict[str, torch.Tensor]]] = {
    # nanoGPT: fill where the buffer is 0
    "masked_fill": (lambda s: s.masked_fill(_CAUSAL == 0, float("-inf")), {"cond": _CAUSAL == 0}),
    "where_keep": (lambda s: torch.where(_KEEP, s, float("-inf")), {"cond": _KEEP, "keep": _KEEP}),
    "where_fill": (lambda s: torch.where(~_KEEP, float("-inf"), s), {"cond": ~_KEEP, "keep": _KEEP}),
    "where_fill_tensor": (lambda s: torch.where(~_KEEP, _FLOAT_MASK.min(), s), {"cond": ~_KEEP}),
    "add": (lambda s: s + _FLOAT_MASK, {"mask": _FLOAT_MASK}),
    "bias_add": (lambda s: s + _BIAS + _FLOAT_MASK, {"bias": _BIAS, "mask": _FLOAT_MASK}),  # T5
}


@pytest.mark.parametrize("way", list(MASKINGS))
def test_attention_suggestion_gives_the_same_output_as_the_code(way: str) -> None:
    """The suggestion's scaled_dot_product_attention call, evaluated as written with its names
    bound to what its note says they are, gives the code's output: a masked_fill's mask is
    True where attention is blocked, sdpa's boolean mask where it is allowed."""
    from neuronscope import profile_on_neuron

    apply_mask, names = MASKINGS[way]
    q, k, v = torch.randn(2, 2, _T, 8), torch.randn(2, 2, _T, 8), torch.randn(2, 2, _T, 8)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.matmul(apply_mask(_scores(q, k)).softmax(dim=-1), v)

    f = profile_on_neuron(attention, export=False, backend="cpu", print_summary=False)
    f(q, k, v)
    expected = f(q, k, v)
    (hint,) = [h for h in f.last_result.hints if h.pattern == "attention"]
    assert hint.details["k"] == list(k.shape)  # as sdpa takes it, not k^T
    (call,) = re.findall(r"torch\.nn\.functional\.scaled_dot_product_attention\([^)]*\)", hint.suggestion)
    # Where torch.compile ran earlier in the process, the observation records no numbers:
    # the scale is named, for the reader to fill in (here, the one the code applies).
    call = call.replace(UNKNOWN_SCALE, repr(q.shape[-1] ** -0.5))
    got = eval(call, {"torch": torch}, {"q": q, "k": k, "v": v, **names})  # the suggestion is our own text
    assert torch.allclose(got, expected, atol=1e-6), (way, call)


def _t5_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """T5's: unscaled scores, a position bias and a mask added, the softmax taken on a float32
    copy and cast back."""
    s = torch.matmul(q, k.transpose(3, 2)) + bias + mask
    return torch.matmul(torch.nn.functional.softmax(s.float(), dim=-1).type_as(s), v)


def _deberta_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """DeBERTa-v2's: 3-d ``bmm`` with k scaled, the scores and probabilities viewed to 4-d and back."""
    s = torch.bmm(q, k.transpose(-1, -2) / 4.0).view(-1, 2, _T, _T)
    p = torch.softmax(s.masked_fill(~keep, torch.finfo(s.dtype).min), dim=-1)
    return torch.bmm(p.view(-1, _T, _T), v)


def _softcapped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Gemma2's: the scores capped (``tanh(s / cap) * cap``) before the softmax."""
    s = torch.matmul(q, k.transpose(-2, -1)) * 0.25
    return torch.matmul((torch.tanh(s / 50.0) * 50.0).softmax(dim=-1), v)


def _attention_hints(fn: Any) -> tuple[list[Hint], list[Hint]]:
    """The attention hints of a decorated capture of ``fn`` and of a profile of it read by op order."""
    from neuronscope import profile_on_neuron

    f = profile_on_neuron(fn, export=False, backend="cpu", print_summary=False)
    f()
    f()
    with profile(record_shapes=True) as prof:
        fn()
    return [h for h in f.last_result.hints if h.pattern == "attention"], [h for h in from_profiler(prof).hints if h.pattern == "attention"]


def test_what_code_writes_between_scores_softmax_and_values_is_a_slot_of_the_spellings_ops() -> None:
    """Between attention's matmuls and its softmax the graph matcher takes any chain of the ops
    the spellings write there: T5's casts, which copy in bfloat16 (found by op order too: a
    spelling writes them), and DeBERTa's views around them; never an op no spelling writes
    there, such as a softcap's tanh (sdpa caps nothing)."""
    q, k, v = (torch.randn(2, 2, _T, 16, dtype=torch.bfloat16) for _ in range(3))
    bias, mask = torch.randn(1, 2, _T, _T, dtype=torch.bfloat16), torch.zeros(2, 1, _T, _T, dtype=torch.bfloat16)
    live, traced = _attention_hints(lambda: _t5_attention(q, k, v, bias, mask))
    assert [h.ops for h in live] == [h.ops for h in traced] == [
        ["aten::matmul", "aten::add", "aten::add", "aten::to", "aten::softmax", "aten::type_as", "aten::matmul"]
    ]
    assert (live[0].details["mask"], live[0].details["scale"]) == ("bias, add", 1.0)

    q3, k3, v3 = (torch.randn(4, _T, 8) for _ in range(3))
    live, _ = _attention_hints(lambda: _deberta_attention(q3, k3, v3, _KEEP))
    assert [h.details["mask"] for h in live] == ["masked_fill"]

    q4, k4, v4 = (torch.randn(2, 2, _T, 8) for _ in range(3))
    live, traced = _attention_hints(lambda: _softcapped_attention(q4, k4, v4))
    assert live == traced == []
