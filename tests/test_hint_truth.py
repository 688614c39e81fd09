"""Hints that hold up when a user checks them: every profiled call is covered, a trace's hint
suggests no argument list it cannot know, a measured loss is said plainly, one answer to
"is this frame user code"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

import neuronscope
from neuronscope.result.hint import Hint


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h


def _two_norms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _rms(_rms(x, w).relu(), w)


def test_compare_hint_covers_every_profiled_call(tmp_path: Any, calibrated: Any) -> None:
    """The observation of one warm-up call links every profiled call, not only the first."""
    x, w = torch.randn(8, 32), torch.randn(32)
    c = neuronscope.compare({"eager": _two_norms}, x, w, output_dir=str(tmp_path), active=3, time_budget=0.5)
    r = c.results["eager"]
    pow_calls = next(o.calls for o in r.ops if o.name == "aten::pow")
    (hint,) = [h for h in r.hints if h.pattern == "rms_norm"]
    assert pow_calls == 6
    assert hint.calls == pow_calls
    # compare's "Top hint" is the hint's share of the profiled calls' time: the hint's saving,
    # summed over all three calls, against the three calls' time together
    calls_us = sum(r.regions[f"eager#{i}"].time_us for i in range(3))
    assert c.rows[0].top_hint == f"rms_norm (~{min(hint.est_saving_us / calls_us, 1.0):.0%} of its time)"


def test_events_frames_use_the_one_answer() -> None:
    from neuronscope.capture import frames as cf
    from neuronscope.events import locations as ef

    # a helper of a model library is not the user's line, in a trace as live
    assert ef.user_location("transformers/activations.py(40): forward") is None
    assert cf.is_user_file.cache_info().maxsize == cf.CACHE_SIZE  # bounded


def _rms_hint() -> Hint:
    return Hint(
        kind="fusion", pattern="rms_norm", ops=["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"],
        calls=2, time_us=100.0, est_saving_us=38.8, suggestion="use torch.nn.functional.rms_norm(x, (32,), weight, eps=1e-06)",
        details={"shape": [8, 32], "dtype": "float32", "device": "cpu", "weight": True},
    )


def _fake_rounds(monkeypatch: Any, chain: list[float], fused: list[float]) -> None:
    """The rounds verify() timed, fixed: the decision it makes from them is what is tested."""
    from neuronscope.capture import verify

    monkeypatch.setattr(verify, "time_variants", lambda variants, *a: {name: list(chain if name == "chain" else fused) for name in variants})


def test_a_verified_loss_is_said_plainly(monkeypatch: Any) -> None:
    _fake_rounds(monkeypatch, [10.0] * 9, [50.0] * 9)
    given = _rms_hint()
    before = given.to_dict()
    h = given.verify(compile=False)
    v = h.details["verification"]
    assert v["slower"] and v["verified_saving_us"] < 0 and h.verified_saving_us == v["verified_saving_us"]
    assert given.to_dict() == before and "rms_norm(" in given.message  # a new hint; the one given is unchanged
    assert h.est_saving_us <= 0 and "save ~" not in h.message
    assert "verify measured the fused form slower here: keep the code as it is on this device" in h.message
    assert "rms_norm(" not in h.message  # no longer recommends what it measured slower
    assert Hint.from_dict(h.to_dict()).message == h.message  # survives export


def test_a_verified_gain_keeps_the_suggestion(monkeypatch: Any) -> None:
    _fake_rounds(monkeypatch, [50.0] * 9, [10.0] * 9)
    h = _rms_hint().verify(compile=False)
    v = h.details["verification"]
    assert not v["slower"] and not v["notes"] and h.est_saving_us == 38.8
    assert "rms_norm(" in h.message and "measured: 80.0 us" in h.message


def test_verify_notes_rounds_that_disagree_widely(monkeypatch: Any) -> None:
    _fake_rounds(monkeypatch, [10.0, 12.0, 400.0, 11.0, 10.0, 900.0, 10.0, 10.0, 10.0], [5.0] * 9)
    notes = _rms_hint().verify(compile=False).details["verification"]["notes"]
    assert notes and "disagree widely" in notes[0] and "chain" in notes[0]


def test_a_traces_rms_norm_saving_counts_its_intermediates(monkeypatch: Any, tmp_path: Any) -> None:
    """The cost model's second bound on a trace (ops in order, no links) counts the
    intermediates the chain passes on, as on a live capture: it was 0 there before."""
    from torch.profiler import profile

    from neuronscope.analysis import calibration, cost
    from neuronscope.analysis.dataflow import graph_from_profiler, graph_from_table
    from neuronscope.analysis.fusion import find_matches, find_sequence_matches
    from neuronscope.events.trace_reader import read_files

    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(record_shapes=True, profile_memory=True) as prof:
        _rms(x, w)
    live = graph_from_profiler(prof, None)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    table, _ = read_files([tmp_path / "trace.json"])
    trace = graph_from_table(table)
    (lm,) = [m for m in find_matches(live) if m.pattern == "rms_norm"]
    (tm,) = [m for m in find_sequence_matches(trace) if m.pattern == "rms_norm"]
    free_launches = calibration.Calibration(0.0, ((1, 1.0),))  # 1 byte per ns at every size
    monkeypatch.setattr(cost, "device_costs", lambda *a, **k: free_launches)
    monkeypatch.setattr(cost, "compiled_call_ns", lambda *a, **k: 0.0)
    on_trace = cost.grounded_saving_ns("rms_norm", tm.nodes, trace, "cpu")
    on_links = cost.grounded_saving_ns("rms_norm", lm.nodes, live, "cpu")
    assert on_trace is not None and on_trace > 0
    assert on_trace == on_links
    # The trailing mul by a (256,) tensor is the weight: the trace says what the live graph says.
    assert tm.params == lm.params == {"weight": True, "bias": False}



def test_a_trace_without_shapes_names_the_weight_as_the_users_to_carry(tmp_path: Any) -> None:
    """Without shapes a trailing mul may or may not be a weight: the suggestion says so."""
    from torch.profiler import profile

    from neuronscope.analysis.dataflow import graph_from_table
    from neuronscope.analysis.fusion import find_sequence_matches
    from neuronscope.analysis.patterns import pattern_named
    from neuronscope.events.trace_reader import read_files

    with profile() as prof:
        _rms(torch.randn(8, 32), torch.randn(32))
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    table, _ = read_files([tmp_path / "trace.json"])
    (m,) = [m for m in find_sequence_matches(graph_from_table(table)) if m.pattern == "rms_norm"]
    text = pattern_named("rms_norm").suggest(m, "cpu")  # type: ignore[union-attr]
    assert "<weight, if your code multiplies by one>" in text and "None" not in text
    assert "eps=<the eps your code uses>" in text


@pytest.mark.parametrize("record_shapes", [True, False])
def test_a_traced_layer_norm_suggestion_keeps_what_its_shapes_show(tmp_path: Any, record_shapes: bool) -> None:
    """From a trace, LayerNorm's weight and bias are the mul and add with a (d,) operand,
    whatever the order the code applies them in; without shapes the suggestion says they are
    the user's to carry over. It once suggested layer_norm(x, (256,), None, None, eps) for a
    norm with both."""
    from torch.profiler import profile

    from neuronscope.analysis.dataflow import graph_from_table
    from neuronscope.analysis.fusion import find_sequence_matches
    from neuronscope.analysis.patterns import pattern_named
    from neuronscope.events.trace_reader import read_files

    x, w, b = torch.randn(8, 32), torch.randn(32), torch.randn(32)

    def layer_norm(x: Any, w: Any, b: Any) -> Any:
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + 1e-5) * w + b

    def annotated(x: Any, w: Any, b: Any) -> Any:  # The Annotated Transformer's order
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return w * (x - mean) / (std + 1e-6) + b

    def bare(x: Any) -> Any:  # no affine parameters at all
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + 1e-5)

    with profile(record_shapes=record_shapes) as prof:
        layer_norm(x, w, b)
        torch.relu(x)  # apart, as the two norms of a model are
        annotated(x, w, b)
        torch.relu(x)
        bare(x)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    table, _ = read_files([tmp_path / "trace.json"])
    matches = [m for m in find_sequence_matches(graph_from_table(table)) if m.pattern == "layer_norm"]
    assert len(matches) == 3
    for m, affine, outside in zip(matches, (True, True, False), (False, True, False)):
        text = pattern_named("layer_norm").suggest(m, "cpu")  # type: ignore[union-attr]
        assert "eps=<the eps your code uses>" in text
        # The Annotated Transformer's (std + eps) is said from op order too.
        assert bool(m.params.get("eps_outside_root")) is outside and ("(std + eps)" in text) is outside
        affine_params = {"weight": m.params["weight"], "bias": m.params["bias"]}
        if not record_shapes:
            assert "<weight, if your code multiplies by one>, <bias, if your code adds one>" in text
        elif affine:
            assert affine_params == {"weight": True, "bias": True} and "(32,), weight, bias," in text
        else:
            assert affine_params == {"weight": False, "bias": False} and "(32,), None, None," in text


def test_a_cpu_capture_without_shapes_gives_an_upper_bound_and_says_so(calibrated: Any) -> None:
    """Without shapes no measured cost bounds a CPU estimate: the profiled op times alone were
    5-150x what hint.verify() measured. The hint says "up to", and why; with shapes it is
    bounded and says so."""
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.drive.pipeline import from_profiler

    x, w = torch.randn(64, 256), torch.randn(256)
    for record_shapes in (False, True):
        _rms(x, w)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
            _rms(x, w)
        (h,) = [h for h in from_profiler(prof).hints if h.pattern == "rms_norm"]
        model = h.details["estimate_model"]
        if record_shapes:
            assert "saving_upper_bound" not in h.details and "at most" in model and "upper bound" not in model
            assert f"save ~{h.saving_text[1:]}" in h.message and "up to" not in h.message
        else:
            assert h.details["saving_upper_bound"] is True and "at most" not in model
            assert "an upper bound" in model and "record_shapes=True" in model
            assert h.saving_text.startswith("up to ~") and f"save {h.saving_text}:" in h.message


def test_a_hint_whose_fused_forms_are_no_faster_here_recommends_nothing(monkeypatch: Any) -> None:
    """Where this device's measured costs put every fused form no faster (compiled code's entry
    above what fusing removes, no eager replacement), the hint's saving is 0 and its message
    names no replacement ("save ~0.0 us: use rms_norm" recommended a change promising nothing);
    a gain verify() measures later brings the suggestion back."""
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.analysis import calibration, cost
    from neuronscope.drive.pipeline import from_profiler
    from neuronscope.result.hint import NO_FASTER_TEXT

    monkeypatch.setattr(cost, "device_costs", lambda *a, **k: calibration.Calibration(1.0, ((1, 1e9),)))
    monkeypatch.setattr(cost, "compiled_call_ns", lambda *a, **k: 1e6)
    monkeypatch.setattr(cost, "eager_costs", lambda *a, **k: None)
    x, w = torch.randn(64, 256), torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        _rms(x, w)
    (h,) = [h for h in from_profiler(prof).hints if h.pattern == "rms_norm"]
    assert h.est_saving_us == 0.0 and h.details["fused_no_faster"] is True and h.expects_no_saving
    assert NO_FASTER_TEXT in h.message and h.suggestion not in h.message and "save ~" not in h.message
    h = replace(h, verified_saving_us=5.0)  # verify() measured a gain after all: its suggestion stands
    assert not h.expects_no_saving and h.suggestion in h.message and "(measured: 5.0 us)" in h.message


def test_verify_on_a_device_this_torch_cannot_run_says_what_to_do() -> None:
    """An MTIA hint read from a trace, verified here: a NeuronscopeError naming device='cpu', not
    torch's own "not compiled with MTIA" assertion."""
    from neuronscope.errors import NeuronscopeError

    hint = _rms_hint()
    hint = replace(hint, details={**hint.details, "device": "mtia"})
    with pytest.raises(NeuronscopeError, match="device='cpu'"):
        hint.verify()


def test_compare_top_hint_reads_as_the_hint_does() -> None:
    from neuronscope.compare.variants import _hint_text

    hint = _rms_hint()
    assert _hint_text(hint, 100.0) == "rms_norm (~39% of its time)"
    hint = replace(hint, details={**hint.details, "saving_upper_bound": True})
    assert _hint_text(hint, 100.0) == "rms_norm (up to ~39% of its time)"
    hint = replace(hint, details={**hint.details, "fused_no_faster": True})
    assert _hint_text(hint, 100.0) == "rms_norm (no saving expected)" and hint.saving_text == "no saving expected"


# ---- the estimate weighs the fused forms as verify() does -------------------------------------


def _rms_nodes() -> tuple[list[Any], Any]:
    from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg

    x, row = TensorArg(1, (64, 256), "float32", 1, 64 * 256), TensorArg(2, (64, 1), "float32", 2, 64)
    ops = ["pow", "mean", "add", "rsqrt", "mul", "mul"]
    ins = [[x], [x], [row], [row], [x, row], [x]]
    prods = [[-1], [0], [1], [2], [-1, 3], [4]]
    nodes = [OpNode(i, f"aten::{op}", op, 1, i, i + 1, a, p) for i, (op, a, p) in enumerate(zip(ops, ins, prods))]
    return nodes, OpGraph(nodes, "exact")


def _inject(monkeypatch: Any, *, per_op: float, entry: float, eager: tuple[float, float] | None) -> None:
    from neuronscope.analysis import calibration, cost

    monkeypatch.setattr(cost, "device_costs", lambda *a, **k: calibration.Calibration(per_op, ((1, 1.0),)))
    monkeypatch.setattr(cost, "compiled_call_ns", lambda *a, **k: entry)
    monkeypatch.setattr(cost, "eager_costs", lambda *a, **k: eager)


def test_the_estimate_takes_the_better_fused_form(monkeypatch: Any) -> None:
    """As verify() keeps the faster of the eager replacement and torch.compile, the estimate
    keeps the larger of their savings: compiled pays its entry cost per call, the eager form
    removes its measured share of the launches and its cost per intermediate byte."""
    from neuronscope.analysis import cost

    nodes, g = _rms_nodes()
    # written and read again, at 1 byte per ns: x**2 and y (read by mean and by the weight's
    # mul) and three per-row statistics
    moved = 2 * (2 * 64 * 256 * 4 + 3 * 64 * 4)
    launches = 4 * 1000.0  # six ops, two passes stay
    # A big entry cost: the eager composite (a quarter of the launches, nothing per byte) wins.
    _inject(monkeypatch, per_op=1000.0, entry=1e6, eager=(0.25, 0.0))
    forms = cost.fused_forms_ns("rms_norm", nodes, g, "cpu")
    assert forms is not None and forms["eager"] == 1000.0 and forms["compiled"] < 0
    assert cost.grounded_saving_ns("rms_norm", nodes, g, "cpu") == 1000.0
    # A free entry: torch.compile removes all the launches and the traffic, and wins.
    _inject(monkeypatch, per_op=1000.0, entry=0.0, eager=(0.25, 0.0))
    assert cost.grounded_saving_ns("rms_norm", nodes, g, "cpu") == launches + moved
    # A fused eager kernel that removes 3 ns per intermediate byte (work on the elements too)
    # beats both.
    _inject(monkeypatch, per_op=1000.0, entry=0.0, eager=(1.0, 3.0))
    assert cost.grounded_saving_ns("rms_norm", nodes, g, "cpu") == launches + 3 * moved / 2
    # No eager replacement measured, an entry above what fusion removes: no saving, never negative.
    _inject(monkeypatch, per_op=1000.0, entry=1e6, eager=None)
    assert cost.fused_forms_ns("rms_norm", nodes, g, "cpu") == {"compiled": pytest.approx(launches + moved - 1e6)}
    assert cost.grounded_saving_ns("rms_norm", nodes, g, "cpu") == 0.0


def test_a_cached_intermediate_moves_at_the_caches_bandwidth() -> None:
    from neuronscope.analysis.calibration import Calibration

    costs = Calibration(1.0, ((1 << 10, 100.0), (1 << 20, 10.0)))
    assert costs.bytes_per_ns(100) == 100.0 and costs.bytes_per_ns(1 << 30) == 10.0
    assert costs.bytes_per_ns(1 << 15) == pytest.approx(55.0)  # halfway in log size
    assert costs.moved_ns([1 << 10, 1 << 20]) == pytest.approx(2 * (1 << 10) / 100 + 2 * (1 << 20) / 10)


def test_the_eager_probe_counts_the_chains_ops_and_intermediates() -> None:
    from neuronscope.analysis import calibration
    from neuronscope.capture import machine

    x = torch.randn(16, 64)
    ops, tensors = machine.chain_traffic(lambda: (x * 2).exp() + x.sum())
    # the mul's output read by exp, exp's and the sum's by the add
    assert ops == 4 and sorted(tensors) == [4, 16 * 64 * 4, 16 * 64 * 4]
    costs = calibration.Calibration(3000.0, ((1, 10.0),))
    assert calibration._eager_rates("silu_mul", costs, "float32") is None  # no eager SwiGLU in torch
    shares = calibration._eager_rates("softmax", costs, "float32")
    assert shares is not None and 0 <= shares[0] <= calibration.MAX_SHARE and shares[1] >= 0


def test_verify_keeps_each_rounds_fastest_block_and_times_more_rounds_when_they_disagree() -> None:
    """A block another process interrupted is not the variant's cost; rounds that still
    disagree get as many again."""
    from neuronscope.capture import verify

    clock = [0.0]
    calls = {"steady": 0, "busy": 0}

    def steady() -> None:
        calls["steady"] += 1
        clock[0] += 1e-5 * (50 if calls["steady"] % 3 == 0 else 1)  # one block in three interrupted

    def busy() -> None:  # a whole round slower, then fast again: the rounds disagree
        calls["busy"] += 1
        clock[0] += 2e-5 if (calls["busy"] // 2000) % 2 else 1e-5

    def now() -> float:
        return clock[0]

    samples = verify.time_variants({"steady": steady}, lambda: None, repeats=5, min_block_s=5e-6, best_of=3, clock=now)
    assert samples["steady"] == [pytest.approx(10.0)] * 5  # us per call, the interruptions gone
    samples = verify.time_variants({"busy": busy}, lambda: None, repeats=5, min_block_s=1e-2, best_of=1, clock=now)
    assert len(samples["busy"]) == 10


# ---- a capture that ran the observed ops takes the observation's graph -------------------------


def _observed_and_captured(x_obs: torch.Tensor, x_cap: torch.Tensor, calls: int = 1) -> tuple[Any, Any, Any]:
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.analysis.observed_links import observed_graph
    from neuronscope.capture.observe import observe_dataflow
    from neuronscope.events import table_from_profiler

    w = torch.randn(x_obs.shape[-1])
    with observe_dataflow() as obs:
        _two_norms(x_obs, w)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(calls):
            _two_norms(x_cap, w)
    return observed_graph(obs), prof, table_from_profiler(prof, record_shapes=True)


def test_a_capture_of_the_observed_ops_takes_the_observations_graph_with_its_own_times() -> None:
    """Same ops, same shapes (twice over: a capture of two calls): the graph is the one relinking
    the capture's own event tree gives, without reading that tree."""
    from neuronscope.analysis.dataflow import graph_from_profiler
    from neuronscope.analysis.observed_links import graph_from_observation, graph_with_observation

    x = torch.randn(8, 32)
    observed, prof, table = _observed_and_captured(x, x, calls=2)
    fast = graph_from_observation(observed, table)
    slow = graph_with_observation(graph_from_profiler(prof, table), observed)
    assert fast is not None and fast.linking == "exact" and len(fast.nodes) == 2 * len(observed.nodes)

    def facts(n: Any) -> tuple[Any, ...]:
        return (n.name, n.producers, n.consumers, [(t.key, t.sizes, t.dtype) for t in n.inputs], n.writes, n.location, n.cpu_ns, n.start_ns)

    assert [facts(n) for n in fast.nodes] == [facts(n) for n in slow.nodes]
    period = len(observed.nodes)
    assert all(p < period for n in fast.nodes[:period] for p in n.producers)  # links stay in their call
    assert all(p == -1 or p >= period for n in fast.nodes[period:] for p in n.producers)


def test_a_capture_on_other_shapes_is_relinked_from_its_own_tree() -> None:
    """The warm-up call saw other shapes: the observation's facts are not the capture's, so the
    capture's own event tree is read and relinked, and its hint carries the captured shape."""
    from neuronscope.analysis.observed_links import graph_from_observation
    from neuronscope.drive.pipeline import build_result

    observed, prof, table = _observed_and_captured(torch.randn(8, 32), torch.randn(16, 32))
    assert observed is not None and graph_from_observation(observed, table) is None

    class Obs:  # what the decorator hands the analysis: an observation with its graph built
        profiler = object()
        graph = observed

    result = build_result(table, name="x", backend="cpu", profiler=prof, extra={"observed": Obs()})
    (hint,) = [h for h in result.hints if h.pattern == "rms_norm"]
    assert hint.details["shape"] == [16, 32] and hint.confidence == "dataflow"


def test_a_capture_with_a_scalar_where_the_observation_saw_a_tensor_is_not_given_its_links() -> None:
    """The warm-up call added a tensor, the captured call a Python number (a data-dependent
    branch): same op names and the same first shape, but the observation's link from that
    tensor is no data flow of the capture, so its graph is not taken; a list-taking op
    (``cat``), whose members the capture does not record, may differ that way."""
    from torch.profiler import ProfilerActivity, profile

    from neuronscope.analysis.observed_links import graph_from_observation, observed_graph
    from neuronscope.analysis.opgraph import takes_tensor_list
    from neuronscope.capture.observe import observe_dataflow
    from neuronscope.events import table_from_profiler

    def step(x: torch.Tensor, other: Any) -> torch.Tensor:
        return (x.exp() + other).sin()

    x, other = torch.randn(8, 32), torch.randn(8, 32)
    with observe_dataflow() as obs:
        step(x, other)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step(x, 1.0)
    observed = observed_graph(obs)
    assert observed is not None and [n.op for n in observed.nodes] == ["exp", "add", "sin"]
    assert graph_from_observation(observed, table_from_profiler(prof, record_shapes=True)) is None
    assert takes_tensor_list("cat") and takes_tensor_list("_foreach_mul_") and not takes_tensor_list("add")


def test_an_op_on_the_weight_alone_is_no_launch_the_eager_call_removes(monkeypatch: Any) -> None:
    """Gemma's ``1 + weight`` stays in the suggested call (``rms_norm(x, ..., 1 + weight)``):
    the eager form's estimate is that of the same norm with a plain weight."""
    from neuronscope.analysis import cost
    from neuronscope.analysis.opgraph import OpGraph, OpNode, TensorArg

    nodes, _ = _rms_nodes()
    w = TensorArg(9, (256,), "float32", 9, 256)
    y = nodes[4].inputs[0]._replace(key=5)
    gemma = [*nodes[:5], OpNode(5, "aten::add", "add", 1, 5, 6, [w], [-1]), OpNode(6, "aten::mul", "mul", 1, 6, 7, [y, w], [4, 5])]
    _inject(monkeypatch, per_op=1000.0, entry=1e6, eager=(1.0, 0.0))
    plain = cost.fused_forms_ns("rms_norm", nodes, OpGraph(nodes, "exact"), "cpu")
    plus_one = cost.fused_forms_ns("rms_norm", gemma, OpGraph(gemma, "exact"), "cpu")
    assert plain is not None and plus_one is not None
    assert plus_one["eager"] == plain["eager"] == 4000.0  # six ops less the two passes


def test_the_analysis_times_nothing_and_leaves_the_users_random_stream_alone(monkeypatch: Any, calibrated: Any) -> None:
    """A capture's analysis runs no torch benchmark (its costs are the kept calibration's): a
    profiled step sees the same random numbers (dropout masks, shuffles) after it as an
    unprofiled one, and no timing helper is called."""
    from neuronscope.capture import verify

    def no_timing(*a: Any, **k: Any) -> Any:
        raise AssertionError("the analysis timed something")

    monkeypatch.setattr(verify, "time_variants", no_timing)
    monkeypatch.setattr(verify, "paired_saving_ns", no_timing)
    lin = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(lin.parameters())
    x = torch.randn(4, 64)

    def step() -> None:
        h = lin(x)
        (0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))).sum().backward()
        opt.step()
        opt.zero_grad()

    torch.manual_seed(0)
    step()
    step()
    unprofiled = torch.rand(4)
    f = neuronscope.profile_on_neuron(step, export=False, backend="cpu", print_summary=False)
    torch.manual_seed(0)
    f()
    f()
    hints = {h.pattern: h for h in f.last_result.hints}
    assert set(hints) >= {"gelu", "per_parameter_update"}
    assert "at most" in hints["gelu"].details["estimate_model"]  # bounded by the kept costs
    assert "fused_step_saving_us" in hints["per_parameter_update"].details
    assert torch.equal(torch.rand(4), unprofiled)


def test_the_fused_optimizers_saving_is_the_kept_rates_on_the_updates_shapes(calibrated: Any) -> None:
    """What fused=True saves per step: the calibration's per-parameter and per-element rates on
    the parameters' shapes; nothing where none are kept (another device, an unknown class)."""
    from conftest import CALIBRATION

    from neuronscope.analysis import cost

    per_param, per_element = CALIBRATION["optimizers"]["AdamW"]
    saving = cost.fused_optimizer_saving_ns("AdamW", ((64, 64), (64,)), "float32", "cpu")
    assert saving == pytest.approx(2 * per_param + (64 * 64 + 64) * per_element)
    assert cost.fused_optimizer_saving_ns("AdamW", ((64,),), "float32", "cuda") is None
    assert cost.fused_optimizer_saving_ns("RMSprop", ((64,),), "float32", "cpu") is None
