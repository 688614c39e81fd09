"""Attacks on round 37's change (Dynamo-skipped module hooks, ``nesting.enclosing``, the
attention look-back and log-softmax params) and on what ``hint.verify()`` reads back from a
result.json edited by hand: each ends in a correct result or one NeuronscopeError."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from neuronscope import from_trace, neuron_region, profile_on_neuron
from neuronscope.errors import NeuronscopeError
from neuronscope.result.hint import Hint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RMS_OPS = ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"]
LOG_SOFTMAX_OPS = ["aten::_log_softmax", "aten::nll_loss"]


def _hint(pattern: str, ops: list[str], **details: Any) -> Hint:
    return Hint(
        kind="fusion", pattern=pattern, ops=ops, calls=1, time_us=10.0, est_saving_us=5.0, suggestion="x",
        details={"dtype": "float32", "device": "cpu", **details},
    )


def _verify(h: Hint) -> Hint:
    return h.verify(compile=False, repeats=3, min_block_s=0.001)


# ---- hint.verify() on a result.json edited by hand ---------------------------------------------


@pytest.mark.parametrize("shape", [[-4, 10], [4, "10"], "ab", [[4, 10]], [4.0, 10], [True, 10], [2**40, 2**40]])
def test_verify_refuses_an_input_shape_that_is_no_list_of_sizes(shape: Any) -> None:
    """details["shape"] went straight to torch.randn: a negative or text size raised torch's
    RuntimeError / TypeError from our code, a huge one torch's storage overflow."""
    with pytest.raises(NeuronscopeError, match="shape"):
        _verify(_hint("log_softmax", LOG_SOFTMAX_OPS, shape=shape, loss="nll_loss", dim=-1))


@pytest.mark.parametrize("names", [{1: [8]}, {"__class__": [8]}, {"__dict__": [4, 8]}], ids=["int", "class", "dict"])
def test_verify_leaves_a_vector_shapes_name_that_is_no_weight_alone(names: dict[Any, Any]) -> None:
    """details["vector_shapes"] names went to setattr on the example tensors: a number raised
    TypeError, ``__class__`` replaced the namespace's class (TypeError), ``__dict__`` its
    attributes. A name that is no example weight is left alone, as an unknown one was."""
    h = _verify(_hint("rms_norm", RMS_OPS, shape=[2, 4, 8], weight=True, vector_shapes=names))
    assert h.verified_saving_us is not None


def test_verify_does_not_replace_x_by_a_vector_shapes_entry() -> None:
    """``vector_shapes["x"]``: x is the hint's input, no weight: it keeps the recorded shape."""
    from neuronscope.capture import verify

    seen: list[tuple[int, ...]] = []
    real = verify.BUILDERS["rms_norm"]

    def spy(hint: Any, x: Any, dev: Any) -> Any:
        chain, fused, name = real(hint, x, dev)
        seen.append(tuple(chain().shape))  # the hand-written idiom's output: x's shape
        return chain, fused, name

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(verify.BUILDERS, "rms_norm", spy)
        _verify(_hint("rms_norm", RMS_OPS, shape=[2, 4, 8], weight=True, vector_shapes={"x": [1]}))
    assert seen == [(2, 4, 8)]


# ---- threads and a torch.compile'd submodule (the Dynamo-skipped hooks) ----------------------


class _Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * 2


class _Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.compile(_Inner(), backend="eager")
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.inner(x))


def test_two_threads_call_a_decorated_step_holding_a_compiled_submodule(tmp_path: Path) -> None:
    """Both threads' calls return; one capture, of the compiled region; no hook left on."""
    from torch.nn.modules import module as torch_module

    model = _Outer()

    @profile_on_neuron(output_dir=str(tmp_path), warmup=0)
    def step(x: torch.Tensor) -> torch.Tensor:
        return model(x).sum()

    errors: list[BaseException] = []
    done: list[torch.Tensor] = []

    def worker() -> None:
        try:
            done.extend(step(torch.randn(4, 8)) for _ in range(3))
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(done) == 6 and not any(t.is_alive() for t in threads)
    (result,) = step.results
    assert result.ops and any(o.name.startswith("compiled") for o in result.ops)
    assert not torch_module._global_forward_hooks and not torch_module._global_forward_pre_hooks


def test_ctrl_c_inside_a_compiled_submodule_passes_through_and_takes_the_hooks_off(tmp_path: Path) -> None:
    from torch.nn.modules import module as torch_module

    model = _Outer()

    @profile_on_neuron(output_dir=str(tmp_path), warmup=0)
    def step(x: torch.Tensor) -> torch.Tensor:
        model(x)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        step(torch.randn(4, 8))
    assert not torch_module._global_forward_hooks and not torch_module._global_forward_pre_hooks
    assert not torch.autograd.profiler._is_profiler_enabled
    with neuron_region("after_ctrl_c", backend="cpu", export=False) as r:
        model(torch.randn(4, 8))
    assert r.result is not None and r.result.ops


# ---- hostile compiled-code nesting in a trace (nesting.enclosing) ----------------------------

_R0, _R1 = "Torch-Compiled Region: 0/0", "Torch-Compiled Region: 1/0"
_G0, _G1 = "## Call CompiledFxGraph fabc123 ##", "## Call CompiledFxGraph fdef456 ##"


def _ev(name: str, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


@pytest.mark.parametrize(
    "events",
    [
        [_ev(_R0, 0, 10), _ev(_G0, 5, 10), _ev("aten::mm", 6, 2, cat="cpu_op"), _ev(_R1, 12, 10)],
        [_ev(_R0, 0, 10), _ev(_G0, 0, 10), _ev(_R1, 0, 10), _ev("aten::mm", 0, 10, cat="cpu_op")],
        [_ev(_R0, 5, 0), _ev(_G0, 5, 0), _ev(_R1, 5, 0), _ev("aten::mm", 5, 0, cat="cpu_op")],
        [_ev(_G0, 0, 20), _ev(_R0, 1, 10), _ev(_G1, 2, 5), _ev("aten::add", 3, 1, cat="cpu_op")],
        [_ev(_R0, 0, 10, 1), _ev(_G0, 2, 5, 2), _ev("aten::mm", 3, 1, 2, cat="cpu_op")],
        [_ev(_R0, 0, -10), _ev(_G0, 0, -5), _ev("aten::mm", 1, 1, cat="cpu_op")],
    ],
    ids=["overlapping", "equal", "zero-length-equal", "graph-around-region", "across-threads", "negative"],
)
def test_compiled_regions_and_graphs_nested_oddly_are_read(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    result = from_trace(str(path))
    assert result.ops and all(o.name for o in result.ops)


# ---- a user's non-finite baddbmm alpha in result.json ----------------------------------------


@pytest.mark.parametrize("alpha", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_non_finite_baddbmm_alpha_leaves_result_json_strict_json(tmp_path: Path, alpha: float) -> None:
    q, k, v, bias = torch.randn(4, 16, 8), torch.randn(4, 16, 8), torch.randn(4, 16, 8), torch.randn(4, 16, 16)

    def attention() -> torch.Tensor:
        return torch.bmm(torch.softmax(torch.baddbmm(bias, q, k.transpose(1, 2), alpha=alpha), -1), v)

    attention()
    with neuron_region("alpha", backend="cpu", output_dir=str(tmp_path), print_summary=False) as r:
        for _ in range(3):
            attention()
    assert r.result is not None and r.result.run_dir is not None
    assert any(h.pattern == "attention" for h in r.result.hints)

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is no JSON")

    json.loads((Path(r.result.run_dir) / "result.json").read_text(), parse_constant=refuse)


# ---- graph calls nested thousands deep (result/compiled_names.py) -----------------------------


def test_graph_calls_nested_deep_are_named_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each graph call looked back through every graph call open around it for its region: a
    trace of 16,000 graph calls nested in one another took 28 s to read (0.1 s a round before,
    0.1 s now). Counted, not timed: the graph-name pattern is asked once a row."""
    from neuronscope.result import compiled_names

    n = 3000
    events = [_ev(f"## Call CompiledFxGraph f{i:x} ##", i, 4 * n - 2 * i) for i in range(n)]
    events += [_ev(_R0, n, 10), _ev(_G1, n + 1, 5), _ev("aten::mm", n + 2, 1, cat="cpu_op")]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    asked = {"n": 0}
    pattern = compiled_names._GRAPH

    class Counting:
        def match(self, text: str) -> Any:
            asked["n"] += 1
            return pattern.match(text)

    monkeypatch.setattr(compiled_names, "_GRAPH", Counting())
    result = from_trace(str(path))
    assert asked["n"] <= 4 * (n + 3), asked
    assert "compiled graph: [0/0]" in [o.name for o in result.ops]  # the graph in the region: its region's
