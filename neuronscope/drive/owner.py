"""Who opens entries in the call scope (:mod:`neuronscope.drive.scope`): an :class:`Owner`
is what a region object or a decorated callable brings to its entries (options, name, call
window, the count of uncaptured calls, where results go), and :func:`keep_result` bounds the
results each keeps.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from neuronscope.announce import announce_window, announce_window_used, on_skipped
from neuronscope.capture.base import claim_held_for, profiler_claimed, profiler_running, watch_sessions
from neuronscope.capture.cells import execution_count, in_kernel
from neuronscope.capture.observe import Observation
from neuronscope.config import Options
from neuronscope.drive.window import CallWindow, windows
from neuronscope.result.types import ProfileResult

__all__ = ["KERNEL_MODULE", "MAX_KEPT_RESULTS", "Owner", "keep_result"]

#: Results a decorated callable or a region name keeps in ``.results`` (the newest): with
#: ``active=None`` on a hot function the list would otherwise grow for the life of the
#: process. Older ones are dropped; their run directories stay on disk.
MAX_KEPT_RESULTS = 100

#: The module a Jupyter kernel imports: calls past their window are checked for a re-run cell
#: only where it is loaded.
KERNEL_MODULE = "ipykernel"


def keep_result(results: list[ProfileResult], result: ProfileResult) -> None:
    """Append ``result``, dropping the oldest beyond :data:`MAX_KEPT_RESULTS`."""
    results.append(result)
    del results[:-MAX_KEPT_RESULTS]


class Owner:
    """What a region object or a decorated callable brings to its entries: options, name,
    call window, the count of calls that ran uncaptured, and where results go."""

    #: Whether re-entering this owner inside its own quiet pass may be a skipped exit (a region
    #: entered by hooks) rather than recursion; decorated calls always pair their exits.
    reentry_check = False
    #: Whether a capture of this owner logs its one line when it ends (compare() says what it
    #: measured itself, and exports the comparison as a whole).
    announce = True
    # Guards the owners' counts of skipped calls (taken only when a call had to skip).
    _count_lock = threading.Lock()
    #: How long the newest unprofiled warm-up call took (us), or None: what a capture's
    #: profiled wall time is checked against (:mod:`neuronscope.result.trust`). Class
    #: defaults, set on the instance when known (subclasses need not call this __init__).
    unprofiled_us: float | None = None
    #: Whether that call was the observed one (the only warm-up call of the default window):
    #: the observation's profiler ran through it, so it is no faster than the call unprofiled.
    unprofiled_observed: bool = False
    _said_used_at: int | None = None  # the notebook cell told its window is used up
    captured_in_cell: int | None = None  # the notebook cell of the newest capture
    #: What was observed before a capture of this owner when it has no call window (a
    #: compare() variant's warm-up); a windowed owner's is its window's.
    observed: Observation | None = None

    def __init__(self, options: Options, name: str, target: str | None, window: CallWindow | None) -> None:
        self.options = options
        self.name = name
        self.target = target
        self.window = window
        self.skipped = 0
        # From its decoration on, a session another thread prepares is seen (base.start_session).
        watch_sessions()

    def on_used_window(self) -> None:
        """A call past the window. In a notebook, say so once per cell run (a re-run cell
        would otherwise show the old result as if new); elsewhere nothing (a loop's calls)."""
        if KERNEL_MODULE not in sys.modules or self.window is None or not in_kernel():
            return
        count = execution_count()
        if count is None or count in (self._said_used_at, self.captured_in_cell):
            return  # said in this cell already, or the cell's own loop ran past its capture
        self._said_used_at = count
        announce_window_used(self.name, self.window.warmup, self.window.active, len(self.window.results))

    def observation(self) -> Observation | None:
        """The observation its next capture takes: the one its call window made, if any."""
        return self.window.observation if self.window is not None else self.observed

    def skipped_so_far(self) -> int:
        """Calls that ran uncaptured until now; each result records this count."""
        return self.skipped

    def on_skip(self) -> None:
        """A call ran uncaptured because the profiler was not free: the log names what held
        it (the user's own torch.profiler, another capture, a capture stranded on a thread)."""
        with Owner._count_lock:
            self.skipped += 1
            count = self.skipped
        if self.window is not None:
            self.window.give_back()
        if profiler_running() and not profiler_claimed():
            cause = "the user's own torch.profiler was running (the call shows in it as a labelled range)"
        else:
            cause = (
                windows.shared_note()
                or claim_held_for()
                or "another capture of neuronscope's (another thread or task) was running"
            )
        on_skipped(self.name, count, cause)

    def on_first_warmup(self) -> None:
        """The window's first warm-up call: say what will be captured, and when."""
        if self.window is not None:
            announce_window(self.name, self.window.warmup, self.window.active)

    def on_result(self, result: ProfileResult) -> None:
        """A capture of this owner ended with ``result``."""

    # Typed Any: the scope module, which defines Entry, imports this one.
    def on_abandoned(self, entry: Any) -> None:
        """``entry`` (a :class:`~neuronscope.drive.scope.Entry`) of this owner was closed because
        its exit never came (see :func:`~neuronscope.drive.scope.enter`)."""
