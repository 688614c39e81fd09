"""Where a capture's work lands in the module tree: hints on the module that ran their ops
(helper functions included), backward time on the module whose forward made it, hint
locations with ``profile_memory=True``, and the trust check under the default window."""

from __future__ import annotations

import inspect
import json
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

import neuronscope as ns
from neuronscope.result.types import ProfileResult
from tests.real_models import MODELS


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A module-level helper, as transformers' ``apply_rotary_pos_emb`` is one."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + 1e-6))


_lines, _first = inspect.getsourcelines(_rms)
HELPER_LINES = range(_first + 1, _first + len(_lines))


class Norm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rms(x, self.weight)


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = Norm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


class Net(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])
        self.head = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _by_name(result: Any) -> dict[str, Any]:
    return {m.name: m for m in result.modules}


def test_profile_memory_keeps_hint_locations() -> None:
    net = Net()

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False, profile_memory=True)
    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return net(x)

    for _ in range(2):
        step(torch.randn(4, 16, 64))
    rms = [h for h in step.last_result.hints if h.pattern == "rms_norm"]
    assert rms and rms[0].location is not None
    file, line = rms[0].location.rsplit(":", 1)
    assert file.endswith("test_module_attribution.py") and int(line) in HELPER_LINES


def test_a_hint_in_a_helper_function_sits_on_the_module_that_called_it() -> None:
    net = Net()

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False)
    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return net(x)

    for _ in range(2):
        step(torch.randn(4, 16, 64))
    result = step.last_result
    mods = _by_name(result)
    rms = [i for i, h in enumerate(result.hints) if h.pattern == "rms_norm"]
    assert rms, result.hints
    # the deepest module that ran the helper's ops, in each block; not the block, not the head
    assert set(rms) <= set(mods["blocks.0.norm"].hints) and set(rms) <= set(mods["blocks.1.norm"].hints)
    assert not set(rms) & (set(mods["blocks.0"].hints) | set(mods["head"].hints) | set(mods["blocks.0.proj"].hints))
    # the location is still the helper's line, the one to edit; the spans are not kept
    _file, line = result.hints[rms[0]].location.rsplit(":", 1)
    assert int(line) in HELPER_LINES and "op_spans" not in result.hints[rms[0]].details
    assert "blocks.0-1" in result.table()


def test_backward_functions_go_to_the_module_whose_forward_made_them() -> None:
    from neuronscope.events.modules import BACKWARD_PREFIX, ModuleRanges
    from neuronscope.result.modules import build_modules

    # forward: block [0, 100] holds lin [10, 50], whose mm (seq 7) made MmBackward0; a mul
    # (seq 8) ran in block itself. backward on another thread: Mm's [200, 260] with a kernel
    # launch inside it, Mul's [270, 280], and one (seq 99) made outside any module.
    r = ModuleRanges(
        names=["block", "block.lin"], tids=[1, 1], starts=[0, 10], ends=[100, 50],
        op_names=["aten::mm", "aten::mul", BACKWARD_PREFIX + "MmBackward0", "aten::mm", BACKWARD_PREFIX + "MulBackward0", BACKWARD_PREFIX + "SumBackward0"],
        op_tids=[1, 1, 2, 2, 2, 2], op_starts=[20, 60, 200, 210, 270, 300], op_ends=[40, 70, 260, 250, 280, 330],
        op_device_ns=[5, 1, 0, 30, 0, 0], op_seq=[7, 8, 7, -1, 8, 99], op_fwd_tids=[0, 0, 1, 0, 1, 1], has_device=True,
    )
    mods = {m.name: m for m in build_modules(r, wall_time_us=1.0)}
    lin, block = mods["block.lin"], mods["block"]
    assert lin.backward_cpu_us == pytest.approx(0.060) and lin.backward_device_us == pytest.approx(0.030)
    assert block.self_backward_cpu_us == pytest.approx(0.010) and block.backward_cpu_us == pytest.approx(0.070)
    assert block.backward_device_us == pytest.approx(0.030)
    # without sequence numbers (a trace file): no backward claimed
    plain = build_modules(ModuleRanges(names=["block"], tids=[1], starts=[0], ends=[100]), wall_time_us=1.0)
    assert plain[0].backward_cpu_us is None


def test_training_step_shows_forward_and_backward_per_module() -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(4, 16, 64)

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False)
    def train_step() -> torch.Tensor:
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    for _ in range(2):
        train_step()
    result = train_step.last_result
    mods = _by_name(result)
    for name in ("blocks.0.proj", "blocks.1.norm", "head"):
        assert (mods[name].self_backward_cpu_us or 0) > 0, name
    for m in result.modules:
        if m.parent is not None:
            parent = mods[m.parent]
            kids = [c for c in result.modules if c.parent == parent.name]
            assert sum(c.backward_cpu_us or 0 for c in kids) <= (parent.backward_cpu_us or 0) + 1e-6
    text = result.table()
    assert "Backward" in text and "forward and backward" in text
    assert ProfileResult.from_dict(json.loads(result.to_json())).modules == result.modules


def test_llama_training_step_tree_adds_up_against_independent_hooks() -> None:
    """A real transformers model (Llama, from a tiny config) in a training step: the tree's
    calls are those the test's own per-module hooks count, each module whose backward the
    test's own backward hooks saw run has backward time, and children add up under parents,
    forward and backward."""
    spec = MODELS["llama"]
    net = spec.build().train()
    inputs = spec.inputs()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def step() -> None:
        net(**inputs).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    calls: Counter[str] = Counter()
    backward_seen: set[str] = set()
    handles = []
    for name, mod in net.named_modules():
        name = name or type(net).__name__
        handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: calls.update([n])))
        if name != type(net).__name__:
            handles.append(mod.register_full_backward_hook(lambda m, gi, go, n=name: backward_seen.add(n)))
    try:
        with warnings.catch_warnings():  # hooks on modules that return no tensor say so
            warnings.simplefilter("ignore")
            step()  # not captured: full backward hooks change the autograd graph
    finally:
        for h in handles:
            h.remove()
    with ns.neuron_region("train", backend="cpu", export=False, print_summary=False) as r:
        step()
    mods = _by_name(r.result)
    assert {n: mods[n].calls for n in calls} == dict(calls)
    with_params = {n for n, m in net.named_modules() if n and any(p.requires_grad for p in m.parameters(recurse=False))}
    assert backward_seen & with_params
    for n in backward_seen & with_params:
        assert (mods[n].self_backward_cpu_us or 0) > 0, n
    for m in r.result.modules:
        kids = [c for c in r.result.modules if c.parent == m.name]
        assert sum(c.cpu_total_us for c in kids) <= m.cpu_total_us + 1e-3
        assert sum(c.backward_cpu_us or 0 for c in kids) <= (m.backward_cpu_us or 0) + 1e-3
        assert m.self_cpu_us >= 0 and (m.self_backward_cpu_us or 0) >= 0
    root = mods[type(net).__name__]
    assert (root.backward_cpu_us or 0) <= r.result.wall_time_us and 0 < root.share <= 1


def test_trust_check_works_with_the_default_window() -> None:
    """warmup=1 (the default): the one warm-up call is also the observed one; its time is the
    yardstick, and a capture slowed by the machine (here: a sleep only the captured call
    takes, as a load spike would) is told so, with hints capped by that call's time."""
    import time

    weight = torch.ones(64)
    calls = []

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False)
    def norm(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:
            time.sleep(0.5)  # the captured call: the machine's load, for the test
        for _ in range(4):
            x = _rms(x, weight)
        return x

    for _ in range(2):
        norm(torch.randn(4, 64))
    result = norm.last_result
    note = next(n for n in result.notes if "warm-up call" in n)
    assert "at least" in note and "observed" in note
    ratio = float(note.split("at least ")[1].split("x")[0])
    assert ratio >= 2
    rms = [h for h in result.hints if h.pattern == "rms_norm"]
    assert rms and rms[0].details["unprofiled_scale"] == pytest.approx(1 / ratio, rel=0.06)
    assert rms[0].time_us <= result.wall_time_us / ratio * 1.06


def test_fusion_hints_say_what_they_would_stop_allocating() -> None:
    from neuronscope.report.html import render_report

    net = Net()
    x = torch.randn(4, 16, 64)
    with ns.neuron_region("mem", backend="cpu", export=False, print_summary=False, profile_memory=True) as r:
        with torch.no_grad():
            net(x)
    rms = next(h for h in r.result.hints if h.pattern == "rms_norm")
    made = {t["op"]: t for t in rms.details["intermediates"]}
    # x.pow(2): one float32 per element of x; its mean: one per row (the x_sq and mean_sq)
    assert made["aten::pow"]["bytes"] == 4 * 16 * 64 * 4 and made["aten::pow"]["shape"] == [4, 16, 64]
    assert made["aten::mean"]["bytes"] == 4 * 16 * 1 * 4
    # the last mul's output leaves the idiom (the norm's result): not an intermediate
    assert rms.details["intermediate_bytes"] == sum(t["bytes"] for t in made.values()) < 3 * 4 * 16 * 64 * 4
    page = render_report(r.result)
    assert "What each fusion would stop allocating" in page and "16.0 KB" in page


def test_a_long_chain_lists_a_few_intermediates_and_counts_them_all() -> None:
    from neuronscope.analysis.intermediates import MAX_LISTED

    with ns.neuron_region("chain", backend="cpu", export=False, print_summary=False) as r:
        x = torch.randn(8, 8)
        for _ in range(200):
            x = torch.tanh(x) * 0.5
    long = [h for h in r.result.hints if h.details.get("intermediates_left_out")]
    assert long, [h.details.get("intermediates") for h in r.result.hints]
    h = long[0]
    assert len(h.details["intermediates"]) == MAX_LISTED
    assert h.details["intermediate_bytes"] == (MAX_LISTED + h.details["intermediates_left_out"]) * 8 * 8 * 4


def test_report_timeline_and_memory_give_backward_work_to_its_module(tmp_path: Any) -> None:
    from neuronscope.report.html import render_report
    from neuronscope.report.trace_view import read_trace_view

    net = Net()
    x = torch.randn(4, 16, 64)
    with ns.neuron_region("train", backend="cpu", output_dir=str(tmp_path), print_summary=False, profile_memory=True) as r:
        net(x).square().mean().backward()
    result = r.result
    view = read_trace_view(result.run_dir, {m.name: m.type for m in result.modules})
    assert view is not None
    backward = [b for b in view.bars if b["backward"]]
    assert {"head", "blocks.1.proj"} <= {b["module"] for b in backward}
    # the backward bars add up to the tree's backward time (the same events, read from the file)
    root = next(m for m in result.modules if m.parent is None)
    assert sum(b["dur"] for b in backward) == pytest.approx(root.backward_cpu_us, rel=0.02)
    assert view.peak is not None and any("(backward)" in where for where, _ in view.peak["holders"])
    assert "backward of" in render_report(result)


def test_steps_summary_counts_each_modules_backward() -> None:
    net = Net()
    x = torch.randn(4, 16, 64)

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False, active=2)
    def train_step() -> None:
        net(x).square().mean().backward()

    for _ in range(3):
        train_step()
    steps = ns.summarize_steps(train_step.results)
    row = steps.module("head")
    assert row is not None
    expected = tuple(next(m for m in r.modules if m.name == "head") for r in train_step.results)
    assert row.times_us == pytest.approx(tuple(m.cpu_total_us + m.backward_cpu_us for m in expected))
    assert all(m.backward_cpu_us > 0 for m in expected)
    assert "forward and backward" in steps.table()
