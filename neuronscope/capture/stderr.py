"""Drop the lines torch's C++ prints on stderr at a profiler start or stop, and lose nothing else.

torch's CPU build prints ``USDT: ... profiler_start/stop`` straight to file descriptor 2, so no
Python-level redirect or environment variable silences them. :func:`quiet_native_stderr` points
fd 2 at a scratch file for that moment and writes every other line back afterwards: what the
user's program printed meanwhile is delayed, never lost. fd 2 is the whole process's, so the
redirect is too: one thread holds it at a time, and a child forked meanwhile gets the user's
stderr back at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO

__all__ = ["KINETO_THREAD_NOTE", "USDT_MARKER", "quiet_native_stderr"]

USDT_MARKER = b"USDT:"
#: What Kineto prints when the process's first profiler starts on another thread than the one
#: that imported torch: it then skips torch's client init hook, which does nothing in torch's
#: client; nothing for the user to act on.
KINETO_THREAD_NOTE = b"External init callback must run in same thread as registerClient"


class _Redirect:
    """The process's redirect of fd 2: who may change it, and where the user's stderr is."""

    def __init__(self) -> None:
        # Reentrant: a filtered moment inside another on the same thread (the outer one's
        # scratch file is then "stderr" to the inner one, which is right). One thread at a
        # time: a second thread's redirect, begun inside the first's, saved the first's
        # scratch file as the user's stderr and put fd 2 back on it for ever after.
        self.lock = threading.RLock()
        #: ``(the user's fd 2, the scratch file)`` as descriptors, while the outermost
        #: redirect lasts; believed only while fd 2 is on that scratch file (:meth:`live`),
        #: as an interrupt can leave it behind with both closed and their numbers reused
        self.held: tuple[int, int] | None = None

    def live(self) -> tuple[int, int] | None:
        """:attr:`held`, where fd 2 is on its scratch file now; else None."""
        try:
            return self.held if self.held and os.path.samestat(os.fstat(2), os.fstat(self.held[1])) else None
        except OSError:
            return None

    def undo_in_child(self) -> None:
        """After a fork: the child's fd 2 back on the user's stderr. A child forked in the
        moment (a DataLoader worker started by another thread) kept writing into the scratch
        file, and what it wrote after the parent read that back was lost."""
        held, self.held = self.live(), None
        if held is not None:
            with contextlib.suppress(OSError):
                os.dup2(held[0], 2)
        # Held by a thread the child does not have: the child's own captures waited for ever.
        if self.lock.acquire(blocking=False):
            self.lock.release()
        else:
            self.lock = threading.RLock()


# Why global: fd 2 is one per process, and so is its redirect; the fork hook must find it.
_redirect = _Redirect()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_redirect.undo_in_child)


@contextlib.contextmanager
def quiet_native_stderr(drop: tuple[bytes, ...] = (USDT_MARKER, KINETO_THREAD_NOTE)) -> Iterator[None]:
    """For the ``with`` body, lines written to fd 2 that contain any of ``drop`` vanish; every
    other line is written to stderr when the body ends (where the user pointed fd 2 elsewhere
    meanwhile, to their new target). Where fd 2 is closed or no scratch file can be made, the
    body runs unfiltered."""
    # Lock order: callers hold torch_private.session_gate first, then this lock; never the
    # reverse, or a capture and a filtered moment could wait on each other.
    with _redirect.lock, contextlib.ExitStack() as held:
        try:
            saved = os.dup(2)
            held.callback(os.close, saved)
            scratch = held.enter_context(_scratch_file())
            on_scratch = os.fstat(scratch.fileno())
        except OSError:  # fd 2 closed by the user, or no usable temporary directory
            scratch = None
        if scratch is None:  # the body runs unfiltered: nothing to filter, nothing to lose
            yield
            return
        with contextlib.suppress(Exception):  # the user's own stderr object may be anything
            sys.stderr.flush()  # what Python printed before the moment, printed before it
        before = _redirect.live()  # an outer moment's, on this thread
        _redirect.held = before or (saved, scratch.fileno())
        try:
            # Inside the try: an interrupt right after it still puts fd 2 back.
            with contextlib.suppress(OSError):
                os.dup2(scratch.fileno(), 2)
            yield
        finally:
            # First, and no interrupt can skip it: fd 2 back on the user's stderr, unless they
            # pointed it elsewhere meanwhile (their own log, from another thread; or closed it):
            # putting it back undid theirs, and what they wrote next missed their log.
            moved = False
            try:
                moved = not os.path.samestat(os.fstat(2), on_scratch)
            except OSError:
                moved = True
            finally:
                if not moved:
                    try:
                        os.dup2(saved, 2)
                    except OSError:
                        pass
            _redirect.held = before
            _write_back(scratch, drop)


def _scratch_file() -> IO[bytes]:
    """Where fd 2 points for the moment: a file in memory where the OS makes one (Linux's
    ``memfd_create``), else a temporary file. A full disk under the temporary directory made
    the user's own writes to stderr fail there (ENOSPC) and lost their lines."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):
            return os.fdopen(os.memfd_create("neuronscope-stderr", os.MFD_CLOEXEC), "w+b")
    return tempfile.TemporaryFile()


def _write_back(scratch: IO[bytes], drop: tuple[bytes, ...]) -> None:
    """Write the scratch file's lines to fd 2, but those containing a ``drop`` marker."""
    try:
        scratch.seek(0)
        lines = scratch.read().splitlines(keepends=True)
    except OSError:
        return
    kept = b"".join(line for line in lines if not any(m in line for m in drop))
    while kept:  # a pipe takes part of a large write at a time
        try:
            kept = kept[os.write(2, kept) :]
        except OSError:  # the user's stderr is gone (a closed pipe): as their own lines are
            return
