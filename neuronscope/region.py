"""``neuron_region`` and the capture engine that the decorator shares.

Nesting is counted per thread. Only the outermost region (or decorated call) starts and stops
``torch.profiler``, which is not re-entrant and is process-wide; everything inside it becomes a
labelled ``record_function`` range whose inclusive time and ops land in the outer result's
``regions``. A process-wide lock lets one capture run at a time: a region entered on another
thread while a capture runs is executed uncaptured and counted, never dropped silently.
"""

from __future__ import annotations

import functools
import inspect
import logging
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, TypeVar

from . import export as _export
from .capture import Backend, Capture, check_backend_available, resolve_backend
from .config import Options, build_options, disabled_by_env
from .errors import NeuronscopeError
from .events import table_from_profiler
from .pipeline import build_result
from .result import ProfileResult

__all__ = ["neuron_region", "NeuronscopeWarning", "run_captured", "CallWindow", "current_capture"]

log = logging.getLogger("neuronscope")
F = TypeVar("F", bound=Callable[..., Any])

#: Above this many raw events the trace is written gzip-compressed (``trace_format="auto"``):
#: Chrome traces compress about 10x, and below this size the plain file opens faster.
GZIP_TRACE_ABOVE_EVENTS = 20_000


class NeuronscopeWarning(UserWarning):
    """Something went wrong that the user should know about, but the program goes on."""


class _ThreadState(threading.local):
    depth = 0
    session: _Session | None = None


_tls = _ThreadState()
_capture_lock = threading.Lock()


def current_capture() -> _Session | None:
    """The capture running on this thread, if any."""
    return _tls.session


def _ensure_log_handler() -> None:
    """Make the one line per capture visible when the application configured no logging.

    A library normally leaves handlers to the application; but "where did my profile go" must
    reach the user, so neuronscope prints to stderr until the application sets up logging.
    """
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def _torch_profiler_running() -> bool:
    """True when a torch profiler (possibly the user's own) is already running."""
    try:
        import torch

        return bool(torch.autograd.profiler._is_profiler_enabled)
    except Exception:
        return False


def _distributed_rank() -> tuple[int | None, int | None]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return None, None


@dataclass
class _Session:
    """The outermost capture on a thread: starts the profiler, builds and exports the result."""

    options: Options
    name: str
    target: str | None
    backend: Backend | None = None
    capture: Capture | None = None
    started_ns: int = 0
    run_dir: Path | None = None
    result: ProfileResult | None = None
    labels: list[Any] = field(default_factory=list)
    export_error: BaseException | None = None

    def start(self) -> None:
        self.backend = resolve_backend(self.options)
        for message in self.backend.environment_warnings():
            warnings.warn(message, NeuronscopeWarning, stacklevel=4)
        if self.options.export:
            # Made before the capture starts: the Neuron profiler writes its session files into
            # it, and a process killed mid-capture leaves a directory marked incomplete.
            try:
                self.run_dir = _export.new_run_dir(self.options.output_root, self.name, rank=_distributed_rank()[0])
            except OSError as err:
                self.export_error = err
        scratch = None if self.run_dir is None else self.run_dir / "neuron"
        self.capture = Capture(self.backend, scratch_dir=scratch)
        self.capture.start()
        self.started_ns = time.perf_counter_ns()

    def stop(self, exc: BaseException | None) -> ProfileResult:
        assert self.capture is not None and self.backend is not None
        stop_error: BaseException | None = None
        try:
            prof = self.capture.stop()
        except Exception as err:  # the profiler failing must not break the user's program
            stop_error = err
            prof = self.capture.prof
        wall_us = (time.perf_counter_ns() - self.started_ns) / 1e3
        status = "ok" if exc is None and stop_error is None else "error"
        try:
            table = table_from_profiler(prof, record_shapes=self.options.record_shapes)
        except Exception as err:
            stop_error = stop_error or err
            from .events import EventTable

            table = EventTable()
            status = "error"
        result = build_result(
            table,
            name=self.name,
            backend=self.backend.name,
            status=status,
            wall_time_us=wall_us,
            profiler=prof,
            hints=self.options.hints,
        )
        result.target = self.target
        result.options = self.options.to_dict()
        result.device_name = self.backend.device_name()
        result.rank, result.world_size = _distributed_rank()
        result.notes.extend(self.backend.extra_notes(table.has_device))
        try:
            result.artifacts.update(self.backend.collect_artifacts(prof, self.capture.scratch_dir))
        except Exception as err:  # listing files must not lose the measurement
            result.notes.append(f"could not list the backend's session files: {type(err).__name__}: {err}")
        if exc is not None:
            result.error = f"{type(exc).__name__}: {exc}"
        elif stop_error is not None:
            result.error = f"profiler failed: {type(stop_error).__name__}: {stop_error}"
        self.result = result
        if self.options.export:
            self._export(result, prof)
        return result

    def _trace_writer(self, prof: Any, event_count: int) -> Callable[[Path], Path | None]:
        fmt = self.options.trace_format
        if fmt == "auto":
            fmt = "gz" if event_count > GZIP_TRACE_ABOVE_EVENTS else "json"

        def write(run_dir: Path) -> Path | None:
            if fmt == "none":
                return None
            assert self.backend is not None
            plain = run_dir / "trace.json"
            saved = self.backend.saved_trace()
            if saved is not None:  # the profiler saved it already; a second save raises
                if fmt == "gz":
                    _export.gzip_file(saved, run_dir / "trace.json.gz")
                    return run_dir / "trace.json.gz"
                _export.atomic_write_with(plain, lambda tmp: shutil.copyfile(saved, tmp))
                return plain
            if fmt == "gz":
                tmp = run_dir / ".trace.json.raw"
                try:
                    prof.export_chrome_trace(str(tmp))
                    _export.gzip_file(tmp, run_dir / "trace.json.gz")
                finally:
                    tmp.unlink(missing_ok=True)
                return run_dir / "trace.json.gz"
            _export.atomic_write_with(plain, lambda tmp: prof.export_chrome_trace(str(tmp)))
            return plain

        return write

    def _export(self, result: ProfileResult, prof: Any) -> None:
        from .report import render_result

        run_dir = self.run_dir
        try:
            if self.export_error is not None:
                raise self.export_error
            if run_dir is None:
                run_dir = self.run_dir = _export.new_run_dir(self.options.output_root, self.name, rank=result.rank)
            _export.write_run(
                run_dir,
                result,
                render_result(result),
                trace_writer=self._trace_writer(prof, result.event_count),
            )
        except Exception as err:
            result.run_dir = None
            self.run_dir = None
            warnings.warn(
                f"neuronscope: could not export capture {self.name!r} to {self.options.output_root} "
                f"({type(err).__name__}: {err}); the result stays in memory (run_dir=None)",
                NeuronscopeWarning,
                stacklevel=4,
            )
            if run_dir is not None:
                _discard_partial_run(run_dir)


def _discard_partial_run(run_dir: Path) -> None:
    """Remove a run directory whose export failed, unless the backend wrote measurements into
    it (Neuron session files): those stay, in a directory still marked incomplete."""
    backend_files = run_dir / "neuron"
    if backend_files.is_dir() and any(backend_files.iterdir()):
        return
    shutil.rmtree(run_dir, ignore_errors=True)


def _announce(result: ProfileResult, options: Options) -> None:
    if result.rank not in (None, 0) and not options.print_summary:
        return
    _ensure_log_handler()
    if result.run_dir:
        where = f"-> {result.run_dir}  (neuronscope show {result.run_dir})"
    else:
        where = "(kept in memory, not exported)"
    top = result.top_op
    top_text = f", top op {top.name}" if top is not None else ""
    log.info(
        "neuronscope: %s %s [%s] %.3f ms%s %s",
        result.name,
        result.status,
        result.backend,
        result.wall_time_us / 1e3,
        top_text,
        where,
    )
    if options.print_summary:
        print(result.table(), file=sys.stderr)


class _Label:
    """A labelled range inside the running capture (``record_function``)."""

    __slots__ = ("rf",)

    def __init__(self, name: str) -> None:
        import torch.autograd.profiler as autograd_profiler

        self.rf = autograd_profiler.record_function(name)
        self.rf.__enter__()

    def close(self) -> None:
        self.rf.__exit__(None, None, None)


@dataclass
class _Entry:
    """What one ``__enter__`` did, so that ``__exit__`` undoes exactly that."""

    kind: str  # "outer", "inner", "skip" or "off"
    session: _Session | None = None
    label: _Label | None = None


def enter(options: Options, name: str, target: str | None) -> _Entry:
    """Start a capture, or a labelled range inside the one running on this thread."""
    if _tls.depth > 0:
        _tls.depth += 1
        try:
            return _Entry("inner", session=_tls.session, label=_Label(name))
        except BaseException:
            _tls.depth -= 1
            raise
    if _torch_profiler_running() or not _capture_lock.acquire(blocking=False):
        # Another capture (on another thread, or the user's own torch.profiler) is running:
        # torch's profiler is process-wide and not re-entrant, so this block runs uncaptured.
        return _Entry("skip")
    session = _Session(options=options, name=name, target=target)
    try:
        _tls.depth = 1
        _tls.session = session
        session.start()
        session.labels.append(_Label(name))
    except BaseException:
        _tls.depth = 0
        _tls.session = None
        _capture_lock.release()
        raise
    return _Entry("outer", session=session)


def leave(entry: _Entry, exc: BaseException | None) -> ProfileResult | None:
    """Undo ``enter``; for the outermost entry, stop the capture and return its result.

    Always restores the nesting count, whatever happened inside.
    """
    if entry.kind == "inner":
        _tls.depth -= 1
        if entry.label is not None:
            entry.label.close()
        return None
    if entry.kind != "outer":
        return None
    session = entry.session
    assert session is not None
    try:
        for label in reversed(session.labels):
            try:
                label.close()
            except Exception:
                pass
        result = session.stop(exc)
    finally:
        _tls.depth = 0
        _tls.session = None
        _capture_lock.release()
    _announce(result, session.options)
    return result


class CallWindow:
    """Counts calls: ``warmup`` unprofiled, then ``active`` captured, then closed for good.

    ``active=None`` never closes. Thread-safe: the count is taken under a lock while the
    window is open; once closed, callers read one attribute and take the fast path.
    """

    def __init__(self, warmup: int, active: int | None) -> None:
        self.warmup = warmup
        self.active = active
        self.calls = 0
        self.closed = False
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


def run_captured(
    options: Options,
    name: str,
    target: str | None,
    on_result: Callable[[ProfileResult], None],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    on_skip: Callable[[], None] | None = None,
) -> Any:
    """Run ``fn(*args, **kwargs)`` inside a capture (or a label, when nested).

    The user's exception passes through unchanged; the capture up to it is still exported,
    with ``status="error"``.
    """
    entry = enter(options, name, target)
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        result = leave(entry, exc)
        if result is not None:
            on_result(result)
        raise
    result = leave(entry, None)
    if result is not None:
        on_result(result)
    elif entry.kind == "skip":
        (on_skip or functools.partial(on_skipped, name))()
    return value


_skip_warned: set[str] = set()


def on_skipped(name: str) -> None:
    """Log once per name that a call ran uncaptured because another capture was running."""
    if name in _skip_warned:
        return
    _skip_warned.add(name)
    _ensure_log_handler()
    log.warning(
        "neuronscope: %s ran uncaptured: another capture (or the user's own torch.profiler) "
        "was running; torch's profiler runs one capture per process at a time",
        name,
    )


def _caller_name(depth: int = 2) -> str:
    try:
        frame = inspect.stack(context=0)[depth]
        return f"{Path(frame.filename).stem}:{frame.lineno}"
    except Exception:
        return "region"


class neuron_region:  # noqa: N801 - a context manager used like a function, as in the contract
    """Profile a block: ``with neuron_region("attn") as r: ...`` then ``r.result``.

    Also decorates: ``@neuron_region("step")`` captures each call of the function. The
    outermost region runs a ``torch.profiler`` capture; regions (and decorated calls) inside it
    become labelled ranges whose time and ops appear in the outer result's ``regions``, and
    their ``r.result`` is that outer result once it has ended.

    Options are those of :class:`~neuronscope.config.Options` (``backend``, ``output_dir``,
    ``export``, ``record_shapes``, ``with_stack``, ``enabled``, ``modes``, ``cores``, ...).
    By default every entry is captured, since the user placed the block by hand; in a loop, pass
    ``warmup=`` / ``active=`` and the window is counted per region name, so the first
    ``warmup`` passes run uncaptured and only ``active`` passes are captured.
    """

    _windows: dict[str, CallWindow] = {}
    _windows_lock = threading.Lock()

    def __new__(cls, name: str | Callable[..., Any] | None = None, **options: Any) -> Any:
        if callable(name):  # bare @neuron_region: decorate at once
            func = name
            region = cls(getattr(func, "__name__", None), **options)
            return _region_decorator(region, func)
        return super().__new__(cls)

    def __init__(self, name: str | Callable[..., Any] | None = None, **options: Any) -> None:
        self.options = build_options(None, name=name, **options)
        if self.options.backend not in ("auto", "cpu"):
            check_backend_available(self.options.backend)
        self.name = self.options.name or _caller_name()
        self._explicit_window = "warmup" in options or "active" in options
        self._local = threading.local()  # this object's open entries, per thread
        self._last_session: _Session | None = None

    @property
    def enabled(self) -> bool:
        return self.options.enabled and not disabled_by_env()

    @property
    def result(self) -> ProfileResult | None:
        """The result of the capture that holds this region, once that capture has ended."""
        session = self._last_session
        return None if session is None else session.result

    def _entries(self) -> list[_Entry]:
        entries: list[_Entry] | None = getattr(self._local, "entries", None)
        if entries is None:
            entries = self._local.entries = []
        return entries

    def _window(self) -> CallWindow | None:
        if not self._explicit_window:
            return None
        with self._windows_lock:
            window = self._windows.get(self.name)
            if window is None:
                window = self._windows[self.name] = CallWindow(self.options.warmup, self.options.active)
            return window

    def __enter__(self) -> neuron_region:
        if not self.enabled:
            entry = _Entry("off")
        elif _tls.depth == 0 and (w := self._window()) is not None and not w.next_call_captured():
            entry = _Entry("off")
        else:
            entry = enter(self.options, self.name, None)
            if entry.kind == "skip":
                on_skipped(self.name)
        self._entries().append(entry)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        entries = self._entries()
        entry = entries.pop() if entries else _Entry("off")
        leave(entry, exc)
        if entry.session is not None:
            self._last_session = entry.session
        return None  # never swallow the user's exception

    def __call__(self, func: F) -> F:
        """Decorate ``func``: each call runs inside this region (see the class docstring)."""
        if not callable(func):
            raise TypeError("neuron_region(...) decorates a callable; use it in a 'with' statement or as @decorator")
        return _region_decorator(self, func)


def _region_decorator(region: neuron_region, func: F) -> F:
    from .decorator import wrap_callable

    name = region.options.name or getattr(func, "__qualname__", region.name)
    return wrap_callable(func, region.options.with_name(name))


def ensure_no_capture_running() -> bool:
    """True when no capture and no region is active (used by tests)."""
    return _tls.depth == 0 and _tls.session is None and not _capture_lock.locked()


__all__ += ["ensure_no_capture_running", "enter", "leave", "NeuronscopeError"]
