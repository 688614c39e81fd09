"""Call windows: which calls of a region name or a decorated callable are captured.

``warmup`` calls run unprofiled, then ``active`` calls are captured, then the window is closed;
:data:`windows` holds every window of the process, so that ``neuronscope.reset()`` reaches them.
"""

from __future__ import annotations

import threading
from typing import Any

from neuronscope.result.types import ProfileResult

__all__ = ["CallWindow", "Windows", "windows"]


class CallWindow:
    """Counts calls: ``warmup`` unprofiled, then ``active`` captured, then closed for good.

    ``active=None`` never closes. Thread-safe: the count is taken under a lock while the
    window is open; once closed, callers read one attribute.
    """

    def __init__(self, warmup: int, active: int | None) -> None:
        self.warmup = warmup
        self.active = active
        self.calls = 0
        self.closed = False
        #: What the window's captures gave, oldest first.
        self.results: list[ProfileResult] = []
        #: What its last warm-up call observed (capture.observe): its captures' exact data
        #: flow. The window's own, so that two callables of one name never share one.
        self.observation: Any = None
        self._lock = threading.Lock()

    def next_call_captured(self) -> bool:
        """Count one call; True when this call falls inside the capture window."""
        with self._lock:
            index = self.calls
            self.calls += 1
            if self.active is not None and index + 1 >= self.warmup + self.active:
                self.closed = True
            if index < self.warmup:
                return False
            return self.active is None or index < self.warmup + self.active

    def restart(self) -> None:
        """Count from zero again: warm-up first, then the captures (``neuronscope.reset()``)."""
        with self._lock:
            self.calls = 0
            self.closed = False

    def give_back(self) -> None:
        """A call counted as captured could not be (another capture held the profiler): its
        slot goes back, so that ``active`` calls are captured in the end."""
        with self._lock:
            if self.active is not None and self.calls > self.warmup:
                self.calls -= 1
                self.closed = self.calls >= self.warmup + self.active



class Windows:
    """Every call window of the process: each region name's (shared by the region objects of
    that name: one written inline in a loop is a new object on every pass) and each decorated
    callable's, so that :meth:`reset` reaches them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, CallWindow] = {}
        self.owners: list[Any] = []  # decorated callables, for reset() and the note at exit

    def for_name(self, name: str, warmup: int, active: int | None) -> CallWindow:
        """The name's window; a fresh one when asked for another (a re-run notebook cell with
        new ``warmup=`` / ``active=``)."""
        with self._lock:
            window = self._by_name.get(name)
            if window is None or (window.warmup, window.active) != (warmup, active):
                window = self._by_name[name] = CallWindow(warmup, active)
            return window

    def add_owner(self, owner: Any) -> None:
        """Keep ``owner`` (with a ``window``) so that :meth:`reset` reaches its window."""
        with self._lock:
            self.owners.append(owner)

    def reset(self, name: str | None = None) -> None:
        """Start every window again, or (with ``name``) that region name's."""
        with self._lock:
            if name is not None:
                found = [w for n, w in self._by_name.items() if n == name]
            else:
                found = [*self._by_name.values(), *(o.window for o in self.owners if o.window is not None)]
        for window in found:
            window.restart()


# Process-wide by nature: a region name's window outlives its objects (one a pass in a loop).
windows = Windows()
