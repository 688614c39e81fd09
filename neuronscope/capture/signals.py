"""Python signal handlers held back around a session's start and stop.

A Python signal handler runs on the main thread between two bytecodes, inside whatever runs
there: a handler that runs the user's own ``torch.profiler`` in the middle of a capture's start
(between Kineto's preparation and the start) consumes the preparation, and the start then leaves
the thread's profiler broken: any later preparation or stop on it crashes the process (SIGSEGV;
torch 2.13, bare torch in that order too). The session gate cannot keep it out: it is the same
thread. :func:`handlers_held` makes the start (and the stop) one step for such handlers: each
signal that arrives meanwhile is handed to its handler right after, in the order it came.
"""

from __future__ import annotations

import _signal
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["handlers_held"]

# The signal numbers, once: ``signal.valid_signals()`` builds a set of enums (about 115 us), and
# ``signal.getsignal`` wraps each answer in one (about 0.8 us a signal); the C functions that
# ``signal`` re-exports from ``_signal`` read the 62 handlers in about 3 us, a start's whole cost.
_NUMBERS = tuple(int(s) for s in signal.valid_signals())


@contextmanager
def handlers_held() -> Iterator[None]:
    """Hold back the Python signal handlers while the block runs (on the main thread; a no-op
    on any other, where no handler runs). Signals that came meanwhile are handed to their own
    handlers when it ends, oldest first: a KeyboardInterrupt is raised there, after the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        came.append((signum, frame))

    swapped: dict[int, Any] = {}  # the signal's own handler, while ``hold`` stands in
    try:
        for signum in _NUMBERS:
            try:
                handler = _signal.getsignal(signum)
                if callable(handler):
                    _signal.signal(signum, hold)
                    swapped[signum] = handler
            except (OSError, ValueError, RuntimeError):  # not settable here (SIGKILL, SIGSTOP)
                continue
        yield
    finally:
        for number, handler in swapped.items():
            _signal.signal(number, handler)
        for number, frame in came:
            swapped[number](number, frame if frame is not None else sys._getframe())
