"""A process forked while a capture runs: its regions cannot capture, and it must say so.

The child of ``os.fork`` (a DataLoader worker, ``multiprocessing`` with the fork method) inherits
the parent's "a capture is running" state but not the profiler's threads: torch's profiler
cannot run there, and every region in it is skipped. :func:`check_forked_child` is what a
region asks on entry when it cannot capture: the first time in such a child it warns once
(naming the parent and the fix), later it answers quietly. Nothing is done at the fork itself:
DataLoader workers fork inside captured steps all the time and never enter a region.
"""

from __future__ import annotations

import os
import warnings

from neuronscope.capture import torch_private

__all__ = ["check_forked_child", "forked_during_capture"]


def _profiler_running() -> bool:
    try:
        return torch_private.profiler_flag_on()
    except Exception:  # torch half-imported: no capture either
        return False


# Why global: set in the child by the fork hook (the only moment the parent's state is known),
# read by regions later; one value per process.
_state: dict[str, int | bool] = {"parent": 0, "warned": False}


def _after_fork_in_child() -> None:
    if _profiler_running():
        _state["parent"] = os.getppid()
        _state["warned"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forked_during_capture() -> bool:
    """True in a process forked while its parent was capturing."""
    return bool(_state["parent"])


def check_forked_child() -> bool:
    """True in a process forked during a capture; warns the first time it is asked."""
    if not _state["parent"]:
        return False
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(
            f"neuronscope: this process was forked (from pid {_state['parent']}) while a capture was running; "
            "torch's profiler cannot run in a forked child, so neuronscope regions here capture nothing. "
            "Capture in the parent, or start the workers with the 'spawn' start method",
            RuntimeWarning,
            stacklevel=3,
        )
    return True
