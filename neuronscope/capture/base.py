"""The small interface every backend implements, and the capture that drives torch.profiler.

A backend says which profiler activities to record, what extra arguments ``torch.profiler``
needs (Neuron's ``experimental_config`` and trace exporter), how to synchronise the device
before the capture ends, and which files the capture left behind. :class:`Capture` runs one
``torch.profiler.profile`` with them; it is the only place that starts or stops the profiler.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from neuronscope.config import Options

__all__ = ["Backend", "Capture", "force_profiler_off", "profiler_running", "quiet_native_stderr"]


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


_USDT_MARKER = b"USDT:"
#: torch's once-a-process note that a block allocated before profile_memory started was freed.
_UNKNOWN_BLOCK = b"was allocated before the profiling started"
#: Kineto's line ("ERROR: External init callback must run in same thread as registerClient")
#: when its lazy start-up runs on a thread other than the one that imported torch (a capture in
#: a worker thread, a notebook kernel's): it then starts up where it is, and captures as usual.
_OTHER_THREAD_INIT = b"External init callback must run in same thread"


def _allocated_block() -> object:
    """A small CPU tensor, or None where torch is not importable."""
    try:
        import torch

        return torch.empty(1)
    except Exception:
        return None


@contextlib.contextmanager
def quiet_native_stderr(drop: tuple[bytes, ...] = (_USDT_MARKER,)) -> Iterator[None]:
    """Drop the two ``USDT: ... profiler_start/stop`` lines that torch's CPU build prints.

    They come from C++ straight to file descriptor 2, so no Python-level redirect or
    environment variable silences them. For the short moment of the profiler's start or stop,
    fd 2 goes to a temporary file; afterwards every line except the USDT ones is written back,
    so nothing else printed in that moment is lost (only delayed).
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 2)
        except OSError:
            os.close(saved)
            yield
            return
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, ValueError, OSError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().splitlines(keepends=True) if not any(m in line for m in drop)]
            if kept:
                os.write(2, b"".join(kept))


def profiler_running() -> bool:
    """True when a torch profiler (ours, or the user's own) is running in this process."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:  # pragma: no cover - another torch
        return False


def force_profiler_off() -> None:
    """Leave torch's profiler off, whatever state an interrupted stop left it in.

    ``torch.autograd.profiler.profile.__exit__`` stops the native profiler and only then resets
    the Python-level "profiler enabled" flag: a Ctrl-C landing between the two (or before both)
    left the flag set, and every later capture in the process saw "a profiler is running" and
    skipped. Both are checked and put right here; torch names no public call for either.
    """
    try:
        import torch.autograd.profiler as autograd_profiler
        from torch._C._autograd import _profiler_enabled

        if _profiler_enabled():
            with quiet_native_stderr():
                autograd_profiler._disable_profiler()
        autograd_profiler._set_is_profiler_enabled(False)
    except Exception:  # pragma: no cover - another torch: nothing more can be done
        pass


class Capture:
    """One ``torch.profiler.profile`` session, driven by a :class:`Backend`."""

    def __init__(self, backend: Backend, scratch_dir: Path | None = None) -> None:
        self.backend = backend
        self.scratch_dir = scratch_dir
        self.prof: Any = None
        self.runner: Any = None  # what start()/stop() drive; usually the profile itself

    def start(self) -> None:
        opts = self.backend.options
        self.runner = self.backend.make_profiler(
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
        probe = _allocated_block() if opts.profile_memory else None
        with quiet_native_stderr((_USDT_MARKER, _UNKNOWN_BLOCK, _OTHER_THREAD_INIT)):
            self.runner.start()
            del probe
        self.prof = getattr(self.runner, "torch_profiler", self.runner)

    def stop(self, on_synced: Callable[[], None] | None = None) -> Any:
        """Synchronise the device, stop the profiler and return the finished profile object.
        ``on_synced`` is called once the device has finished the work, before the profiler
        stops: the end of the measured work (the stop's flush is no part of it).

        Whatever goes wrong (the device sync, the stop itself, an interrupt in either), the
        profiler is off when this returns or raises.
        """
        try:
            self.backend.synchronize()
            if on_synced is not None:
                on_synced()
        finally:
            try:
                with quiet_native_stderr():
                    self.runner.stop()
            finally:
                self.prof = getattr(self.runner, "torch_profiler", self.runner)
                if profiler_running():
                    force_profiler_off()
        return self.prof
