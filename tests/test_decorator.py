"""@profile_on_neuron on functions, methods, forward, module instances and async functions,
against the real torch profiler on CPU."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

import neuronscope
from neuronscope import NeuronscopeError, ProfileResult, profile_on_neuron


def _work(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu()


def test_bare_decorator_keeps_name_doc_signature_and_uses_the_call_window() -> None:
    @profile_on_neuron
    def scaled(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
        """Scale x."""
        return x * factor

    assert scaled.__name__ == "scaled"
    assert scaled.__doc__ == "Scale x."
    assert list(inspect.signature(scaled).parameters) == ["x", "factor"]
    assert scaled.results == [] and scaled.last_result is None
    x = torch.ones(4)
    assert torch.equal(scaled(x), x * 2)  # warm-up call (default warmup=1): not captured
    assert scaled.last_result is None
    assert torch.equal(scaled(x, factor=3.0), x * 3)  # captured
    assert torch.equal(scaled(x), x * 2)  # window closed: pass-through
    assert len(scaled.results) == 1
    result = scaled.last_result
    assert isinstance(result, ProfileResult)
    assert result.status == "ok" and result.backend == "cpu"
    mul = result.op("aten::mul")
    assert mul is not None and mul.calls == 1
    assert mul.self_device_us is None and mul.device_total_us is None
    assert result.target is not None and result.target.endswith("scaled")


def test_warmup_and_active_window_counts_calls() -> None:
    calls = []

    @profile_on_neuron(warmup=2, active=3, export=False)
    def step(i: int) -> int:
        calls.append(i)
        torch.ones(8).add_(i)
        return i * 10

    values = [step(i) for i in range(10)]
    assert values == [i * 10 for i in range(10)] and calls == list(range(10))
    assert len(step.results) == 3
    assert all(r.run_dir is None for r in step.results)
    assert step.results[-1] is step.last_result


def test_reset_by_name_restarts_a_decorated_callables_window() -> None:
    @profile_on_neuron(export=False)
    def stepper(x: torch.Tensor) -> torch.Tensor:
        return _work(x)

    @profile_on_neuron(name="named_step", export=False)
    def other(x: torch.Tensor) -> torch.Tensor:
        return _work(x)

    x = torch.ones(4)
    for f in (stepper, other):
        f(x), f(x), f(x)
    assert len(stepper.results) == len(other.results) == 1
    neuronscope.reset("stepper")
    stepper(x), stepper(x)
    assert len(stepper.results) == 2 and len(other.results) == 1  # only that name's window
    neuronscope.reset("named_step")  # name= is the name the log lines and reset() use
    other(x), other(x)
    assert len(other.results) == 2
    with pytest.warns(UserWarning, match=r"reset\('no_such_window'\): no call window .*'named_step'"):
        neuronscope.reset("no_such_window")
    stepper(x), stepper(x)
    assert len(stepper.results) == 2  # nothing was reset


def test_a_forward_in_a_long_loop_is_profiled_once() -> None:
    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        @profile_on_neuron(export=False)
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).relu()

    model = Tiny()
    x = torch.randn(2, 8)
    for _ in range(200):
        model(x)
    assert len(Tiny.forward.results) == 1
    result = Tiny.forward.last_result
    assert result is not None and result.name == "Tiny.forward"
    assert result.op("aten::linear") is not None
    assert model.forward.results is Tiny.forward.results  # bound methods read the function's


def test_method_binding_and_static_and_class_methods() -> None:
    class Scaler:
        def __init__(self, k: float) -> None:
            self.k = k

        @profile_on_neuron(warmup=0, export=False)
        def apply(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

        @profile_on_neuron(warmup=0, export=False)
        @staticmethod
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @profile_on_neuron(warmup=0, export=False)
        @classmethod
        def make(cls, k: float) -> Scaler:
            return cls(k)

    s = Scaler(3.0)
    assert torch.equal(s.apply(torch.ones(2)), torch.full((2,), 3.0))
    assert torch.equal(Scaler.twice(torch.ones(2)), torch.full((2,), 2.0))
    assert Scaler.make(5.0).k == 5.0
    assert Scaler.apply.last_result is not None
    assert Scaler.apply.last_result.op("aten::mul") is not None


def test_module_instance_is_wrapped_and_still_the_model() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    profiled = profile_on_neuron(model, warmup=0, export=False) if False else profile_on_neuron(warmup=0, export=False)(model)
    assert isinstance(profiled, nn.Sequential)
    assert len(list(profiled.parameters())) == 2
    out = profiled(torch.randn(3, 4))
    assert out.shape == (3, 4)
    assert profiled.last_result is not None
    assert profiled.last_result.name == "Sequential"
    assert profiled.last_result.op("aten::linear") is not None
    assert len(profiled.results) == 1


def test_module_instance_bare() -> None:
    model = nn.Linear(4, 2)
    profiled = profile_on_neuron(model)
    profiled(torch.randn(1, 4))
    profiled(torch.randn(1, 4))
    assert profiled.last_result is not None


def test_async_function_is_awaited_inside_the_capture() -> None:
    @profile_on_neuron(warmup=0, export=False)
    async def infer(x: torch.Tensor) -> torch.Tensor:
        await asyncio.sleep(0)
        return torch.matmul(x, x)

    assert inspect.iscoroutinefunction(infer)
    out = asyncio.run(infer(torch.eye(3)))
    assert torch.equal(out, torch.eye(3))
    result = infer.last_result
    assert result is not None and result.op("aten::matmul") is not None


def test_each_capture_writes_a_run_directory(runs_dir: Path) -> None:
    @profile_on_neuron(warmup=0, active=2, name="my step")
    def step(x: torch.Tensor) -> torch.Tensor:
        return _work(x)

    step(torch.randn(16, 16))
    step(torch.randn(16, 16))
    dirs = [Path(r.run_dir) for r in step.results if r.run_dir]
    assert len(dirs) == 2 and dirs[0] != dirs[1]
    for d in dirs:
        assert d.parent == runs_dir / "my_step"
        assert {"result.json", "summary.txt"} <= {p.name for p in d.iterdir()}
        assert (d / "trace.json").exists() or (d / "trace.json.gz").exists()
        assert not (d / ".incomplete").exists()
        loaded = neuronscope.load(d)
        assert isinstance(loaded, ProfileResult)
        assert loaded.name == "my step"
        assert [o.name for o in loaded.ops] == [o.name for o in step.results[0].ops] or loaded.ops


def test_user_exception_passes_through_and_the_error_capture_is_exported() -> None:
    class Boom(Exception):
        pass

    error = Boom("bad batch")

    @profile_on_neuron(warmup=0)
    def step(x: torch.Tensor) -> torch.Tensor:
        x.mul(2)
        raise error

    with pytest.raises(Boom) as info:
        step(torch.ones(4))
    assert info.value is error
    result = step.last_result
    assert result is not None and result.status == "error"
    assert result.error == "Boom: bad batch"
    assert result.op("aten::mul") is not None
    assert result.run_dir is not None
    assert neuronscope.load(result.run_dir).status == "error"


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"backend": "tpu"}, "unknown backend"),
        ({"warmup": -1}, "warmup must be >= 0"),
        ({"active": 0}, "active must be >= 1"),
        ({"warmup": 1.5}, "warmup must be an integer"),
        ({"modes": ["bogus"]}, "unknown Neuron profile mode"),
        ({"cores": "3-1"}, "runs backwards"),
        ({"colour": "red"}, "unknown option"),
        ({"export": "yes"}, "export must be True or False"),
    ],
)
def test_bad_options_fail_at_decoration_time(options: dict, fragment: str) -> None:
    with pytest.raises(NeuronscopeError, match=fragment):
        profile_on_neuron(**options)


def test_cuda_backend_without_a_gpu_fails_at_decoration_time() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(NeuronscopeError, match="backend='cpu'"):
        profile_on_neuron(backend="cuda")


@pytest.mark.parametrize("target", [42, "forward", None.__class__])
def test_things_that_cannot_be_wrapped(target: object) -> None:
    with pytest.raises(NeuronscopeError) as info:
        profile_on_neuron(target)
    assert isinstance(info.value, TypeError)


def test_generator_functions_are_refused_with_advice() -> None:
    def gen():  # type: ignore[no-untyped-def]
        yield 1

    with pytest.raises(NeuronscopeError, match="neuron_region"):
        profile_on_neuron(gen)


def test_disabled_by_option_and_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    @profile_on_neuron(enabled=False, warmup=0)
    def f(x: int) -> int:
        return x + 1

    assert f(1) == 2 and f.results == [] and f.last_result is None

    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")

    @profile_on_neuron(warmup=0)
    def g(x: int) -> int:
        return x + 1

    assert g(1) == 2 and g.last_result is None
    assert not torch.autograd.profiler._is_profiler_enabled


def test_environment_disable_after_decoration_stops_captures(monkeypatch: pytest.MonkeyPatch) -> None:
    @profile_on_neuron(warmup=0, export=False)
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    f(torch.ones(1))
    assert f.last_result is None


def test_output_dir_environment_sets_the_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path / "elsewhere"))

    @profile_on_neuron(warmup=0)
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    f(torch.ones(1))
    assert f.last_result is not None and f.last_result.run_dir is not None
    assert Path(f.last_result.run_dir).is_relative_to(tmp_path / "elsewhere")


def test_nested_decorated_call_becomes_a_region_of_the_outer_capture() -> None:
    @profile_on_neuron(export=False)
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x.exp()

    @profile_on_neuron(warmup=0, export=False)
    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner(x) + inner(x)

    outer(torch.ones(8))
    result = outer.last_result
    assert result is not None
    assert "inner" in [name.rsplit(".", 1)[-1] for name in result.regions]
    region = next(r for name, r in result.regions.items() if name.endswith("inner"))
    assert region.calls == 2
    assert "aten::exp" in region.op_names
    assert inner.results == []  # nested calls do not start captures of their own


def test_log_line_says_where_it_wrote(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    logger = logging.getLogger("neuronscope")
    logger.propagate = True
    caplog.set_level(logging.INFO, logger="neuronscope")

    @profile_on_neuron(warmup=0)
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    f(torch.ones(2))
    lines = [r.getMessage() for r in caplog.records if r.name == "neuronscope"]
    assert len(lines) == 1
    assert f.last_result is not None and f.last_result.run_dir in lines[0]
    assert "neuronscope show" in lines[0]
