"""Attacks on two changes: module hooks changed only between other threads' compiles (the
capture waits on Dynamo's compile lock), and op order's one-storage check of op outputs.

The compiles here are real ``torch.compile`` calls in real threads; a custom backend that
waits on an event keeps one compiling (Dynamo holds its compile lock over the backend call).
"""

from __future__ import annotations

import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
import torch
from torch.nn.modules import module as torch_module

import neuronscope
from neuronscope import neuron_region, profile_on_neuron
from neuronscope.capture import modules

pytest.importorskip("torch._dynamo")


class _Compiling:
    """Another thread's first call of a compiled function, its backend held until ``release``."""

    def __init__(self) -> None:
        self.inside, self.done = threading.Event(), threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _backend(self, gm: Any, inputs: Any) -> Any:
        self.inside.set()
        self.done.wait(30)
        return gm.forward

    def _run(self) -> None:
        try:
            torch.compile(lambda x: torch.relu(x) + 1, backend=self._backend)(torch.randn(3))
        except BaseException as err:  # reported by the test's assert
            self.errors.append(err)

    def start(self) -> None:
        self.thread.start()
        assert self.inside.wait(60), "the other thread never reached its backend"

    def release(self) -> None:
        self.done.set()
        self.thread.join(60)


@pytest.fixture
def compiling() -> Iterator[_Compiling]:
    import torch._dynamo

    torch._dynamo.reset()
    other = _Compiling()
    yield other
    other.release()
    torch._dynamo.reset()


class _Interrupt:
    """A Ctrl-C in ``after_s`` seconds: a real signal to the main thread (so a wait on a lock
    is cut short, as a terminal's Ctrl-C does), raising KeyboardInterrupt from a handler this
    test installs and restores."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.timer = threading.Timer(after_s, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1))

    def __enter__(self) -> Self:
        def raise_interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        self.old = signal.signal(signal.SIGUSR1, raise_interrupt)
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.join()
        time.sleep(0.05)  # the handler has run where the signal came late
        signal.signal(signal.SIGUSR1, self.old)


def _module_ranges(model: torch.nn.Module) -> list[str]:
    """The module ranges in a user's own profile of one call of ``model``."""
    with torch.profiler.profile() as prof:
        model(torch.randn(2, 4))
    return [e.name for e in prof.events() if e.name.startswith(modules.MODULE_RANGE_PREFIX)]


def test_ctrl_c_while_the_start_waits_for_a_compile_leaves_nothing_running(
    tmp_path: Path, compiling: _Compiling, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holds: a Ctrl-C while the start waits leaves no profiler and no hooks, and the next
    capture names its modules."""
    monkeypatch.setattr(modules, "_START_WAIT_S", 3.0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    compiling.start()
    with pytest.raises(KeyboardInterrupt):
        with _Interrupt(0.3):
            with neuron_region("interrupted", output_dir=str(tmp_path)):
                model(torch.randn(2, 4))
    compiling.release()
    assert not torch.autograd.profiler._is_profiler_enabled
    assert not torch_module._global_forward_pre_hooks and not torch_module._global_forward_hooks
    with neuron_region("after", output_dir=str(tmp_path)) as region:
        model(torch.randn(2, 4))
    assert region.result is not None and region.result.modules


def test_ctrl_c_while_the_end_waits_for_a_compile_switches_the_hooks_off(
    tmp_path: Path, compiling: _Compiling, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture's end waits (up to 5 s) for another thread's compile: the moment a user
    presses Ctrl-C. The interrupt left the hooks registered and switched on (a range per
    module call in every later profile of the process, the user's own too), and raised out of
    the capture's stop, which loses the measurement."""
    monkeypatch.setattr(modules, "_END_WAIT_S", 3.0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    region = neuron_region("interrupted", output_dir=str(tmp_path))
    interrupt = _Interrupt(0.3)
    with pytest.raises(KeyboardInterrupt):
        try:
            with region:
                model(torch.randn(2, 4))
                compiling.start()
                interrupt.__enter__()  # the region's end is what it cuts short
        finally:
            interrupt.__exit__()
    compiling.release()
    assert compiling.errors == []
    assert region.result is not None and region.result.ops  # what was measured is kept
    assert _module_ranges(model) == []
    assert not torch_module._global_forward_pre_hooks and not torch_module._global_forward_hooks


def test_a_capture_inside_a_compile_backend_of_its_own_thread_goes_on_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holds: a backend that measures the graph it got in a region (the compile lock is the
    thread's own, reentrant) neither waits nor breaks the compile, under an outer capture too."""
    import torch._dynamo

    monkeypatch.setattr(modules, "_START_WAIT_S", 5.0)  # a wait would show

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    seen: list[Any] = []

    def measuring(gm: Any, inputs: Any) -> Any:
        with neuron_region("inside_backend", output_dir=str(tmp_path)) as inner:
            gm(*inputs)
        seen.append(inner)  # nested in the outer capture: its result is the outer's, at its end
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=measuring)
        began = time.perf_counter()
        with neuron_region("outer", output_dir=str(tmp_path)):
            out = compiled(torch.randn(2, 4))
        took = time.perf_counter() - began
    finally:
        torch._dynamo.reset()
    assert out.shape == (2, 4) and seen and seen[0].result is not None and seen[0].result.ops
    assert took < modules._START_WAIT_S  # no wait on its own thread's lock
    assert not torch_module._global_forward_pre_hooks and not torch_module._global_forward_hooks


def _softmax_hints(fn: Any, *args: torch.Tensor) -> list[Any]:
    """The softmax hints of a user's own ``record_shapes=True`` profile of ``fn``."""
    fn(*args)
    with torch.profiler.profile(record_shapes=True) as prof:
        fn(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = neuronscope.from_profiler(prof)
    return [h for h in result.hints if h.pattern == "softmax"]


def _softmax_in_place(x: torch.Tensor) -> torch.Tensor:
    e = (x - x.amax(-1, keepdim=True)).exp_()
    return e.div_(e.sum(-1, keepdim=True))


def _softmax_out(x: torch.Tensor) -> torch.Tensor:
    shifted = torch.empty_like(x)
    torch.sub(x, x.amax(-1, keepdim=True), out=shifted)
    e = torch.exp(shifted)
    return torch.div(e, torch.sum(e, -1, keepdim=True))


def _softmax_bf16(x: torch.Tensor) -> torch.Tensor:
    h = x.float()
    e = torch.exp(h - h.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


@pytest.mark.parametrize(
    ("fn", "dtype", "grad"),
    [(_softmax_in_place, torch.float32, False), (_softmax_out, torch.float32, False), (_softmax_bf16, torch.bfloat16, True)],
    ids=["in_place", "out_arg", "bf16_cast_grad"],
)
def test_a_softmax_written_by_hand_is_still_found_where_storages_are_recorded(fn: Any, dtype: torch.dtype, grad: bool) -> None:
    """Holds: the output read twice (the exp's, by the sum and the div) is one storage through
    in-place ops, ``out=`` arguments, casts and autograd alike."""
    x = torch.randn(4, 16, 32, dtype=dtype, requires_grad=grad)
    assert torch.allclose(fn(x).float(), torch.softmax(x.float(), -1), atol=1e-2)
    assert len(_softmax_hints(fn, x)) == 1


@pytest.mark.xfail(
    strict=True,
    reason="a record_shapes profile records no op's outputs: the one-storage check binds the "
    "readers of op j's output (@%j) to each other, never to op j, so an exp followed by a sum "
    "and a div of another tensor y (both reading y) is taken for a softmax",
)
def test_a_sum_and_div_of_another_tensor_after_an_exp_is_no_softmax() -> None:
    def not_softmax(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = torch.exp(x - x.amax(-1, keepdim=True))  # kept for later, as scores are
        return e, y / y.sum(-1, keepdim=True)  # y normalised: no exp of y anywhere

    x, y = torch.randn(4, 16, 32), torch.rand(4, 16, 32)
    assert _softmax_hints(not_softmax, x, y) == []


def _parked(tmp_path: Path, compiling: _Compiling, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
    """A capture that ended while another thread compiles, its hooks parked (switched off,
    still registered); that compile is let go half a second later. The capture's model."""
    monkeypatch.setattr(modules, "_END_WAIT_S", 0.05)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with neuron_region("parks", output_dir=str(tmp_path)):
        model(torch.randn(2, 4))
        compiling.start()
    assert len(torch_module._global_forward_pre_hooks) == 1
    threading.Timer(0.5, compiling.done.set).start()
    return model


def test_parked_hooks_raise_no_warning_in_the_users_compile(
    tmp_path: Path, compiling: _Compiling, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _parked(tmp_path, compiling, monkeypatch)
    compiled = torch.compile(model, backend="eager")
    with warnings.catch_warnings(record=True) as caught:  # the filters as they are
        compiled(torch.randn(2, 4))  # its compile waits for the other thread's, hooks parked
        compiled(torch.randn(2, 4))
    assert [str(w.message)[:60] for w in caught if "global hooks" in str(w.message)] == []


@pytest.mark.xfail(
    strict=True,
    reason="parked hooks stay in torch's global hook dicts: a module compiled while they are "
    "parked is traced with them and guarded on them, so taking them out recompiles it",
)
def test_parked_hooks_add_no_recompile_to_the_users_compiled_module(
    tmp_path: Path, compiling: _Compiling, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._dynamo.utils import counters

    model = _parked(tmp_path, compiling, monkeypatch)
    compiled = torch.compile(model, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(torch.randn(2, 4))  # its compile waits for the other thread's, hooks parked
        compiling.release()
        counters.clear()
        for _ in range(3):
            compiled(torch.randn(2, 4))
    assert not torch_module._global_forward_pre_hooks
    assert counters["stats"]["unique_graphs"] == 0


def test_a_capture_ending_while_another_thread_compiles_returns_at_once(tmp_path: Path, compiling: _Compiling) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with neuron_region("ends", output_dir=str(tmp_path)):
        model(torch.randn(2, 4))
        compiling.start()
        began = time.perf_counter()
    took = time.perf_counter() - began
    # The hooks wait a moment, then park: the user's thread is not held for the other compile.
    assert took < modules._END_WAIT_S + 0.5
    assert not compiling.errors


@pytest.mark.xfail(
    strict=True,
    reason="a child forked while another thread of the parent compiled inherits Dynamo's compile "
    "lock held by a thread it lacks: its captures wait _START_WAIT_S and go without module names "
    "(and torch.compile there waits for ever, bare torch too). Resetting torch's lock in the child "
    "(os.register_at_fork) fixed it but patched torch's state in every forked child; not done",
)
def test_a_child_forked_while_another_thread_compiles_names_its_modules(tmp_path: Path, compiling: _Compiling) -> None:
    import os

    compiling.start()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one capture, whether it named its modules, through the pipe
        code = 1
        try:
            signal.alarm(30)  # a hang ends the child, not the tests
            with neuron_region("child", output_dir=str(tmp_path)) as region:
                torch.nn.Linear(4, 4)(torch.randn(2, 4))
            named = region.result is not None and bool(region.result.modules)
            os.write(write, str(int(named)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        named = pipe.read()
    assert os.waitpid(pid, 0)[1] == 0
    assert named == "1"


def test_module_names_hold_in_a_thread_that_does_not_compile(tmp_path: Path, compiling: _Compiling) -> None:
    class StartsACompile(torch.nn.Module):
        """Another thread starts compiling while this module runs."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not compiling.inside.is_set():
                compiling.start()
            return x * 2

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), StartsACompile(), torch.nn.Linear(4, 4))
    with neuron_region("names", output_dir=str(tmp_path)) as region:
        model(torch.randn(2, 4))  # the other thread compiles from here on
        model(torch.randn(2, 4))
        compiling.release()
        model(torch.randn(2, 4))
    assert region.result is not None
    assert sorted(m.name for m in region.result.modules) == ["0", "1", "2", "Sequential"]


def test_an_interrupt_as_the_end_takes_the_compile_lock_leaves_it_free(tmp_path: Path, compiling: _Compiling) -> None:
    import _thread

    from torch._dynamo import convert_frame

    def interrupt_then_let_go() -> None:
        time.sleep(0.3)  # the capture's end waits for the compile lock by now
        _thread.interrupt_main()  # noticed once the wait returns, with the lock taken
        time.sleep(0.2)
        compiling.done.set()

    model = torch.nn.Linear(2, 2)
    helper = threading.Thread(target=interrupt_then_let_go)
    with pytest.raises(KeyboardInterrupt):
        try:
            with neuron_region("interrupted", output_dir=str(tmp_path)):
                model(torch.randn(1, 2))
                compiling.start()
                helper.start()
        finally:
            helper.join()
    compiling.release()
    taken: list[bool] = []

    def take() -> None:
        taken.append(convert_frame.compile_lock.acquire(timeout=2))
        if taken[-1]:
            convert_frame.compile_lock.release()

    other = threading.Thread(target=take)
    other.start()
    other.join()
    while convert_frame.compile_lock._is_owned():  # a leak must not hang the tests after this one
        convert_frame.compile_lock.release()
    assert taken == [True]


def test_t5s_layer_norm_in_bf16_is_still_an_rms_norm_hint() -> None:
    """transformers' own T5LayerNorm: ``x * rsqrt(x.to(float32).pow(2).mean(-1) + eps)``, then
    cast to the weight's dtype and scaled: an RMSNorm, found in float32 and, before d709d38,
    in bf16 (T5 in bf16 through from_profiler, eval and training, lost its rms_norm hint)."""
    modeling_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    norm = modeling_t5.T5LayerNorm(64).to(torch.bfloat16)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    norm(x)
    with torch.profiler.profile(record_shapes=True) as prof:
        norm(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = neuronscope.from_profiler(prof)
    assert [h.pattern for h in result.hints] == ["rms_norm"]


def test_t5s_layer_norm_in_bf16_live_keeps_its_weight() -> None:
    """Live (exact links), T5's LayerNorm in bf16 was matched without its weight (a spelling
    whose multiply reads the cast): ``rms_norm(x, (64,), None, eps)`` dropped ``weight * h``.
    Its spelling (the variance alone from the cast) now takes the whole of it."""
    modeling_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    torch.manual_seed(0)
    norm = modeling_t5.T5LayerNorm(64).to(torch.bfloat16)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    f = profile_on_neuron(norm.forward, export=False, backend="cpu", print_summary=False)
    with torch.no_grad():
        f(x)
        f(x)
    (hint,) = [h for h in f.last_result.hints if h.kind == "fusion"]
    assert hint.pattern == "rms_norm" and "(64,), weight, eps=1e-06" in hint.suggestion, hint.suggestion
    assert hint.ops[-1] == "aten::mul" and hint.ops.count("aten::mul") == 2
