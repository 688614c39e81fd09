"""One outermost capture, from the start of the profiler to the exported, announced result.

The stages run in order: the capture stage (:class:`~neuronscope.capture.CaptureSession`)
gives a :class:`~neuronscope.capture.CaptureRecord`; :func:`~neuronscope.pipeline.result_from_record`
builds the result once from it; the export stage writes the run directory; :mod:`.announce`
says where it went. Regions and decorated calls reach this through :mod:`neuronscope.scope`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from neuronscope.announce import announce_result, backend_ignores, log, warn_once, warn_user
from neuronscope.capture import Backend, CaptureRecord, CaptureSession, resolve_backend, torch_private
from neuronscope.capture.observe import Observation, options_added
from neuronscope.capture.record import BUSY, REPLACED, SharedSession
from neuronscope.config import Options
from neuronscope.drive import distributed as _distributed
from neuronscope.drive.pipeline import CaptureFacts, result_from_record
from neuronscope.export import run_dir as _export
from neuronscope.export import trace_out
from neuronscope.result.types import ProfileResult

__all__ = ["Session", "shares_session"]


def shares_session(options: Options, backend: Backend, window: Any) -> bool:
    """Whether a call window's captures share one profiler session: ``one_session`` (None:
    CUDA only), a window of several captures, and a backend that writes no session files of
    its own per capture (Neuron does)."""
    wanted = options.one_session if options.one_session is not None else backend.name == "cuda"
    active = getattr(window, "active", None)
    return bool(wanted) and active is not None and active > 1 and not backend.writes_session_files



class Session:
    """The outermost capture of a region or decorated call.

    ``skipped`` says how many calls of the caller ran uncaptured so far (read before the
    export, so that the result on disk and in memory say the same); ``observation`` is what
    the caller's last warm-up call observed (capture.observe), if anything.
    """

    def __init__(
        self,
        options: Options,
        name: str,
        target: str | None,
        skipped: Callable[[], int] | None = None,
        announce: bool = True,
        observation: Observation | None = None,
        unprofiled_us: float | None = None,
        unprofiled_observed: bool = False,
        window: Any = None,
    ) -> None:
        self.options = options
        #: The call window whose captures may share one profiler session (see shares_session).
        self.window = window
        self.shared: SharedSession | None = None
        self._facts: CaptureFacts | None = None
        self.observation = observation
        self.name = name
        self.target = target
        self.skipped = skipped
        self.announce = announce
        self.unprofiled_us = unprofiled_us
        self.unprofiled_observed = unprofiled_observed
        self.backend: Backend | None = None
        self.capture: CaptureSession | None = None
        self.record: CaptureRecord | None = None
        self.result: ProfileResult | None = None
        self.run_dir: Path | None = None
        self.dist: _distributed.DistCapture | None = None
        self._run_dir_error: BaseException | None = None
        self._export_failed = False

    @property
    def prof(self) -> Any:
        """The torch profile of this capture (finished once the session has stopped; a shared
        session's: this capture's slice of it, once built)."""
        if self.shared is not None:
            return None if self.record is None else self.record.prof
        return None if self.capture is None else self.capture.prof

    def start(self) -> None:
        """Resolve the backend, warn about the environment, start the profiler."""
        # The name goes with the options: a backend may warn once per capture name (Neuron: the
        # first capture of a name without warm-up holds NEFF compilation).
        # With nothing observed before it, the capture records allocations for exact links:
        # the backend runs with that option on; self.options stay the user's, and the record
        # and the result say what was added and why.
        observed = self.observation is not None and self.observation.profiler is not None
        added = options_added(self.options, observed=observed)
        run_options = replace(self.options, **{k: v["value"] for k, v in added.items()})
        backend = self.backend = resolve_backend(run_options.with_name(self.name))
        window = self.window
        if window is not None and shares_session(self.options, backend, window):
            if window.shared is None or window.shared.finished:
                window.shared = SharedSession(backend)
            self.shared = window.shared
            backend = self.backend = self.shared.backend  # the session's, as its first capture's
        for message in backend.environment_warnings():
            warn_user(message)
        backend_ignores(backend.name, self.options)
        # Before the run directory: rank 0's start time names every rank's directory.
        self.dist = _distributed.begin(self.name, exchange_stamp=self.options.export)
        scratch = None
        if self.options.export and backend.writes_session_files:
            # The one backend that writes files while it captures (Neuron) writes them into the
            # run directory, which therefore exists from the start; the others' is made when
            # there is something to put in it, at the export.
            try:
                self.run_dir = self._new_run_dir()
                scratch = self.run_dir / "neuron"
            except Exception as err:  # OSError, or ValueError for a path the OS cannot name
                self._run_dir_error = err
        self.capture = CaptureSession(backend, scratch_dir=scratch, options_added=added, shared=self.shared)
        try:
            self.capture.start()
        except BaseException:
            if self.run_dir is not None:
                _discard_partial_run(self.run_dir)
                self.run_dir = None
            raise

    def _new_run_dir(self) -> Path:
        return _export.new_run_dir(
            self.options.output_root,
            self.name,
            rank=None if self.dist is None else self.dist.rank,
            when=None if self.dist is None else self.dist.started,  # one timestamp for all ranks
        )

    def stop(self, exc: BaseException | None) -> ProfileResult:
        """Stop the capture, build the result, export it, gather the ranks, announce it.

        The result is built once; the export and the gather each hand back a new one. Each
        rank exports before it waits for the others (a rank killed meanwhile costs rank 0 its
        per-rank table, never its measurement). An interrupt that landed while the profiler
        stopped is raised again here, after the result was built (``self.result``) and
        exported: what was measured is kept.
        """
        self.end(exc)
        return self.build()

    def end(self, exc: BaseException | None) -> None:
        """End the capture (a shared session's: its range only) and keep what the result is
        built from; :meth:`build` builds it (for a shared session, once the session ended)."""
        assert self.capture is not None and self.backend is not None
        self.record = self.capture.stop()
        if REPLACED in self.record.notes:  # a lost measurement is said where the user looks
            warn_user(f"neuronscope: {self.name}: {REPLACED}")
        elif BUSY in self.record.notes:  # once a name: a loop beside the user's would repeat it
            warn_once(("busy", self.name), f"neuronscope: {self.name}: {BUSY}")
        _distributed.mark_stopped(self.dist)  # rank 0: no rank joins this capture from now on
        self._facts = CaptureFacts(
            name=self.name,
            options=self.options,
            target=self.target,
            error=None if exc is None else f"{type(exc).__name__}: {exc}",
            skipped_calls=0 if self.skipped is None else self.skipped(),
            backend_notes=self.backend.extra_notes,
            observation=self.observation,
            unprofiled_us=self.unprofiled_us,
            unprofiled_observed=self.unprofiled_observed,
        )

    def build(self, reraise: bool = True) -> ProfileResult:
        """The result of the ended capture: built, exported, gathered, announced. With
        ``reraise``, an interrupt that landed while the profiler stopped is raised again."""
        assert self.capture is not None and self.record is not None and self._facts is not None
        record = self.record = self.capture.complete(self.record)
        facts = self._facts
        result = self.result = result_from_record(record, facts)
        save = self._save if self.options.export else None
        try:
            final = _distributed.gather(self.dist, result, hints=self.options.hints, save=save)
        except BaseException as err:  # Ctrl-C during the export: what was written stays
            self.result = replace(
                self.result,
                run_dir=None,
                notes=[*self.result.notes, f"not exported: interrupted ({type(err).__name__}); the files written so far stay in a run directory marked incomplete"],
            )
            raise
        self.result = final
        if self.announce:
            announce_result(final, self.options.print_summary)
        if record.interrupted is not None and reraise:
            raise record.interrupted
        return final

    def _save(self, result: ProfileResult) -> ProfileResult:
        """Write ``result`` and return it as written (``run_dir`` set); on rank 0 called again
        with the gathered result, which rewrites that run. A failed export keeps the result in
        memory with a note, and is not tried again for this capture."""
        if self._export_failed:
            return result
        run_dir = self.run_dir
        try:
            if self._run_dir_error is not None:
                raise self._run_dir_error
            if result.run_dir is not None:  # rank 0, the per-rank table in: rewrite in place
                return _export.save_result(result, self.options.output_root, summary=ProfileResult.table)
            writer = trace_out.make_trace_writer(
                self.prof,
                self.options.trace_format if _has_events(self.prof) else "none",
                result.event_count,
                None if self.backend is None else self.backend.saved_trace(),
            )
            if run_dir is not None:  # made at the start for the backend's own session files
                return _export.fill_run(run_dir, result, summary=ProfileResult.table, trace_writer=writer)
            return _export.export_result(
                result,
                self.options.output_root,
                summary=ProfileResult.table,
                trace_writer=writer,
                name=self.name,
                rank=None if self.dist is None else self.dist.rank,
                when=None if self.dist is None else self.dist.started,  # one timestamp for all ranks
            )
        except Exception as err:
            self._export_failed = True
            cause = f"{type(err).__name__}: {err}"
            if run_dir is not None:
                _discard_partial_run(run_dir)
                self.run_dir = None
            key = (str(self.options.output_root), type(err).__name__, getattr(err, "errno", None))
            if not warn_once(
                ("export", *key),
                f"neuronscope: could not export capture {self.name!r} to {self.options.output_root} "
                f"({cause}); the result stays in memory (run_dir=None). Later captures that fail "
                f"the same way are not warned about again; their results' notes say so",
            ):
                log.debug("capture %r not exported: %s", self.name, cause)
            return replace(result, run_dir=None, notes=[*result.notes, f"not exported: {cause}"])

    def abandon(self) -> None:
        """Undo a start that failed after the profiler started (the outer label, say)."""
        if self.capture is not None:
            self.capture.abandon()
        if self.run_dir is not None:
            _discard_partial_run(self.run_dir)
            self.run_dir = None


def _has_events(prof: Any) -> bool:
    """Whether ``prof`` is a torch profile that stopped and holds events to save (one whose
    stop was interrupted holds none)."""
    return torch_private.kineto_results(prof) is not None


def _discard_partial_run(run_dir: Path) -> None:
    """Remove a run directory whose export failed, unless the backend wrote measurements into
    it (Neuron session files): those stay, in a directory still marked incomplete."""
    backend_files = run_dir / "neuron"
    if backend_files.is_dir() and any(backend_files.iterdir()):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
