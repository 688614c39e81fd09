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
from typing import Any

import pytest
import torch
from torch.nn.modules import module as torch_module

import neuronscope
from neuronscope import neuron_region
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

    def __enter__(self) -> _Interrupt:
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
