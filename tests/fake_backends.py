"""Backends and a clock for tests, injected through the public ``backend=`` option.

They drive the real torch profiler (the CPU backend's) and fail, count or tell time where a
test needs it, so no test patches the library's private names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from neuronscope.capture.cpu import CpuBackend


class ExactClock:
    """A nanosecond clock that moves only when told (``advance``), or by ``step`` per read."""

    def __init__(self, start_ns: int = 1_000_000, step_ns: int = 0) -> None:
        self.now = start_ns
        self.step = step_ns

    def __call__(self) -> int:
        value = self.now
        self.now += self.step
        return value

    def advance(self, ns: int) -> None:
        self.now += ns


class _Runner:
    """Wraps the real ``torch.profiler.profile`` and runs a test's hooks around its start/stop."""

    def __init__(self, prof: Any, before_start: Callable[[Any], None] | None, before_stop: Callable[[Any], None] | None, after_start: Callable[[Any], None] | None) -> None:
        self.torch_profiler = prof
        self._before_start = before_start
        self._after_start = after_start
        self._before_stop = before_stop

    def start(self) -> None:
        if self._before_start is not None:
            self._before_start(self.torch_profiler)
        self.torch_profiler.start()
        if self._after_start is not None:
            self._after_start(self.torch_profiler)

    def stop(self) -> None:
        if self._before_stop is not None:
            self._before_stop(self.torch_profiler)
        self.torch_profiler.stop()


def faulty_backend(
    *,
    before_start: Callable[[Any], None] | None = None,
    after_start: Callable[[Any], None] | None = None,
    before_stop: Callable[[Any], None] | None = None,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], int] | None = None,
) -> type[CpuBackend]:
    """A CPU backend class whose profiler runs ``before_start`` / ``after_start`` /
    ``before_stop`` (each given the torch profile) and whose device sync runs ``sync``."""

    class Faulty(CpuBackend):
        def make_profiler(self, kwargs: dict[str, Any]) -> Any:
            return _Runner(super().make_profiler(kwargs), before_start, before_stop, after_start)

        def synchronize(self) -> None:
            if sync is not None:
                sync()

        def now_ns(self) -> int:
            return clock() if clock is not None else super().now_ns()

    return Faulty


class CountingBackend(CpuBackend):
    """Counts the captures running at once, and in all (reset with :meth:`reset`)."""

    seen: dict[str, int] = {"now": 0, "max": 0, "total": 0}  # noqa: RUF012 - shared by design
    _lock = threading.Lock()

    @classmethod
    def reset(cls) -> dict[str, int]:
        cls.seen = {"now": 0, "max": 0, "total": 0}
        return cls.seen

    def make_profiler(self, kwargs: dict[str, Any]) -> Any:
        seen, lock = type(self).seen, type(self)._lock

        def started(_: Any) -> None:
            with lock:
                seen["now"] += 1
                seen["total"] += 1
                seen["max"] = max(seen["max"], seen["now"])

        def stopping(_: Any) -> None:
            with lock:
                seen["now"] -= 1

        return _Runner(super().make_profiler(kwargs), None, stopping, started)
