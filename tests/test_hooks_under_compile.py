"""A capture's module hooks never break another thread's ``torch.compile``.

The hooks that name module calls (capture/modules.py) are torch's process-wide ones. Dynamo
traces a frame with the hooks it finds, then builds guards that read those hooks; a capture
that ended in between (its hooks removed) made that thread's call raise
``InternalTorchDynamoError: KeyError`` (test_attack_r37 hit it about 1 run in 10). These tests
make the window certain: the other thread's guard building (Dynamo's own
``CheckFunctionManager``, real) waits until the capture is ending.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.modules import module as torch_module

from neuronscope import neuron_region
from neuronscope.capture import modules

pytest.importorskip("torch._dynamo")


@pytest.fixture
def slow_guards(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """(traced, ending): Dynamo's guard building sets ``traced``, then waits for ``ending``
    and half a second more, so that the capture ends while the guards are being built."""
    import torch._dynamo
    from torch._dynamo import convert_frame

    torch._dynamo.reset()
    traced, ending = threading.Event(), threading.Event()
    real = convert_frame.CheckFunctionManager

    def slow(*args: Any, **kwargs: Any) -> Any:
        traced.set()
        ending.wait(30)
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(convert_frame, "CheckFunctionManager", slow)
    yield traced, ending
    torch._dynamo.reset()


def _compile_while_captured(
    tmp_path: Path, traced: threading.Event, ending: threading.Event
) -> tuple[list[BaseException], Callable[[], Any]]:
    """Another thread's first call of a compiled module, traced while a region captures; the
    region ends while that thread builds its guards. Its errors, and the compiled module."""
    compiled = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()))
    x = torch.randn(4, 8)
    errors: list[BaseException] = []

    def first_call() -> None:
        try:
            compiled(x)
        except BaseException as err:  # reported by the caller's assert
            errors.append(err)

    with neuron_region("while_compiling", output_dir=str(tmp_path)):
        other = threading.Thread(target=first_call)
        other.start()
        assert traced.wait(60), "Dynamo never reached its guards"
        ending.set()
    other.join(60)
    assert not other.is_alive()
    return errors, lambda: compiled(x)


def test_a_capture_ending_while_another_thread_builds_guards_leaves_its_call_alone(
    tmp_path: Path, slow_guards: tuple[threading.Event, threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the end may wait for that compile (here up to 30 s), it does."""
    monkeypatch.setattr(modules, "_END_WAIT_S", 30.0)
    errors, call = _compile_while_captured(tmp_path, *slow_guards)
    assert errors == []
    # The capture waited for that compile, then took its hooks out.
    assert not torch_module._global_forward_hooks and not torch_module._global_forward_pre_hooks
    assert call().shape == (4, 8)


def test_hooks_that_could_not_wait_are_switched_off_then_taken_out(
    tmp_path: Path, slow_guards: tuple[threading.Event, threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile longer than the capture's end waits for (the default wait): the capture
    returns, its hooks stay registered but do nothing, and the first module call outside a
    compile takes them out."""
    errors, call = _compile_while_captured(tmp_path, *slow_guards)
    assert errors == []
    assert len(torch_module._global_forward_pre_hooks) == 1  # parked until a module call
    torch.nn.Linear(2, 2)(torch.randn(1, 2))
    assert not torch_module._global_forward_hooks and not torch_module._global_forward_pre_hooks
    assert call().shape == (4, 8)


def test_a_capture_starting_while_another_thread_compiles_goes_on_without_module_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hooks added under a compile would break it as surely: where the compile lock is held
    longer than the start waits, the capture measures without module names, and says so."""
    from torch._dynamo import convert_frame

    monkeypatch.setattr(modules, "_START_WAIT_S", 0.05)
    held, release = threading.Event(), threading.Event()

    def compiling() -> None:
        with convert_frame.compile_lock:
            held.set()
            release.wait(30)

    other = threading.Thread(target=compiling)
    other.start()
    held.wait(10)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8))
        with neuron_region("no_names", output_dir=str(tmp_path)) as region:
            model(torch.randn(2, 8))
    finally:
        release.set()
        other.join(10)
    result = region.result
    assert result.ops and not result.modules
    assert any("no module names" in note for note in result.notes)
    assert not torch_module._global_forward_pre_hooks
