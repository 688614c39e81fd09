"""The module breakdown: a tree of nn.Module calls by qualified name, on real models.

Each tree is checked against module hooks counted independently (per-module hooks of the
test's own on every named module), and the tree survives result.json, the text table, the
notebook view and to_dataframe("modules").
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

import neuronscope as ns
from neuronscope.result.modules import collapse_repeats
from neuronscope.result.types import ProfileResult
from tests.real_models import MODELS


def _count_calls(net: nn.Module, fn: Any) -> Counter[str]:
    """Calls of each named submodule during ``fn()``, from per-module hooks of our own."""
    seen: Counter[str] = Counter()
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: seen.update([n])) for n, m in net.named_modules() if n]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return seen


def _by_name(result: ProfileResult) -> dict[str, Any]:
    return {m.name: m for m in result.modules}


@pytest.mark.parametrize("key", ["llama", "gpt2", "timm_vit"])
def test_tree_of_a_decorated_model_matches_independent_hooks(key: str) -> None:
    spec = MODELS[key]
    net = spec.build().eval()
    inputs = {k: v for k, v in spec.inputs().items() if k != "labels"}
    wrapped = ns.profile_on_neuron(net, backend="cpu", export=False, print_summary=False)
    with torch.no_grad():
        wrapped(**inputs)  # warm-up
        expected = _count_calls(net, lambda: wrapped(**inputs))
    result = wrapped.last_result
    mods = _by_name(result)
    root = type(net).__name__
    assert result.modules[0].name == root and result.modules[0].parent is None
    # every module the hooks saw, under its qualified name, with the same number of calls
    assert {n: mods[n].calls for n in expected} == dict(expected)
    # besides the root, only modules that no module owns (made inside a forward, as
    # transformers' kernel wrappers are), which the test's per-module hooks cannot see
    owned = {n for n, _ in net.named_modules()}
    assert root in mods and not (set(mods) - set(expected) - {root}) & owned
    for m in result.modules:
        assert m.self_cpu_us <= m.cpu_total_us + 1e-6
        if m.parent is not None:
            assert m.cpu_total_us <= mods[m.parent].cpu_total_us + 1e-6
            assert m.name.startswith("") and m.depth == mods[m.parent].depth + 1
    # the user's regions are untouched by the module ranges
    assert not any(r.startswith("nn.Module") for r in result.regions)
    assert not any(o.name.startswith("nn.Module") for o in result.ops)


def test_llama_tree_names_layers_and_places_hints() -> None:
    spec = MODELS["llama"]
    net = spec.build().eval()
    inputs = {"input_ids": spec.inputs()["input_ids"]}

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False)
    def step() -> Any:
        with torch.no_grad():
            return net(**inputs)

    step()
    step()
    result = step.last_result
    mods = _by_name(result)
    down = mods["model.layers.1.mlp.down_proj"]
    assert down.type == "Linear" and down.calls == 1 and down.top_ops[0][0] == "aten::mm"
    assert mods["model.layers.1.mlp"].parent == "model.layers.1"
    # the repeated decoder layers fold into one row with their spread
    groups = collapse_repeats(result.modules)
    layers = [g for g in groups if g.label == "layers.0-1"]
    assert len(layers) == 1 and layers[0].spread is not None and len(layers[0].members) == 2
    # the RMSNorm hint sits on the RMSNorm modules, whose forward holds its location
    rms = [i for i, h in enumerate(result.hints) if h.pattern == "rms_norm"]
    assert rms and set(rms) <= set(mods["model.norm"].hints)
    assert set(rms) <= set(mods["model.layers.0.input_layernorm"].hints)
    text = result.table()
    assert "Modules (" in text and "layers.0-1" in text and "down_proj" in text
    assert "down_proj" in result._repr_html_()


def test_modules_round_trip_json_and_dataframe(tmp_path: Any) -> None:
    spec = MODELS["gpt2"]
    net = spec.build().eval()
    inputs = {"input_ids": spec.inputs()["input_ids"]}
    wrapped = ns.profile_on_neuron(net, backend="cpu", output_dir=str(tmp_path), print_summary=False, warmup=0)
    with torch.no_grad():
        wrapped(**inputs)
    result = wrapped.last_result
    loaded = ns.load(result.run_dir)
    assert loaded.modules == result.modules
    assert json.loads(result.to_json())["modules"][0]["name"] == "GPT2LMHeadModel"
    pytest.importorskip("pandas")
    df = loaded.to_dataframe("modules")
    assert df.loc["transformer.h.1.mlp", "calls"] == 1
    assert df.loc["transformer.h.1.mlp", "parent"] == "transformer.h.1"
    # the saved trace holds the module ranges: a trace file gets the same tree
    traces = [p for p in tmp_path.rglob("trace.json*")]
    from_file = ns.from_trace(traces[0])
    assert {m.name for m in from_file.modules} >= {"transformer.h.1.mlp", "lm_head"}


def test_training_step_in_a_region_names_roots_by_class() -> None:
    spec = MODELS["llama"]
    step = __import__("tests.real_models", fromlist=["step_fn"]).step_fn(spec, train=True)
    step()
    with ns.neuron_region("train", backend="cpu", export=False, print_summary=False) as r:
        step()
    mods = _by_name(r.result)
    assert "LlamaForCausalLM" in mods and "model.layers.0.self_attn.q_proj" in mods
    assert mods["model.layers.0.self_attn.q_proj"].parent == "model.layers.0.self_attn"
    # backward and the optimizer ran outside any module: the root's share is below the whole
    assert 0 < mods["LlamaForCausalLM"].share < 1


def test_hooks_leave_no_trace_outside_a_capture_and_compiled_code_does_not_recompile() -> None:
    from torch.nn.modules import module as torch_module

    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    compiled = torch.compile(net)
    x = torch.randn(2, 8)
    compiled(x)
    before = dict(torch._dynamo.utils.counters["stats"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's warning about global hooks stays quiet
        with ns.neuron_region("c", backend="cpu", export=False, print_summary=False) as r:
            compiled(x)
            net(x)
    assert dict(torch._dynamo.utils.counters["stats"]) == before
    assert not torch_module._global_forward_pre_hooks and not torch_module._global_forward_hooks
    mods = _by_name(r.result)
    assert mods["Sequential"].calls == 2 and mods["0"].calls == 1  # the eager call's layers


@pytest.mark.parametrize("wrap", ["compiled_module", "function_calling_it"])
def test_a_model_that_compiles_inside_the_capture_runs_as_without_it(wrap: str) -> None:
    """A new input shape at the captured call makes torch.compile trace the module again,
    with the capture's global hooks installed: the hooks must be no-ops to Dynamo (they
    raised "already tracked for mutation" in the user's call), and the call's output the
    compiled module's."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    compiled = torch.compile(net)
    fn = compiled if wrap == "compiled_module" else (lambda t: compiled(t))
    step = ns.profile_on_neuron(fn, backend="cpu", export=False, print_summary=False, name=f"recompile_{wrap}")
    step(torch.randn(8, 16))  # the warm-up call compiles for this shape
    x = torch.randn(4, 16)  # a new batch size: compiled again inside the capture
    out = step(x)
    torch.testing.assert_close(out, net(x))
    result = step.last_result
    assert result.status == "ok", result.error
    assert result.op("aten::addmm") is not None  # the compiled graph's ops were recorded


def test_no_modules_no_tree() -> None:
    with ns.neuron_region("plain", backend="cpu", export=False, print_summary=False) as r:
        torch.randn(8, 8) @ torch.randn(8, 8)
    assert r.result.modules == []
    assert "Modules (" not in r.result.table()
    assert ProfileResult.from_dict({k: v for k, v in r.result.to_dict().items() if k != "modules"}).modules == []


def test_show_without_argument_shows_the_newest_run_and_diff_names_the_slower_module(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from neuronscope.cli import main
    from neuronscope.report.diff import diff_results, render_diff

    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path / "runs"))
    assert main(["show"]) == 2
    assert "no runs under" in capsys.readouterr().err
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    for label in ("older", "newer"):
        with ns.neuron_region(label, backend="cpu", print_summary=False) as r:
            net(torch.randn(4, 16))
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    assert "newer" in out and "older" not in out and "Modules (" in out
    a = r.result
    slower = [replace(m, cpu_total_us=m.cpu_total_us * 3) if m.name == "0" else m for m in a.modules]
    d = diff_results(a, replace(a, modules=slower))
    assert d["modules"][0]["module"] == "0" and d["modules"][0]["ratio"] == pytest.approx(3.0)
    assert "Modules (inclusive time)" in render_diff(d)


def test_steps_of_one_window_summarised_together() -> None:
    from tests.real_models import step_fn

    step = step_fn(MODELS["gpt2"], train=True)
    decorated = ns.profile_on_neuron(step, backend="cpu", export=False, print_summary=False, warmup=1, active=3)
    for _ in range(4):
        decorated()
    steps = ns.summarize_steps(decorated.results)
    assert steps.labels == ("step 1", "step 2", "step 3") and len(steps.wall_us) == 3
    assert steps.slowest == steps.labels[max(range(3), key=lambda i: decorated.results[i].wall_time_us)]
    mm = steps.op("aten::mm")
    assert mm is not None and mm.times_us == tuple(r.op("aten::mm").time_us for r in decorated.results)
    assert mm.min_us <= mm.mean_us <= mm.max_us and mm.calls[0] == decorated.results[0].op("aten::mm").calls
    mlp = steps.module("transformer.h.1.mlp")
    assert mlp is not None and len(mlp.times_us) == 3 and mlp.stdev_us >= 0
    # every row: which rows lead (by mean time) is the machine's to decide under load
    text = steps.table(rows=1000)
    assert "slowest: step" in text and "aten::mm" in text and "transformer.h.1.mlp" in text
    with pytest.raises(ns.NeuronscopeError):
        ns.summarize_steps([])


def test_trust_note_and_hints_scaled_to_the_unprofiled_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuronscope.result import trust
    from neuronscope.result.hint import Hint

    hints = [Hint("fusion", "rms_norm", ["aten::pow"], time_us=900.0, est_saving_us=600.0)]
    scaled = trust.scale_hints(hints, wall_us=10_000.0, unprofiled_us=400.0)  # 25x: dominated
    assert scaled[0].time_us == pytest.approx(36.0) and scaled[0].est_saving_us == pytest.approx(24.0)
    assert scaled[0].details["profiled_time_us"] == 900.0 and hints[0].time_us == 900.0  # a new hint
    capped = trust.scale_hints(hints, wall_us=500.0, unprofiled_us=400.0)  # not dominated: capped only
    assert capped[0].time_us == 400.0 and capped[0].est_saving_us == 400.0
    assert trust.wall_notes(500.0, 400.0) == [] and "25.0x the unprofiled" in trust.wall_notes(10_000.0, 400.0)[0]

    # a real capture: warmup=2 times the first call unprofiled (the second is observed)
    monkeypatch.setattr(trust, "DOMINATED", 1e-9)
    weight = torch.ones(64)

    @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False, warmup=2)
    def norm(x: torch.Tensor) -> torch.Tensor:
        for _ in range(20):
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
        return x

    for _ in range(3):
        norm(torch.randn(4, 64))
    result = norm.last_result
    note = next(n for n in result.notes if "the unprofiled warm-up call" in n)
    assert "x the unprofiled" in note
    assert result.hints and all("unprofiled_scale" in h.details for h in result.hints if h.time_us)


def test_torch_native_note_on_blocks_from_before_the_capture_is_not_shown(tmp_path: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "warn.py"
    # The first capture runs on a worker thread (kineto then starts up off the thread that
    # imported torch, and says so); it frees a tensor from before the capture.
    script.write_text(
        "import threading, torch, neuronscope as ns\n"
        "a = [torch.randn(1000, 1000)]\n"
        "def work():\n"
        "    with ns.neuron_region('w', backend='cpu', export=False, print_summary=False, profile_memory=True) as r:\n"
        "        a.pop()\n"
        "        b = torch.randn(10) * 2\n"
        "    assert r.result.ops\n"
        "t = threading.Thread(target=work)\n"
        "t.start()\n"
        "t.join()\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr
    assert "allocated before the profiling started" not in done.stderr and "USDT" not in done.stderr
    assert "External init callback" not in done.stderr, done.stderr


def test_a_decorated_forward_names_its_module_the_root() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
            self.head = nn.Linear(8, 2)

        @ns.profile_on_neuron(backend="cpu", export=False, print_summary=False)
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x).relu()
            return self.head(x)

    block = Block()
    block(torch.randn(2, 8))
    block(torch.randn(2, 8))
    result = Block.forward.last_result
    mods = _by_name(result)
    assert result.modules[0].name == "Block" and result.modules[0].parent is None
    assert mods["layers.2"].parent == "Block" and mods["head"].calls == 1
    assert [g.label for g in collapse_repeats(result.modules)][:2] == ["Block", "layers.0-2"] or "layers.0-2" in [
        g.label for g in collapse_repeats(result.modules)
    ]


def test_notebook_comparison_legend_is_whole() -> None:
    import html as _html

    from neuronscope.result.comparison import Comparison, ComparisonRow

    cmp = Comparison(
        name="c",
        rows=[ComparisonRow("a", 10.0, 3, "aten::mul", 1.0, verdict="baseline", repeats=9),
              ComparisonRow("b", 5.0, 1, "aten::add", 2.0, verdict="faster", repeats=9)],
        timing={"confidence": 0.99, "samples_per_round": 3},
    )
    page = cmp._repr_html_()
    for line in cmp.legend():
        assert _html.escape(line) in page  # whole, not cut at a name's limit


def test_a_hint_on_a_row_left_out_shows_on_the_nearest_row_shown() -> None:
    """Qwen2's rotary hint sits on a ``Func`` inside a ``Func``, deeper than the table goes:
    the nearest shown row that holds it says so, at any depth or row limit; names are
    indented by depth."""
    from neuronscope.result.tree import MODULE_DEPTH, TREE_INDENT, module_rows

    class Norm(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    net: nn.Module = Norm()
    for _ in range(MODULE_DEPTH + 1):  # the norm one level deeper than the table shows
        net = nn.Sequential(net)
    wrapped = ns.profile_on_neuron(net, backend="cpu", export=False, print_summary=False)
    x = torch.randn(4, 16)
    wrapped(x)
    wrapped(x)
    result = wrapped.last_result
    (norm,) = [m for m in result.modules if m.type == "Norm"]
    assert norm.depth == MODULE_DEPTH + 1 and norm.hints
    said = ",".join(str(h + 1) for h in norm.hints)
    rows = module_rows(result.modules)
    assert not any(row[1] == "Norm" for row in rows)
    deepest = max(rows, key=lambda row: row[0].count(TREE_INDENT))
    assert deepest[0].startswith(TREE_INDENT * MODULE_DEPTH) and deepest[-1] == said
    # cut by the row limit: on its shown ancestor
    top = module_rows(result.modules, max_rows=2)
    assert [row[0] for row in top] == ["Sequential", TREE_INDENT + "0"] and top[-1][-1] == said
    table = result.table()
    assert f"{TREE_INDENT * MODULE_DEPTH}0" in table


def _tagged(fn: Any) -> Any:
    return fn


class _Spanned(nn.Module):
    """A forward with a decorator, a nested function, a comprehension and a last statement
    over several lines: where a hint's line is looked up among the module classes."""

    @_tagged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def twice(t: torch.Tensor) -> torch.Tensor:
            return t * 2

        parts = [twice(x) for _ in range(2)]
        return torch.stack(
            parts,
        ).sum(
            0
        )


def test_module_sources_span_each_forward_as_its_source_block() -> None:
    import inspect

    from neuronscope.capture.modules import ModuleHooks

    hooks = ModuleHooks()
    assert hooks.install()
    try:
        torch.nn.Sequential(_Spanned(), nn.ReLU())(torch.ones(2))
    finally:
        facts = hooks.remove()
    for cls in (_Spanned, nn.ReLU, nn.Sequential):
        lines, first = inspect.getsourcelines(cls.forward)
        # the whole block: its first decorator to the closing bracket of its last statement
        assert facts.sources[cls.__name__] == (inspect.getsourcefile(cls.forward), first, first + len(lines) - 1)
    _file, first, last = facts.sources["_Spanned"]
    assert last - first == 10  # "@_tagged" to the last ")"


def test_one_index_under_folded_parents_is_labelled_once() -> None:
    # ConvNeXt's shape: each stage's downsampling_layer.0 / .1 fold across the stages into one
    # row each, whose label is the one index they share ("down.0"), not a range ("down.0-0")
    class Stage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down = nn.ModuleList([nn.LayerNorm(8), nn.Linear(8, 8)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for m in self.down:
                x = m(x)
            return x

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleList([Stage() for _ in range(3)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for s in self.stages:
                x = s(x)
            return x

    wrapped = ns.profile_on_neuron(Net(), backend="cpu", export=False, print_summary=False, warmup=0)
    wrapped(torch.randn(2, 8))
    groups = {g.label: g for g in collapse_repeats(wrapped.last_result.modules)}
    assert "stages.0-2" in groups
    assert len(groups["down.0"].members) == 3 and len(groups["down.1"].members) == 3
    assert not any(label.endswith(("0-0", "1-1")) for label in groups)
