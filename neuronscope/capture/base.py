"""The small interface every backend implements, and the capture that drives torch.profiler.

A backend says which profiler activities to record, what extra arguments ``torch.profiler``
needs (Neuron's ``experimental_config`` and trace exporter), how to synchronise the device
before the capture ends, and which files the capture left behind. :class:`Capture` runs one
``torch.profiler.profile`` with them; it is the only place that starts or stops the profiler.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuronscope.capture import torch_private
from neuronscope.capture.stderr import KINETO_THREAD_NOTE, USDT_MARKER, quiet_native_stderr
from neuronscope.config import Options

__all__ = [
    "Backend",
    "Capture",
    "Started",
    "WrongThreadError",
    "claim_held_for",
    "claim_profiler",
    "defer_to_thread",
    "force_profiler_off",
    "has_deferred",
    "pending_work",
    "profiler_claimed",
    "profiler_running",
    "release_profiler",
    "run_deferred",
    "start_session",
    "stop_session",
    "watch_sessions",
]


class Backend:
    """A profiling backend. Subclasses override what differs; the defaults are CPU's."""

    #: The name stored in results: "cpu", "cuda" or "neuron".
    name = "cpu"

    def __init__(self, options: Options) -> None:
        self.options = options

    @property
    def writes_session_files(self) -> bool:
        """Whether the profiler writes files of its own while it captures (Neuron's session
        files), into a directory that must exist before the start."""
        return self.name == "neuron"

    def now_ns(self) -> int:
        """The clock a capture's wall time is read from (a test's backend gives an exact one)."""
        return time.perf_counter_ns()

    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU]

    def profiler_kwargs(self, scratch_dir: Path | None) -> dict[str, Any]:
        """Extra keyword arguments for ``torch.profiler.profile``."""
        return {}

    def make_profiler(self, kwargs: dict[str, Any]) -> Any:
        """The object :class:`Capture` starts and stops: ``torch.profiler.profile(**kwargs)``.

        A backend whose vendor profiler wraps torch's (an early TorchNeuron ``NeuronProfiler``)
        returns an object with ``start()`` / ``stop()`` and a ``torch_profiler`` attribute that
        holds the ``torch.profiler.profile`` it runs.
        """
        import torch.profiler

        return torch.profiler.profile(**kwargs)

    def environment_warnings(self) -> list[str]:
        """Mistakes in the environment worth a warning before the capture starts."""
        return []

    def synchronize(self) -> None:
        """Wait for queued device work, so that it lands inside the capture."""

    def device_name(self) -> str | None:
        return None

    def collect_artifacts(self, prof: Any, scratch_dir: Path | None) -> dict[str, Any]:
        """Files the capture left behind (Neuron session files), to record in the result."""
        return {}

    def saved_trace(self) -> Path | None:
        """A Chrome trace the profiler already saved (Neuron's ``export_trace``), if any.

        torch.profiler saves a capture's trace once; a second save raises, so a backend whose
        ``on_trace_ready`` saved it reports the file here and the run directory gets a copy.
        """
        return None

    def extra_notes(self, table_has_device: bool) -> list[str]:
        """Notes for the result (e.g. why device time is missing)."""
        return []


#: torch's once-a-process note that a block allocated before profile_memory started was freed.
_UNKNOWN_BLOCK = b"was allocated before the profiling started"
#: What torch prints when a session it finalizes has no Kineto trace of its own to link its ops
#: to: the dead session :func:`_drop_replaced` drops, whose records nobody reads.
_NO_KINETO_LINKS = b"Failed to recover relationship between all profiler and kineto events"


def _allocated_block() -> object:
    """A small CPU tensor, or None where torch is not importable."""
    try:
        import torch

        return torch.empty(1)
    except Exception:
        return None


def profiler_running() -> bool:
    """True when a torch profiler (ours, or the user's own) is running in this process."""
    return torch_private.profiler_flag_on()


# torch's profiler is one per process and its state is per thread. ``_enable_profiler`` keeps
# the session in the starting thread's ThreadLocalDebugInfo (the profiling config is not
# ``global()``), so ``_disable_profiler`` on any other thread finds no session: it warns "no
# active profiling session found", returns an empty result whose ``save`` (export_chrome_trace)
# dereferences a null pointer, and leaves the real session running in the first thread. And two
# sessions prepared at once from two threads race in Kineto's process-wide ActivityProfiler
# (the first ever start registers torch's client on its thread: "External init callback must
# run in same thread as registerClient"), which ends in a segmentation fault. So every start
# in the process (a capture's, an observation's, compare()'s) first takes this one claim, and
# only the thread that started a session stops or exports it.
_claim = threading.Lock()


class WrongThreadError(RuntimeError):
    """A profiler session was asked to stop, or to export, from a thread that did not start
    it (torch's profiler state is per thread: see the comment above :func:`claim_profiler`)."""


def claim_profiler() -> bool:
    """Take the process's one profiler for a session of neuronscope's own; False (at once,
    never blocking) when another session of ours, or the user's own torch.profiler, has it."""
    if profiler_running() or not _claim.acquire(blocking=False):
        return False
    if profiler_running():  # the user's own started meanwhile
        _claim.release()
        return False
    return True


def release_profiler() -> None:
    """Give back what :func:`claim_profiler` took (any thread may: the lock is plain)."""
    _claim.release()


def claim_held_for() -> str | None:
    """Why the claim is held where that is not a capture running: work left for a thread
    that keeps it (a capture ended on another thread than its own: drive/threads) says so in
    its ``holds_claim`` attribute. None where no such work is waiting."""
    if not _claim.locked():
        return None
    with _deferred_lock:
        for pieces in _deferred.values():
            for work, _ in pieces:
                reason = getattr(work, "holds_claim", None)
                if reason:
                    return str(reason)
    return None


def profiler_claimed() -> bool:
    """Whether a session of neuronscope's own holds the profiler."""
    return _claim.locked()


# Work that only a given thread may do (stop a session it started, end a range it opened),
# left by another thread that found it had to be done: run by that thread the next time it
# enters neuronscope (:func:`run_deferred`). A thread that died first took its profiler state
# with it: its work's ``orphaned`` part (release the claim) runs on whichever thread looks
# next, the main thread at exit at the latest. Keyed by the Thread object, not its id: ids
# are reused by later threads, which must not stop a session they never started.
_deferred: dict[threading.Thread, list[tuple[Callable[[], object], Callable[[], None] | None]]] = {}
_deferred_lock = threading.Lock()
#: The same dict, read as a truth value on the hot path (a call past its window) instead of
#: calling :func:`has_deferred`: one name lookup, no call.
pending_work = _deferred


def defer_to_thread(
    thread: threading.Thread, work: Callable[[], object], orphaned: Callable[[], None] | None = None
) -> None:
    """Leave ``work`` for ``thread`` to run; ``orphaned`` runs instead, on another thread,
    if ``thread`` ends first (see :func:`run_deferred`)."""
    with _deferred_lock:
        _deferred.setdefault(thread, []).append((work, orphaned))


def has_deferred() -> bool:
    """Whether any thread has work left for it (one dict read: the hot path's check)."""
    return bool(_deferred)


def run_deferred() -> None:
    """Run the work other threads left for this one, oldest first, and the ``orphaned`` part
    of what they left for threads that have ended since. Each piece is best effort (a failure
    is the profiler's, never the user's program's)."""
    me = threading.current_thread()
    with _deferred_lock:
        work = [w for w, _ in _deferred.pop(me, [])]
        for thread in [t for t in _deferred if not t.is_alive()]:
            work.extend(o for _, o in _deferred.pop(thread) if o is not None)
    for i, piece in enumerate(work):
        try:
            piece()
        except Exception:  # pragma: no cover - torch refusing a late stop: nothing to lose
            pass
        except BaseException:  # Ctrl-C meanwhile: what is left is done at the next entry
            with _deferred_lock:
                _deferred.setdefault(me, [])[:0] = [(w, None) for w in work[i + 1 :]]
            raise


# ---- starting and stopping a session of neuronscope's: one step against every other thread --
#
# Two torch profiler sessions whose lives (Kineto's preparation to ``_disable_profiler``)
# overlap on two threads cannot both be stopped: the second stop crashes in Kineto (SIGSEGV;
# torch 2.13, every order). Every session prepares through a wrapper that takes
# :func:`~.torch_private.session_gate`: under it neuronscope checks that no other session
# lives and starts its own as one step, and stops its own only where none began since (the
# later one's owner stops that; ours is left, its dead state dropped once nothing else lives).


class Started:
    """A session of neuronscope's, as :func:`start_session` began it."""

    def __init__(self, starts: int, span: int | None) -> None:
        #: :func:`~.torch_private.profiler_starts` once it started: another value later means
        #: another session began since and replaced it
        self.starts = starts
        #: this thread's session in torch's state (:func:`~.torch_private.thread_session`)
        self.span = span
        self.ended = self.stopped = False  # its stop asked; that stop stopped it (not replaced)

    def replaced(self) -> bool:
        """Whether another session began since this one started, or ended it (stop_session)."""
        return (self.ended and not self.stopped) or torch_private.profiler_starts() != self.starts


def watch_sessions() -> None:
    """Count torch's profiler sessions from now on (where torch is imported): a session that
    another thread prepared before this is not seen while it is only prepared (a
    ``schedule``'s warm-up: the flag :func:`profiler_running` reads is off until it starts).
    Called where a callable is decorated, and before every start."""
    torch_private.profiler_start_counter()


def start_session(start: Callable[[], None]) -> Started | None:
    """Run ``start`` (a profiler's start, on this thread) where no other session lives in
    torch's state, and return the session; None, with nothing started, where one does (the
    user's on another thread, begun after the caller's own check): torch runs one at a time.
    A start that raises half-way leaves nothing running."""
    watch_sessions()
    with torch_private.session_gate():
        if not _drop_replaced() or profiler_running() or torch_private.thread_session() is not None:
            return None
        if torch_private.sessions_elsewhere():
            return None
        try:
            start()
        except BaseException:
            _settle(Started(torch_private.profiler_starts(), torch_private.thread_session()))
            raise
        return Started(torch_private.profiler_starts(), torch_private.thread_session())


def stop_session(session: Started, stop: Callable[[], None]) -> bool:
    """Run ``stop`` (the session's stop, on its own thread) unless another session began since
    ``session`` started (the user's own): then it is left alone and False returned. Whatever
    ``stop`` does, this thread's session is off afterwards, and the flag right."""
    with torch_private.session_gate():
        if session.ended:
            return session.stopped
        # Off natively: ended by the user's own inside the call, counted or not; a stop crashes.
        gone = session.replaced() or not torch_private.native_profiler_on()
        session.ended = True
        if gone:
            _leave_replaced(session)
            return False
        session.stopped = True
        try:
            stop()
        finally:
            _settle(session)
        return True


def _settle(session: Started) -> None:
    """After this thread's own stop (or a failed start): its session off where the stop did
    not get that far, and the Python flag off where no session runs."""
    if session.span is not None and torch_private.thread_session() == session.span:
        try:
            with quiet_native_stderr():
                torch_private.disable_native_profiler()
        except Exception:  # pragma: no cover - another torch: nothing more can be done
            pass
        torch_private.forget_thread_session()  # a preparation that never started
    force_profiler_off()


def _leave_replaced(session: Started) -> None:
    """``session`` was replaced by another: where its state is still this thread's (the other
    began on another thread), it is dropped once nothing else lives (:func:`_drop_replaced`)."""
    if session.span is not None and torch_private.thread_session() == session.span:
        torch_private.replaced_sessions()[threading.current_thread()] = session.span
        _drop_replaced()


def _drop_replaced() -> bool:
    """Drop this thread's replaced session (:func:`~.torch_private.replaced_sessions`), if
    any; False where it must wait (a session lives on another thread). Under the gate."""
    me, replaced = threading.current_thread(), torch_private.replaced_sessions()
    if me not in replaced:
        return True
    if torch_private.thread_session() != replaced[me] or not torch_private.native_profiler_enabled():
        del replaced[me]  # gone already, or the thread now holds the user's own session
        return True
    if torch_private.sessions_elsewhere():
        return False
    try:
        with quiet_native_stderr((USDT_MARKER, _NO_KINETO_LINKS)):
            torch_private.discard_replaced_session()
    except Exception:  # torch refusing: the thread keeps it; later starts on it are refused
        return False
    del replaced[me]
    return True


def force_profiler_off() -> None:
    """Leave torch's Python-level "profiler enabled" flag off where no session runs.

    ``torch.autograd.profiler.profile.__exit__`` stops the native profiler and only then resets
    the flag: a Ctrl-C landing between the two left the flag set, and every later capture in
    the process saw "a profiler is running" and skipped. The flag is process-wide: it is left
    alone while any thread's session lives (resetting it under the user's running session
    let captures start inside theirs, which crashed the process at their stop).
    """
    with torch_private.session_gate():
        try:
            if not torch_private.profiler_flag_on() or torch_private.thread_session() is not None:
                return
            if not torch_private.sessions_elsewhere():
                torch_private.clear_profiler_flag()
        except Exception:  # pragma: no cover - another torch: nothing more can be done
            pass


class Capture:
    """One ``torch.profiler.profile`` session, driven by a :class:`Backend`."""

    def __init__(self, backend: Backend, scratch_dir: Path | None = None) -> None:
        self.backend = backend
        self.scratch_dir = scratch_dir
        self.prof: Any = None
        self.runner: Any = None  # what start()/stop() drive; usually the profile itself
        #: The thread that started the profiler: the only one that may stop it or export it.
        self.thread: threading.Thread | None = None
        #: The running session (:func:`start_session`), None before the start
        self.session: Started | None = None
        #: Whether the start found another session living (the user's, on another thread) and
        #: started nothing: the capture then times the call with no profile
        self.refused = False

    def start(self) -> None:
        """Start the profiler on this thread (the caller holds :func:`claim_profiler`); or
        nothing, :attr:`refused` set, where another session lives (see :func:`start_session`)."""
        self.thread = threading.current_thread()
        opts = self.backend.options
        runner = self.backend.make_profiler(
            dict(
                activities=self.backend.activities(),
                record_shapes=opts.record_shapes,
                with_stack=opts.with_stack,
                profile_memory=opts.profile_memory,
                **self.backend.profiler_kwargs(self.scratch_dir),
            )
        )
        # With profile_memory, torch warns once a process, from C++ on stderr, when a block
        # allocated before the start is freed inside the capture ("Memory block of unknown
        # size ..."): true of every capture, and nothing the user can act on. Freeing such a
        # block here, while stderr is filtered, spends that warning where no one sees it.
        probe = [_allocated_block()] if opts.profile_memory else []

        def begin() -> None:
            with quiet_native_stderr((USDT_MARKER, _UNKNOWN_BLOCK, KINETO_THREAD_NOTE)):
                runner.start()
                probe.clear()

        self.session = start_session(begin)
        self.refused = self.session is None
        if self.session is not None:
            self.runner = runner
            self.prof = getattr(runner, "torch_profiler", runner)

    def replaced(self) -> bool:
        """Whether another profiler session (the user's own ``torch.profiler``, started inside
        the captured code, on another thread meanwhile, or between a shared session's
        captures) began since this one did. torch runs one session at a time: the new one
        replaced this one without a word, so this one must not be stopped (that would end
        theirs, or crash at their stop) nor read (torch 2.13 can crash exporting a session
        another one replaced)."""
        return self.session is not None and self.session.replaced()

    def stop(self, on_synced: Callable[[], None] | None = None) -> Any:
        """Synchronise the device, stop the profiler and return the finished profile object.
        ``on_synced`` is called once the device has finished the work, before the profiler
        stops: the end of the measured work (the stop's flush is no part of it).

        Whatever goes wrong (the device sync, the stop itself, an interrupt in either), the
        profiler is off when this returns or raises; except where another session replaced
        this one (:meth:`replaced`): then nothing is stopped and the profile is None.
        """
        if self.thread is not None and self.thread is not threading.current_thread():
            raise WrongThreadError("a profiler session can be stopped only by the thread that started it")
        try:
            self.backend.synchronize()
            if on_synced is not None:
                on_synced()
        finally:
            self.end()
        return self.prof

    def end(self) -> None:
        """Stop the profiler (no device sync) where this capture's session still runs; the
        profile is None where another session replaced it or none started."""
        if self.session is None or not stop_session(self.session, self._stop_runner):
            self.prof = None

    def _stop_runner(self) -> None:
        try:
            with quiet_native_stderr():
                self.runner.stop()
        finally:
            self.prof = getattr(self.runner, "torch_profiler", self.runner)
