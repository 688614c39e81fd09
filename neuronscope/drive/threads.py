"""A capture whose thread is not the one that ends it.

torch keeps a profiler session in the state of the thread that started it: only that thread
may stop or export it (another thread finds no session, and the export dereferences nothing).
So a capture ended elsewhere (a generator holding a region across its yields, resumed on
another thread) is dropped and counted, and its stop is left to its own thread
(:func:`neuronscope.capture.base.defer_to_thread`), or done at exit by the main thread.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

from neuronscope.announce import warn_once
from neuronscope.capture.base import (
    defer_to_thread,
    force_profiler_off,
    has_deferred,
    run_deferred,
)
from neuronscope.drive.labels import close_range

__all__ = ["finish_deferred", "strand"]


@atexit.register
def finish_deferred() -> None:
    """At exit, the main thread does what other threads left for it (a capture its generator
    began and another thread ended): its profiler session is stopped, not left running."""
    if has_deferred():
        run_deferred()


def strand(entry: Any, release_profiler: Callable[[], None]) -> None:
    """A capture ended on a thread that did not start it (a generator holding a region across
    its yields, finished on another thread). torch's session lives in the starting thread's
    state: stopping or exporting it here would find no session and crash in the export. So
    nothing is touched here: the capture is dropped, counted as a call that ran uncaptured,
    and its own thread stops it the next time it enters neuronscope (the main thread at exit
    at the latest); the profiler stays claimed until then, so no other capture races it."""
    owner = entry.owner
    name = getattr(owner, "name", "?")
    warn_once(
        ("moved", name),
        f"neuronscope: region {name!r} ended on another thread than the one it began on (a "
        "generator resumed on another thread?); torch's profiler can be stopped only by the "
        "thread that started it, so this capture is dropped (counted in skipped_calls) and "
        "stopped when its thread next enters neuronscope",
    )
    capture = getattr(entry.session, "capture", None)
    if capture is not None:  # the module hooks are process-wide: off now, not at the deferred stop
        capture.unhook()
    for label in entry.inner or ():
        label.cut = True
        label.open = False

    def finish() -> None:
        try:
            for label in reversed(entry.inner or ()):
                close_range(label.range)
                label.range = None
            entry.inner = None
            close_range(entry.range)
            entry.range = None
            if entry.session is not None:
                entry.session.abandon()
        finally:
            release_profiler()

    # What a call skipped meanwhile is told (capture.base.claim_held_for).
    finish.holds_claim = (  # type: ignore[attr-defined]
        f"a capture of {name!r} that ended on another thread than its own still holds the "
        f"profiler until its thread ({entry.thread.name}) next enters neuronscope or ends"
    )

    def orphaned() -> None:  # its thread ended: torch's session went with the thread's state
        force_profiler_off()
        release_profiler()

    defer_to_thread(entry.thread, finish, orphaned)
    if owner is not None:
        owner.on_skip()
