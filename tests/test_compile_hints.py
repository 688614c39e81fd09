"""torch.compile inside a capture: recompile, graph_break and compile hints, and readable names
for compiled code in the op table.

Real ``torch.compile`` on CPU. Most tests use ``backend="eager"`` (Dynamo only: the recompiles
and graph breaks are Dynamo's, and it compiles in a fraction of a second); one test uses the
default Inductor backend, whose compiled graphs show as ``## Call CompiledFxGraph`` events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from neuronscope import neuron_region
from neuronscope.events import KIND_ANNOTATION, KIND_OP, EventTable
from neuronscope.events.table import promote_compiled_events
from neuronscope.result.compiled_names import compiled_label, labelled_compiled_ops
from neuronscope.result.hint import Hint
from neuronscope.result.summary import summarize
from neuronscope.result.types import ProfileResult

dynamo = pytest.importorskip("torch._dynamo")


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _capture(name: str, fn: Any, *calls: tuple[Any, ...]) -> ProfileResult:
    with neuron_region(name, export=False) as r:
        for args in calls:
            fn(*args)
    assert r.result is not None and r.result.status == "ok"
    return r.result


def _hints(result: ProfileResult, kind: str) -> list[Hint]:
    return [h for h in result.hints if h.kind == kind]


def breaks_in_the_middle(x: torch.Tensor) -> torch.Tensor:
    y = x.cos()
    print("neuronscope test: a graph break")  # the break: Dynamo does not trace print
    return y + 1


BREAK_LINE = breaks_in_the_middle.__code__.co_firstlineno + 2


def test_graph_break_seen_at_run_time_after_a_warm_up(capsys: pytest.CaptureFixture[str]) -> None:
    fn = torch.compile(breaks_in_the_middle, backend="eager")
    fn(torch.randn(4))  # compiled before the capture: Dynamo's counters do not move inside it
    result = _capture("gb_warm", fn, (torch.randn(4),), (torch.randn(4),))
    (hint,) = _hints(result, "graph_break")
    assert hint.pattern == "graph_break"
    assert hint.location == f"{__file__}:{BREAK_LINE}"
    assert hint.calls == 2  # crossed once per call
    assert "print" in hint.details["reason"]
    assert hint.details["function"] == "breaks_in_the_middle"
    assert hint.confidence == "measured" and hint.est_saving_us > 0
    # The op table names both graphs of the function, with their compile ids.
    names = [o.name for o in result.ops]
    first = [n for n in names if n.startswith("compiled: breaks_in_the_middle [")]
    rest = [n for n in names if n.startswith(f"compiled: breaks_in_the_middle (after the graph break at line {BREAK_LINE}) [")]
    assert len(first) == 1 and len(rest) == 1
    assert hint.ops == first + rest
    assert not any(n.startswith("Torch-Compiled Region") for n in names)
    assert not _hints(result, "recompile") and not _hints(result, "compile")


def test_graph_break_compiled_inside_the_capture() -> None:
    fn = torch.compile(breaks_in_the_middle, backend="eager")
    result = _capture("gb_cold", fn, (torch.randn(4),))
    (hint,) = _hints(result, "graph_break")
    assert hint.location == f"{__file__}:{BREAK_LINE}"
    assert hint.details["compiled_in_capture"] >= 1 and hint.details["crossings_in_capture"] == 1
    (compiled,) = _hints(result, "compile")
    assert compiled.pattern == "compile_in_capture" and compiled.details["function"] == "breaks_in_the_middle"
    assert compiled.calls == 2  # the function and the part after its break
    assert compiled.time_us > 0
    # Dynamo's own bookkeeping ranges of the compile are not listed as regions.
    assert not any("compile_id=" in name for name in result.regions)


def scale(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin() + 1


def test_recompile_on_a_new_shape_names_the_guard_and_the_function() -> None:
    fn = torch.compile(scale, backend="eager", dynamic=False)
    fn(torch.randn(4))
    result = _capture("rc_shape", fn, (torch.randn(8),), (torch.randn(8),))
    (hint,) = _hints(result, "recompile")
    assert hint.pattern == "shape"
    assert hint.calls == 1  # the second call of shape 8 reuses the new graph
    assert hint.location == f"{__file__}:{scale.__code__.co_firstlineno}"
    assert hint.details["function"] == "scale"
    (reason,) = hint.details["reasons"]
    assert "size mismatch" in reason and "expected 4, actual 8" in reason
    assert hint.time_us > 0 and hint.est_saving_us == hint.time_us
    assert hint.ops == [o.name for o in result.ops if o.name.startswith("compiled: scale [")]
    assert "mark_dynamic" in hint.suggestion


def test_recompile_on_a_new_dtype() -> None:
    fn = torch.compile(scale, backend="eager")
    fn(torch.randn(4))
    result = _capture("rc_dtype", fn, (torch.randn(4, dtype=torch.float64),))
    (hint,) = _hints(result, "recompile")
    assert hint.pattern == "dtype" and hint.calls == 1
    assert "dtype mismatch" in hint.details["reasons"][0]


def add_n(x: torch.Tensor, n: int) -> torch.Tensor:
    return x + n


def test_recompiles_on_python_values_up_to_the_limit() -> None:
    fn = torch.compile(add_n, backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2):
        fn(torch.randn(3), 0)
        result = _capture("rc_limit", fn, *[(torch.randn(3), n) for n in (1, 2, 3)])
    (hint,) = _hints(result, "recompile")
    assert hint.pattern == "python_value"
    assert hint.details["function"] == "add_n"
    assert hint.details["recompile_limit_hit"] is True
    assert "n == 0" in hint.details["reasons"][0]
    assert "now runs uncompiled" in hint.suggestion


def test_no_compile_hints_without_torch_compile() -> None:
    x = torch.randn(16, 16)
    result = _capture("plain", lambda: torch.relu(x @ x), ())
    assert not [h for h in result.hints if h.kind in ("recompile", "graph_break", "compile")]


@pytest.mark.slow
def test_inductor_graph_is_named_after_the_compiled_function() -> None:
    fn = torch.compile(scale)  # Inductor: a "## Call CompiledFxGraph <hash> ##" per call
    fn(torch.randn(16))
    result = _capture("inductor", fn, (torch.randn(16),))
    names = [o.name for o in result.ops]
    assert not any(n.startswith(("## Call CompiledFxGraph", "Torch-Compiled Region")) for n in names)
    region = next(o for o in result.ops if o.name.startswith("compiled: scale ["))
    graph = next(o for o in result.ops if o.name.startswith("compiled graph: scale ["))
    assert region.name.split("[")[1] == graph.name.split("[")[1]  # the same compile id
    assert graph.cpu_total_us <= region.cpu_total_us  # the graph runs inside the compiled call
    assert graph.self_cpu_us <= graph.cpu_total_us
    assert not result.hints or all(h.kind != "recompile" for h in result.hints)
    # with_stack=True: the graph's generated Python is no child that takes its time away
    # (key_averages leaves the graph about 4% of its total there).
    with neuron_region("inductor_stack", export=False, with_stack=True) as r:
        fn(torch.randn(16))
    assert r.result is not None
    graph = next(o for o in r.result.ops if o.name.startswith("compiled graph: scale ["))
    assert graph.self_cpu_us == pytest.approx(graph.cpu_total_us)  # no aten op runs inside it


def test_a_decorated_function_compiled_through_runs_uncaptured_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.compile(decorated): the compiled graph replaces the wrapper, which therefore gets
    out of Dynamo's way (no graph break, nothing compiled inside a capture) and says at exit
    what to do instead; the wrapper around the compiled function captures it."""
    from torch._dynamo.utils import counters

    from neuronscope import profile_on_neuron
    from neuronscope.decorator import report_uncaptured

    @profile_on_neuron(warmup=1, export=False)
    def doubled_sin(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin()

    compiled = torch.compile(doubled_sin, backend="eager")
    breaks = sum(counters["graph_break"].values())
    for _ in range(3):
        out = compiled(torch.ones(4))
    assert torch.equal(out, (torch.ones(4) * 2).sin())
    assert sum(counters["graph_break"].values()) == breaks
    assert doubled_sin.results == [] and doubled_sin.__neuronscope_state__.compiled_through
    with caplog.at_level("WARNING", logger="neuronscope"):
        report_uncaptured(captures=0)  # as in a process that captured nothing
    assert "doubled_sin ran inside torch.compile'd code" in caplog.text
    assert "profile_on_neuron(torch.compile(f))" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="neuronscope"):
        report_uncaptured(captures=1)  # something was captured: nothing to say
    assert "doubled_sin" not in caplog.text
    doubled_sin.__neuronscope_state__.compiled_through = False  # said: not again at exit

    outside = profile_on_neuron(torch.compile(scale, backend="eager"), warmup=1, export=False)
    for _ in range(2):
        outside(torch.ones(4))
    assert len(outside.results) == 1 and not _hints(outside.results[0], "compile")


def test_a_compiled_model_with_a_decorated_forward_is_named_after_forward() -> None:
    """Each wrapper has a code object of its own, named after what it wraps: torch.compile
    names the graph after it, and keeps a cache per wrapped function."""
    from neuronscope import profile_on_neuron

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        @profile_on_neuron(export=False)
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).relu()

    @profile_on_neuron(export=False)
    def other(x: torch.Tensor) -> torch.Tensor:
        return x.cos()

    assert Net.forward.__code__ is not other.__code__
    assert (Net.forward.__code__.co_name, other.__code__.co_name) == ("forward", "other")
    compiled, x = torch.compile(Net(), backend="eager"), torch.randn(4, 16)
    compiled(x)
    result = _capture("named", compiled, (x,))
    assert "compiled: forward [0/0]" in [o.name for o in result.ops]


# ---- naming, from a hand-made event table ----------------------------------------------------
def _table(rows: list[tuple[str, int, int, int]]) -> EventTable:
    table = EventTable()
    for name, kind, start, end in rows:
        table.append(name, kind, 1, start, end)
    return table


def _result_of(table: EventTable, fx: dict[str, Any] | None = None) -> ProfileResult:
    summary = summarize(table)
    ops, regions = labelled_compiled_ops(summary.ops, summary.regions, table, fx)
    return ProfileResult(name="t", backend="cpu", ops=ops, regions=regions)


def test_labels_without_dynamos_records_keep_the_compile_id() -> None:
    table = _table(
        [
            ("Torch-Compiled Region: 3/1", KIND_OP, 0, 1000),
            ("## Call CompiledFxGraph abcdef123456 ##", KIND_OP, 100, 900),
            ("aten::mm", KIND_OP, 200, 500),
            ("CompiledFunctionBackward", KIND_OP, 2000, 3000),
            ("## Call CompiledFxGraph 9876543210ab ##", KIND_OP, 2100, 2900),
        ]
    )
    result = _result_of(table)
    by_name = {o.name: o for o in result.ops}
    assert set(by_name) >= {"compiled: [3/1]", "compiled graph: [3/1]", "compiled graph: backward [98765432]", "aten::mm"}
    assert by_name["compiled: [3/1]"].self_cpu_us == pytest.approx(0.2)  # 1000 - 800 ns
    assert by_name["compiled graph: [3/1]"].self_cpu_us == pytest.approx(0.5)  # 800 - 300 ns of aten::mm
    fx = {"functions": {"3/1": {"function": "torch_dynamo_resume_in_step_at_42", "file": "m.py", "line": 42}}}
    assert compiled_label("3/1", fx["functions"]) == "compiled: step (after the graph break at line 42) [3/1]"


def test_compiled_graph_recorded_as_a_range_becomes_an_op_with_its_own_self_time() -> None:
    # torch 2.13 records the graph call as a user_annotation when record_shapes is on.
    table = _table(
        [
            ("outer", KIND_ANNOTATION, 0, 2000),
            ("Torch-Compiled Region: 0/0", KIND_OP, 100, 1900),
            ("## Call CompiledFxGraph abcdef123456 ##", KIND_ANNOTATION, 200, 1200),
            ("aten::mm", KIND_OP, 300, 500),
        ]
    )
    promote_compiled_events(table)
    result = _result_of(table, {"functions": {"0/0": {"function": "f"}}})
    graph = result.op("compiled graph: f [0/0]")
    assert graph is not None and graph.self_cpu_us == pytest.approx(0.8) and graph.cpu_total_us == pytest.approx(1.0)
    region = result.op("compiled: f [0/0]")
    assert region is not None and region.self_cpu_us == pytest.approx(0.8)  # 1800 - 1000 ns
    assert set(result.regions) == {"outer"}  # compiled code is listed as ops, not as regions
    assert "compiled graph: f [0/0]" in result.regions["outer"].op_names
    assert sum(o.self_cpu_us for o in result.ops) == pytest.approx(1.8)  # self times add up


def test_a_compiled_submodule_in_a_decorated_step_compiles_nothing_of_neuronscope() -> None:
    """A decorated training step whose model holds a ``torch.compile``d submodule: the
    capture's module hooks run inside the compiled module's call, where Dynamo compiled each
    of them as a frame of the user's, in the capture. The step then got two
    ``compile_in_capture`` hints naming neuronscope's own ``_pre`` and ``_post`` (advice to
    warm up that the user had followed), and its op table held the compiler's work."""
    from neuronscope import profile_on_neuron

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.n, self.b = torch.nn.Linear(16, 16), torch.compile(Scaled(), backend="eager"), torch.nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.n(self.a(x)))

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16)

    def step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    # The first call, the decorator's warm-up, compiles the submodule: the captures compile nothing.
    f = profile_on_neuron(step, export=False, backend="cpu", print_summary=False, active=2)
    for _ in range(3):
        f()
    for result in f.results:
        compiles = [h for h in result.hints if h.kind == "compile"]
        assert not compiles, [(h.pattern, h.ops, h.location) for h in compiles]
        assert not [o.name for o in result.ops if "neuronscope" in o.name], [o.name for o in result.ops]
