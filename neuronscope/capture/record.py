"""One capture, start to stop, and the record of what it gave (the capture stage's output).

A :class:`CaptureSession` drives one ``torch.profiler`` run through an injected
:class:`~.base.Backend` and clock, takes Dynamo's snapshot before the start and its facts after
the stop, and returns a frozen :class:`CaptureRecord`. It knows nothing of results, run
directories or logging: the later stages build those from the record.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neuronscope.capture import dynamo, torch_private
from neuronscope.capture.base import Backend, Capture, WrongThreadError
from neuronscope.capture.modules import ModuleFacts, ModuleHooks
from neuronscope.capture.stderr import quiet_native_stderr

__all__ = ["BUSY", "LOST", "MARKER", "REPLACED", "CaptureRecord", "CaptureSession", "SharedSession"]

#: The range that bounds each capture of a shared session (left out of its events).
MARKER = "neuronscope::capture#"
#: Why a shared session's captures have no events: another session replaced it.
LOST = (
    "lost: another torch profiler session (your own torch.profiler?) started while this window's "
    "shared session ran (between or inside its captures) and replaced it (one_session); pass "
    "one_session=False to profile inside your own torch.profiler"
)
#: Why a capture has no events: a session started inside the captured code (or on another
#: thread while it ran) replaced it.
REPLACED = (
    "no events: another torch profiler session (your own torch.profiler?) started inside the "
    "captured call (or on another thread while it ran) and replaced neuronscope's (torch runs "
    "one session at a time); start yours outside the captured call instead: neuronscope then "
    "leaves it alone and labels the call in it"
)
#: Why a capture has no events: another thread's session was living when it began.
BUSY = (
    "no events: another torch profiler session (your own torch.profiler on another thread?) "
    "was running when this capture began, and torch runs one session per process; the call ran "
    "unprofiled (its wall time is kept). Capture while no other profiler runs"
)
#: What torch prints (C++, stderr) at each toggle of CPU collection with another activity on.
_TOGGLE_NOTE = b"Toggling CPU activity"


@dataclass(frozen=True)
class CaptureRecord:
    """What one capture gave, before any analysis: the facts a result is built from."""

    backend: str
    #: The finished ``torch.profiler.profile`` (None when the profiler never started).
    prof: Any
    wall_time_us: float
    #: Dynamo's records during the capture (plain data for the compile hints).
    compile_facts: dict[str, Any]
    device_name: str | None = None
    #: Why the capture itself failed (device sync, profiler stop), or None.
    error: str | None = None
    #: An interrupt (Ctrl-C) that landed while the capture stopped: the caller builds and keeps
    #: the result first, then raises it again.
    interrupted: BaseException | None = None
    artifacts: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: the module calls' classes and sources (the calls themselves are ranges of ``prof``)
    modules: ModuleFacts | None = None
    #: Options the capture turned on by itself beyond the user's, ``{option: {"value", "why"}}``
    #: (:func:`neuronscope.capture.observe.options_added`).
    options_added: dict[str, Any] = field(default_factory=dict)


class SharedSession:
    """One ``torch.profiler`` session kept over several captures (a call window's), each a
    range marked ``neuronscope::capture#<n>``, split into one profile per capture after the
    session stops (:func:`~neuronscope.capture.torch_private.profile_slice`).

    Why: each profiler session torch starts prepares Kineto afresh, and on CUDA that registers
    CUPTI's timestamp callback again; kernel records of every session after the first in a
    process can come back on another clock (pytorch/pytorch#192021, #175790). torch's own
    ``schedule`` does not avoid it: each of its cycles prepares a new trace. Between two
    captures, collection is toggled off (``toggle_collection_dynamic``): the user's code in
    between is not recorded. The session lives in the state of the thread that started it;
    only that thread opens, closes and finishes it.
    """

    def __init__(self, backend: Backend, scratch_dir: Path | None = None) -> None:
        self.backend = backend
        self.capture = Capture(backend, scratch_dir=scratch_dir)
        #: profiler sessions this object started (one at most)
        self.sessions_started = 0
        self.captures = 0
        self.prof: Any = None
        self._marker: Any = None
        #: Set once another session (the user's own torch.profiler) replaced this one in torch's
        #: state: it is then never toggled or stopped (that would be theirs), and its captures
        #: have no events.
        self.lost = False
        self._trace_cache: tempfile.TemporaryDirectory[str] | None = None  # removed with the object

    @property
    def thread(self) -> threading.Thread | None:
        return self.capture.thread

    @property
    def finished(self) -> bool:
        return self.prof is not None or self.lost

    def replaced(self) -> bool:
        """Whether another profiler session started since this one did (the user's own
        torch.profiler, between two captures): torch keeps one session, so this one is gone.
        Marks it :attr:`lost` when so."""
        if not self.lost and self.prof is None:
            self.lost = self.capture.replaced()
        return self.lost

    def open(self) -> str:
        """Begin one capture: the session's start for the first, collection back on for the
        others; returns the capture's marker name."""
        import torch.autograd.profiler as autograd_profiler

        if self.capture.runner is None:
            self.capture.start()
            if self.capture.refused:  # another thread's session lives: the next call tries again
                raise RuntimeError(BUSY)
            self.sessions_started += 1
        elif self.replaced():
            raise RuntimeError(LOST)
        else:
            self._toggle(True)
        name = f"{MARKER}{self.captures}"
        self.captures += 1
        marker = autograd_profiler.record_function(name)
        marker.__enter__()
        self._marker = (marker, torch_private.profiler_starts())
        return name

    def close(self, on_synced: Callable[[], None] | None = None) -> None:
        """End the open capture: the device synchronised (its work inside the range), the
        marker closed, collection off until the next :meth:`open`."""
        marker, self._marker = self._marker, None
        try:
            self.backend.synchronize()
            if on_synced is not None:
                on_synced()
        finally:
            if marker is not None:  # not ended in a session that replaced this one
                torch_private.end_range(*marker)
            self._toggle(False)

    def finish(self) -> Any:
        """Stop the session (the device synchronised, the profiler off whatever happens);
        one that another replaced is left to :meth:`Capture.stop`, which never stops it."""
        session = self.capture.session
        if self.prof is None and session is not None and not session.ended:
            self.prof = self.capture.stop()
            self.lost = self.lost or self.prof is None  # None: replaced (stop_session)
        return self.prof

    def slice(self, marker: str) -> Any:
        """The finished session seen through one capture's range; None where it has none."""
        if self.prof is None:
            return None
        span = torch_private.marker_span(self.prof, marker)
        if span is None:
            return None
        if self._trace_cache is None:
            self._trace_cache = tempfile.TemporaryDirectory(prefix="neuronscope-session-")
        return torch_private.profile_slice(self.prof, span[0], span[1], marker, self._trace_cache.name)

    def _toggle(self, enable: bool) -> None:
        toggle = getattr(self.capture.runner, "toggle_collection_dynamic", None)
        if toggle is None:  # a vendor's wrapper of torch's profiler: it records throughout
            return
        # Under the gate: no other thread's session begins between the check and the toggle
        # (that would toggle theirs: Kineto's activities are process-wide).
        with torch_private.session_gate():
            if self.replaced():
                return
            try:
                with quiet_native_stderr((_TOGGLE_NOTE,)):
                    toggle(enable, self.backend.activities())
            except Exception:  # the user's code recorded between captures costs time, not results
                pass


class CaptureSession:
    """Start and stop one capture. ``clock`` (ns) defaults to the backend's own. With
    ``shared``, the capture is one range of that :class:`SharedSession`: :meth:`stop` gives a
    record without its profile, which :meth:`complete` adds once the shared session ends."""

    def __init__(
        self,
        backend: Backend,
        *,
        clock: Callable[[], int] | None = None,
        scratch_dir: Path | None = None,
        options_added: dict[str, Any] | None = None,
        shared: SharedSession | None = None,
    ) -> None:
        self.backend = backend
        self.options_added = dict(options_added or {})
        self.clock = clock or backend.now_ns
        self.shared = shared
        self.marker: str | None = None
        self.capture = shared.capture if shared is not None else Capture(backend, scratch_dir=scratch_dir)
        self._compile_before: dict[str, Any] = {}
        self._started_ns = 0
        self.module_hooks: ModuleHooks | None = None
        self._start_notes: list[str] = []

    @property
    def prof(self) -> Any:
        """The profile object (running between ``start`` and ``stop``, finished after)."""
        return self.capture.prof

    def start(self) -> None:
        """Take Dynamo's snapshot and start the profiler; on failure the profiler is left off."""
        self._compile_before = dynamo.snapshot()
        try:
            if self.shared is not None:
                self.marker = self.shared.open()
            else:
                self.capture.start()
        except BaseException:
            self.abandon()
            raise
        hooks = ModuleHooks()
        if hooks.install():  # after the start: a hook that found no profiler would label nothing
            self.module_hooks = hooks
        elif hooks.refused:
            self._start_notes.append(hooks.refused)
        self._started_ns = self.clock()

    def on_own_thread(self) -> bool:
        """Whether the running thread may stop this capture: the one that started it (or
        none started it yet). torch's profiler session lives in that thread's state."""
        return self.capture.thread is None or self.capture.thread is threading.current_thread()

    def abandon(self) -> None:
        """Undo a start that failed half-way: torch's profiler is process-wide, and one left
        running would make every later capture in the process skip. On a thread other than
        the starting one it touches nothing (:class:`WrongThreadError`)."""
        if not self.on_own_thread():
            raise WrongThreadError("a capture can be abandoned only by the thread that started it")
        self._remove_hooks()
        if self.shared is not None and self.marker is not None:  # the shared session ends with it
            try:
                self.shared.close()
            except Exception:
                pass
        try:
            self.capture.end()  # not where another session replaced it (see Capture.end)
        except Exception:
            pass
        if self.shared is not None and self.shared.prof is None:  # ended: its slices stay readable
            self.shared.prof = self.capture.prof

    def stop(self) -> CaptureRecord:
        """Stop the profiler and return the record. Never raises: a failure or an interrupt
        during the stop is kept in the record, and the profiler is off afterwards; except on
        a thread that did not start it, where it raises :class:`WrongThreadError` at once and
        touches nothing."""
        if not self.on_own_thread():
            raise WrongThreadError("a capture can be stopped only by the thread that started it")
        error: str | None = None
        interrupted: BaseException | None = None
        work_end: list[int] = []  # when the device finished the work, before the profiler's flush
        try:
            if self.shared is not None:
                self.shared.close(on_synced=lambda: work_end.append(self.clock()))
                prof = None  # the shared session's slice, once it ends (complete())
            else:
                prof = self.capture.stop(on_synced=lambda: work_end.append(self.clock()))
        except Exception as err:  # the profiler failing must not break the user's program
            error = f"profiler failed: {type(err).__name__}: {err}"
            prof = self.capture.prof
        except BaseException as err:  # Ctrl-C while stopping: keep what was measured
            interrupted = err
            error = f"{type(err).__name__} while the capture stopped"
            prof = self.capture.prof
        # The work's wall time: the profiler's stop (flushing and processing its events, tens
        # of ms) is not the user's code. Where the sync failed, up to the stop's end.
        wall_us = ((work_end[0] if work_end else self.clock()) - self._started_ns) / 1e3
        # After the stop: reading the modules' sources is no part of the measured work.
        try:
            module_facts = self._remove_hooks()
        except BaseException as err:  # Ctrl-C while waiting for another thread's compile
            module_facts = None
            interrupted = interrupted or err
            error = error or f"{type(err).__name__} while the capture stopped"
        notes = list(self._start_notes)
        artifacts: dict[str, Any] = {}
        if self.shared is None:
            artifacts = self._artifacts(prof, notes)
            if prof is None and self.capture.replaced():
                notes.append(REPLACED)
            elif self.capture.refused:
                notes.append(BUSY)
        try:
            device = self.backend.device_name()
        except Exception:
            device = None
        return CaptureRecord(
            backend=self.backend.name,
            prof=prof,
            wall_time_us=wall_us,
            compile_facts=dynamo.facts(self._compile_before),
            device_name=device,
            error=error,
            interrupted=interrupted,
            artifacts=artifacts,
            notes=tuple(notes),
            modules=module_facts,
            options_added=self.options_added,
        )

    def complete(self, record: CaptureRecord) -> CaptureRecord:
        """A shared session's capture, once the session ended: its record with its own slice
        of the session as the profile, and the backend's artifacts for it."""
        if self.shared is None or self.marker is None:
            return record
        prof = self.shared.slice(self.marker) if self.shared.finished else None
        notes = list(record.notes)
        artifacts = self._artifacts(prof, notes)
        if prof is None and self.shared.lost:
            notes.append(LOST)
        elif prof is None:
            notes.append("the shared profiler session gave no events for this capture")
        return replace(record, prof=prof, artifacts=artifacts, notes=tuple(notes))

    def _artifacts(self, prof: Any, notes: list[str]) -> dict[str, Any]:
        try:
            return dict(self.backend.collect_artifacts(prof, self.capture.scratch_dir))
        except Exception as err:  # listing files must not lose the measurement
            notes.append(f"could not list the backend's session files: {type(err).__name__}: {err}")
            return {}

    def unhook(self) -> None:
        """Unregister the module hooks now, from any thread: torch's module hooks are
        process-wide (unlike its profiler session), and a capture stranded on an idle or dead
        thread must not leave them firing on every module call of the process."""
        self._remove_hooks()

    def _remove_hooks(self) -> ModuleFacts | None:
        hooks, self.module_hooks = self.module_hooks, None
        if hooks is None:
            return None
        try:
            return hooks.remove()
        except Exception:  # the module names are a help; losing them must not lose the capture
            return None
