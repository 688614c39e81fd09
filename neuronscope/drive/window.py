"""Call windows: which calls of a region name or a decorated callable are captured.

``warmup`` calls run unprofiled, then ``active`` calls are captured, then the window is closed;
:data:`windows` holds every window of the process, so that ``neuronscope.reset()`` reaches them.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from neuronscope.announce import warn_user
from neuronscope.capture.base import release_profiler
from neuronscope.capture.record import LOST
from neuronscope.result.types import ProfileResult

__all__ = ["CallWindow", "Windows", "end_open_windows", "end_shared", "keep_shared", "windows"]


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
        #: The profiler session its captures share (capture.record.SharedSession), while open,
        #: and its captures that ended in it, waiting for its end: (Session, Owner) each.
        self.shared: Any = None
        self.pending: list[Any] = []
        #: Ends the shared session and delivers its captures' results (set by the scope).
        self.end_shared: Any = None
        self.shared_name = ""
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
        """Count from zero again: warm-up first, then the captures (``neuronscope.reset()``).
        A shared session still open ends first: its captures' results are delivered."""
        end = self.end_shared
        if end is not None:
            end()
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
        #: Windows whose shared profiler session is open between two of their captures.
        self.open_shared: set[CallWindow] = set()

    def shared_note(self) -> str | None:
        """Why the profiler is held between captures, where a window's shared session is."""
        for window in list(self.open_shared):
            return (
                f"the call window of {window.shared_name!r} keeps one profiler session over its "
                f"{window.active} captures (one_session) until its last capture ends"
            )
        return None

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
        """Start every window again, or (with ``name``) those of that name: the region name's
        and those of the decorated callables of that name. A name that matches no window warns
        (a typo would otherwise leave the window closed without a word) and names the known
        ones; it does not raise, since a reset in a training loop must not end the run."""
        with self._lock:
            owned = [o for o in self.owners if o.window is not None]
            if name is None:
                found = [*self._by_name.values(), *(o.window for o in owned)]
            else:
                found = [w for n, w in self._by_name.items() if n == name]
                found += [o.window for o in owned if o.name == name and o.window not in found]
            known = sorted({*self._by_name, *(o.name for o in owned)})
        if name is not None and not found:
            warn_user(
                f"neuronscope.reset({name!r}): no call window has that name, nothing was reset; "
                f"windows by name: {', '.join(map(repr, known)) or 'none yet'} (a region has one "
                "only with warmup= or active=); neuronscope.reset() resets them all"
            )
        for window in found:
            window.restart()


# Process-wide by nature: a region name's window outlives its objects (one a pass in a loop).
windows = Windows()


# ---- a window's captures in one profiler session (Options.one_session) ----------------------


def keep_shared(window: CallWindow, name: str) -> None:
    """A capture of ``window`` ended and more are to come: its shared session stays open and
    holds the profiler's claim (a capture tried meanwhile says why it skipped:
    :meth:`Windows.shared_note`), until the window's last capture, ``neuronscope.reset()`` or
    the exit ends it."""
    window.end_shared = lambda: end_shared(window, release=True)
    window.shared_name = name
    windows.open_shared.add(window)


def end_shared(window: CallWindow, deliver_last: bool = True, release: bool = False) -> ProfileResult | None:
    """End ``window``'s shared profiler session on the thread that started it (elsewhere:
    nothing, its thread ends it): stop it, then build each of its captures' results from
    its slice, oldest first, and hand them to their owners; the last one is returned instead
    where ``deliver_last`` is False (the last capture's own exit delivers it). ``release``
    gives back the claim kept between the captures (an end not at a capture's exit)."""
    shared = window.shared
    if shared is not None and shared.thread is not None and shared.thread is not threading.current_thread():
        return None
    window.shared = window.end_shared = None
    windows.open_shared.discard(window)
    pending, window.pending = window.pending, []
    # The claim is still the window's only while its session runs (an abandoned one, stopped
    # by its own thread after a capture ended elsewhere, gave the claim back then; one that
    # another session replaced was never stopped, and still holds it).
    release = release and shared is not None and shared.prof is None
    try:
        if shared is not None:
            try:
                shared.finish()
            except Exception:  # the stop failing: each capture's result says it has no events
                pass
            if shared.lost and pending:
                warn_user(f"neuronscope: {window.shared_name or 'a call window'}: {len(pending)} capture(s) {LOST}")
        last: ProfileResult | None = None
        for i, (session, owner) in enumerate(pending):
            final = i == len(pending) - 1 and not deliver_last
            result = session.build(reraise=final)
            if final:
                last = result
            elif owner is not None:
                owner.on_result(result)
        return last
    finally:
        if release:
            release_profiler()


@atexit.register
def end_open_windows() -> None:
    """At exit, shared sessions still open (windows whose last captures never came) end, and
    their captures' results are built and exported: what was measured is kept."""
    for window in list(windows.open_shared):
        try:
            end_shared(window, release=True)
        except Exception:  # pragma: no cover - at exit: nothing more to do
            pass
