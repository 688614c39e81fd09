"""``neuron_region`` and the capture engine that the decorator shares.

Nesting is counted per thread. Only the outermost region (or decorated call) starts and stops
``torch.profiler``, which is not re-entrant and is process-wide; everything inside it becomes a
labelled ``record_function`` range whose inclusive time and ops land in the outer result's
``regions``. A process-wide lock lets one capture run at a time: a region entered on another
thread while a capture runs is executed uncaptured and counted, never dropped silently.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from . import distributed as _distributed
from . import export as _export
from .analysis import compile as _compile
from .capture import Backend, Capture, check_backend_available, resolve_backend
from .capture.observe import begin_warmup, capture_options, end_warmup, observation_for
from .config import Options, build_options, disabled_by_env, options_key, remember
from .errors import NeuronscopeError
from .events import table_from_profiler
from .pipeline import build_result
from .result import ProfileResult

__all__ = ["CallWindow", "NeuronscopeWarning", "current_capture", "neuron_region", "run_captured"]

log = logging.getLogger("neuronscope")
if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; torch requires typing_extensions

F = TypeVar("F", bound=Callable[..., Any])

#: Results a decorated callable or a region object keeps in ``.results`` (the newest): with
#: ``active=None`` on a hot function the list would otherwise grow for the life of the
#: process. Older ones are dropped; their run directories stay on disk.
MAX_KEPT_RESULTS = 100


def keep_result(results: list[ProfileResult], result: ProfileResult) -> None:
    """Append ``result``, dropping the oldest beyond :data:`MAX_KEPT_RESULTS`."""
    results.append(result)
    del results[:-MAX_KEPT_RESULTS]


#: Above this many raw events the trace is written gzip-compressed (``trace_format="auto"``):
#: Chrome traces compress about 10x, and below this size the plain file opens faster.
GZIP_TRACE_ABOVE_EVENTS = 20_000


class NeuronscopeWarning(UserWarning):
    """Something went wrong that the user should know about, but the program goes on."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn_user(message: str) -> None:
    """Warn with the user's own line as the place: the first frame outside neuronscope (a
    capture ends many calls deep, and not as deep from a decorator as from a region)."""
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    torch_dir = os.path.dirname(torch_file) + os.sep if torch_file else None
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and _between_capture_and_user(frame.f_code.co_filename, torch_dir):
        frame = frame.f_back
        level += 1
    warnings.warn(message, NeuronscopeWarning, stacklevel=level)


def _between_capture_and_user(path: str, torch_dir: str | None) -> bool:
    """A frame of neuronscope, of torch (``Module.__call__`` around a decorated ``forward``) or
    of contextlib (a region entered by a ``@contextmanager`` or an ExitStack)."""
    return path.startswith(_PACKAGE_DIR + os.sep) or path == contextlib.__file__ or (
        torch_dir is not None and path.startswith(torch_dir)
    )


class _ThreadState(threading.local):
    depth = 0
    session: _Session | None = None

    def __init__(self) -> None:
        #: The regions and decorated calls open on this thread that declined to capture this
        #: pass (warm-up, or past their window), innermost last. Until they exit, what runs on
        #: the thread runs unprofiled too: an inner region or decorated call starts no capture
        #: of its own. (A capture holds what runs on its thread until it exits the same way: a
        #: generator paused inside a region, or an asyncio task awaiting inside one, holds the
        #: code that runs meanwhile.)
        self.quiet: list[object] = []


_tls = _ThreadState()
_capture_lock = threading.Lock()
#: Guards the regions' skip counts (taken only when a capture had to be skipped).
_skip_lock = threading.Lock()

# os.environ.get costs about 1 us when the variable is unset (os.environ raises and catches a
# KeyError), and a region checks NEURONSCOPE_DISABLE on every entry: look in os.environ's own
# dict first (kept in step by os.environ's setters), and parse only when the variable is there.
_ENV_DATA: Any = getattr(os.environ, "_data", None)
try:
    _ENV_KEY: Any = os.environ.encodekey("NEURONSCOPE_DISABLE")
except Exception:  # pragma: no cover - another Python's os.environ
    _ENV_DATA = None


_env_seen: list[Any] = [None, False]  # the raw value last parsed, and what it said


def _disabled_now() -> bool:
    """``disabled_by_env()`` in about 0.1 us: parsed again only when the value changes."""
    if _ENV_DATA is None:  # pragma: no cover - another Python's os.environ
        return disabled_by_env()
    raw = _ENV_DATA.get(_ENV_KEY)
    if raw is None:
        return False
    seen = _env_seen
    if raw is not seen[0]:
        seen[1] = disabled_by_env()
        seen[0] = raw
    return bool(seen[1])


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
    dist: _distributed.DistCapture | None = None  # the multi-process part (None: one process)
    compile_before: dict[str, Any] = field(default_factory=dict)  # Dynamo's counters at start
    # How many calls of the caller ran uncaptured so far; read before the export, so that the
    # result on disk and in memory say the same.
    skipped: Callable[[], int] | None = None

    def start(self) -> None:
        # The name goes with the options: a backend may warn once per capture name (Neuron: the
        # first capture of a name without warm-up holds NEFF compilation).
        self.options = capture_options(self.options, self.name)  # exact links when nothing was observed
        self.backend = resolve_backend(self.options.with_name(self.name))
        for message in self.backend.environment_warnings():
            warn_user(message)
        # Before the run directory: rank 0's start time names every rank's directory.
        self.dist = _distributed.begin(self.name, exchange_stamp=self.options.export)
        if self.options.export:
            # Made before the capture starts: the Neuron profiler writes its session files into
            # it, and a process killed mid-capture leaves a directory marked incomplete.
            try:
                self.run_dir = _export.new_run_dir(
                    self.options.output_root,
                    self.name,
                    rank=None if self.dist is None else self.dist.rank,
                    when=None if self.dist is None else self.dist.started,  # one timestamp for all ranks
                )
            except Exception as err:  # OSError, or ValueError for a path the OS cannot name
                self.export_error = err
        scratch = None if self.run_dir is None else self.run_dir / "neuron"
        self.capture = Capture(self.backend, scratch_dir=scratch)
        self.compile_before = _compile.snapshot()
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
        compile_facts = _compile.facts(self.compile_before)
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
            extra={"compile": compile_facts, "observed": observation_for(self.name)},
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
        if self.skipped is not None:
            result.skipped_calls = self.skipped()
        # Every rank calls this: rank 0 gathers the per-rank table (with a timeout).
        _distributed.finish(self.dist, result, self.run_dir, hints=self.options.hints)
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
                    _export.save_chrome_trace(prof, tmp)
                    _export.gzip_file(tmp, run_dir / "trace.json.gz")
                finally:
                    tmp.unlink(missing_ok=True)
                return run_dir / "trace.json.gz"
            _export.atomic_write_with(plain, lambda tmp: _export.save_chrome_trace(prof, tmp))
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
            cause = f"{type(err).__name__}: {err}"
            result.notes.append(f"not exported: {cause}")
            if _first_export_failure(self.options.output_root, err):
                warn_user(
                    f"neuronscope: could not export capture {self.name!r} to {self.options.output_root} "
                    f"({cause}); the result stays in memory (run_dir=None). Later captures that fail "
                    f"the same way are not warned about again; their results' notes say so"
                )
            else:
                log.debug("neuronscope: capture %r not exported: %s", self.name, cause)
            if run_dir is not None:
                _discard_partial_run(run_dir)
        except BaseException as err:  # Ctrl-C during the export: the result stays in memory
            result.run_dir = None
            self.run_dir = None
            result.notes.append(f"not exported: interrupted ({type(err).__name__})")
            if run_dir is not None:
                _discard_partial_run(run_dir)
            raise


_export_failures_seen: set[tuple[str, str, int | None]] = set()


def _first_export_failure(root: Path, err: BaseException) -> bool:
    """True the first time exports to ``root`` fail this way (same error type and errno).

    A region in every step of a training loop, with a full disk, would otherwise warn at every
    step: the user is told once, and each result's ``notes`` keep the cause.
    """
    key = (str(root), type(err).__name__, getattr(err, "errno", None))
    if key in _export_failures_seen:
        return False
    _export_failures_seen.add(key)
    return True


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
    view = (result.artifacts.get("neuron") or {}).get("view_command")
    if view:  # the Neuron session files open in Neuron Explorer, not in neuronscope
        where += f"; device trace: {view}"
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

    kind: str  # "outer", "inner", "foreign" (a label in the user's own profiler), "skip" or "off"
    session: _Session | None = None
    label: _Label | None = None


_OFF = _Entry("off")  # shared by every uncaptured entry: it holds nothing
#: Captures this process completed.
captures_done = 0


def unmark_quiet(quiet: list[object], owner: object) -> None:
    """Take ``owner``'s innermost mark off a thread's list (the last one, unless asyncio tasks
    or generators on that thread interleaved their blocks)."""
    if quiet and quiet[-1] is owner:
        quiet.pop()
        return
    for i in range(len(quiet) - 1, -1, -1):
        if quiet[i] is owner:
            del quiet[i]
            return


def enter(options: Options, name: str, target: str | None) -> _Entry:
    """Start a capture, or a labelled range inside the one running on this thread."""
    if _tls.depth > 0:
        _tls.depth += 1
        try:
            return _Entry("inner", session=_tls.session, label=_Label(name))
        except BaseException:
            _tls.depth -= 1
            raise
    if _torch_profiler_running() and not _capture_lock.locked():
        # The user's own torch.profiler is running: torch's profiler is process-wide and not
        # re-entrant, so no capture of ours, but the block shows in theirs as a labelled range
        # (``from_profiler(prof).regions`` has it).
        return _Entry("foreign", label=_Label(name))
    if _torch_profiler_running() or not _capture_lock.acquire(blocking=False):
        # Another capture of ours (on another thread) is running: this block runs uncaptured.
        return _Entry("skip")
    session = _Session(options=options, name=name, target=target)
    try:
        _tls.depth = 1
        _tls.session = session
        session.start()
        session.labels.append(_Label(name))
    except BaseException as err:
        _tls.depth = 0
        _tls.session = None
        try:
            _abandon_capture(session)
        finally:
            _capture_lock.release()
        if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: the user's own
            raise
        # The profiler failing to start must not stop the user's program.
        warn_user(
            f"neuronscope: could not start capture {name!r} ({type(err).__name__}: {err}); "
            f"this call runs unprofiled"
        )
        return _Entry("off")
    return _Entry("outer", session=session)


def _abandon_capture(session: _Session) -> None:
    """Undo a start that failed half-way. torch's profiler is process-wide: one left running
    would make every later capture in the process skip."""
    for label in reversed(session.labels):
        try:
            label.close()
        except Exception:
            pass
    capture = session.capture
    if capture is not None and capture.prof is not None and _torch_profiler_running():
        try:
            capture.stop()
        except Exception:
            pass
    if session.run_dir is not None:
        _discard_partial_run(session.run_dir)


def leave(entry: _Entry, exc: BaseException | None) -> ProfileResult | None:
    """Undo ``enter``; for the outermost entry, stop the capture and return its result.

    Always restores the nesting count, whatever happened inside.
    """
    if entry.kind == "inner":
        if entry.session is _tls.session and _tls.depth > 1:
            # Otherwise the capture holding this range ended first (asyncio tasks interleave
            # on one thread) and the count now belongs to another capture, or to none.
            _tls.depth -= 1
        if entry.label is not None:
            entry.label.close()
        return None
    if entry.kind == "foreign" and entry.label is not None:
        entry.label.close()
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
    global captures_done
    captures_done += 1
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
        #: What the window's captures gave, oldest first (a region name's, shared by the
        #: region objects of that name: one written inline in a loop is a new object a pass).
        self.results: list[ProfileResult] = []
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

    def give_back(self) -> None:
        """A call counted as captured could not be (another capture held the profiler): its
        slot goes back, so that a later call is captured in its place and ``active`` calls
        are captured in the end."""
        with self._lock:
            if self.active is not None and self.calls > self.warmup:
                self.calls -= 1
                self.closed = self.calls >= self.warmup + self.active


def leave_and_deliver(
    entry: _Entry, exc: BaseException | None, on_result: Callable[[ProfileResult], None]
) -> ProfileResult | None:
    """``leave``, then hand the result to ``on_result``. An interrupt (Ctrl-C) that lands
    during the export still goes on, but the result measured before it is handed over first."""
    try:
        result = leave(entry, exc)
    except BaseException:
        if entry.session is not None and entry.session.result is not None:
            on_result(entry.session.result)
        raise
    if result is not None:
        on_result(result)
    return result


def run_captured(
    options: Options,
    name: str,
    target: str | None,
    on_result: Callable[[ProfileResult], None],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    on_skip: Callable[[], None] | None = None,
    skipped: Callable[[], int] | None = None,
) -> Any:
    """Run ``fn(*args, **kwargs)`` inside a capture (or a label, when nested).

    The user's exception passes through unchanged; the capture up to it is still exported,
    with ``status="error"``. ``skipped`` says how many calls of the caller ran uncaptured so
    far; the result records it as ``skipped_calls``.
    """
    entry = enter(options, name, target)
    if entry.kind == "outer" and entry.session is not None:
        entry.session.skipped = skipped
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        leave_and_deliver(entry, exc, on_result)
        raise
    result = leave_and_deliver(entry, None, on_result)
    if result is None and entry.kind in ("skip", "foreign"):
        (on_skip or functools.partial(on_skipped, name))()
    return value


_skip_warned: set[str] = set()


def on_skipped(name: str, count: int | None = None) -> None:
    """Log that a call ran uncaptured because another capture was running: the first time per
    name, then (when the caller counts) at 10, 100, 1000... calls, with the count."""
    if count is None or count <= 1:
        if name in _skip_warned:
            return
        _skip_warned.add(name)
    elif str(count).rstrip("0") != "1":  # not 10, 100, 1000...
        return
    _ensure_log_handler()
    log.warning(
        "neuronscope: %s ran uncaptured%s: another capture (or the user's own torch.profiler, "
        "where it shows as a labelled range) was running; torch's profiler runs one capture "
        "per process at a time",
        name,
        "" if count is None else f" ({count} call(s) so far; see .skipped_calls)",
    )


def _caller_name() -> str:
    """``"file:line"`` of the code that built the region: the first frame outside this module."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return "region"
    return f"{Path(frame.f_code.co_filename).stem}:{frame.f_lineno}"


class neuron_region:
    """Profile a block: ``with neuron_region("attn") as r: ...`` then ``r.result``.

    Also decorates: ``@neuron_region("step")`` captures each call of the function. The
    outermost region runs a ``torch.profiler`` capture; regions (and decorated calls) inside it
    become labelled ranges whose time and ops appear in the outer result's ``regions``, and
    their ``r.result`` is that outer result once it has ended.

    Options are those of :class:`~neuronscope.config.Options` (``backend``, ``output_dir``,
    ``export``, ``record_shapes``, ``with_stack``, ``enabled``, ``modes``, ``cores``, ...).
    By default every entry is captured, since the user placed the block by hand; in a loop, pass
    ``warmup=`` / ``active=`` and the window is counted per region name, so the first
    ``warmup`` passes run uncaptured and only ``active`` passes are captured (``results``
    then holds the name's captures). A pass that a region or decorated call skips runs its
    whole block unprofiled: a region inside it captures nothing of its own then.
    """

    _windows: ClassVar[dict[str, CallWindow]] = {}  # per region name, shared by all objects
    _windows_lock = threading.Lock()
    # This object's entries that declined to capture, innermost last: the quiet list
    # (_ThreadState.quiet) that holds each one's mark, the frame that entered it and its line.
    # An object's own list from its first such entry (a region built inline each pass in a
    # disabled loop makes none).
    _quiet_marks: list[tuple[list[object], FrameType, int]] | tuple[()] = ()
    # Defaults that a region built and entered while disabled never changes, kept on the
    # class: such a region costs one object and two attributes (see benchmarks/README.md).
    _last_session: _Session | None = None
    #: Entries that ran uncaptured because another capture held the profiler.
    skipped_calls = 0
    # This object's open entries, per thread; a thread's list goes when it empties, so an
    # object with nothing open (the common case) enters and leaves uncaptured in two checks.
    # Its own dict from its first such entry.
    _open: dict[int, list[_Entry]] = {}  # noqa: RUF012 - never written through: see _entries

    def __new__(cls, name: str | Callable[..., Any] | None = None, **options: Any) -> Any:
        if callable(name):  # bare @neuron_region: decorate at once
            func = name
            region = cls(getattr(func, "__name__", None), **options)
            return _region_decorator(region, func)
        if cls is neuron_region and options.get("enabled") is False:
            return _disabled_region(name, options)
        return super().__new__(cls)

    def __init__(self, name: str | Callable[..., Any] | None = None, **options: Any) -> None:
        # A region written inline in a loop is built on every pass: what its options give is
        # worked out once per name and options (a name from the caller's frame is not kept).
        key = options_key(options) if isinstance(name, str) else None
        setup = None if key is None else _region_setups.get((name, key))
        if setup is None:
            opts = build_options(None, name=name, **options)
            if opts.backend not in ("auto", "cpu"):
                check_backend_available(opts.backend)
            setup = (opts, opts.name or _caller_name(), "warmup" in options or "active" in options)
            # A device backend is checked each time: whether it is there can change (tests).
            if key is not None and opts.backend in ("auto", "cpu"):
                remember(_region_setups, (name, key), setup)
        self.options, self.name, self._explicit_window = setup
        #: The captures this object ran (the outermost entries), oldest first; the last
        #: MAX_KEPT_RESULTS are kept, so a region reused in a long loop stays bounded. With
        #: ``warmup=`` / ``active=``, those of every region of this name (the window's).
        self.results: list[ProfileResult] = []

    @property
    def enabled(self) -> bool:
        return self.options.enabled and not _disabled_now()

    @property
    def result(self) -> ProfileResult | None:
        """The result of the capture that holds this region, once that capture has ended."""
        session = self._last_session
        return None if session is None else session.result

    def _entries(self) -> list[_Entry]:
        thread = threading.get_ident()
        opened = self.__dict__.get("_open")
        if opened is None:  # still the class's empty dict: never written through
            opened = self.__dict__.setdefault("_open", {})
        entries = opened.get(thread)
        if entries is None:
            entries = opened.setdefault(thread, [])
        return entries

    def _window(self) -> CallWindow | None:
        if not self._explicit_window:
            return None
        window = self.__dict__.get("_win")  # this object's, while it is still the registered one
        if window is not None and self._windows.get(self.name) is window:
            return window
        with self._windows_lock:
            window = self._windows.get(self.name)
            if window is None:
                window = self._windows[self.name] = CallWindow(self.options.warmup, self.options.active)
            self._win = window
            if not self.results:  # results go with the window, so the name's last object has them all
                self.results = window.results
            return window

    def __enter__(self) -> Self:
        if not self.options.enabled:  # fixed for this object: __exit__ knows it too
            return self
        tls = _tls
        if _disabled_now():
            entry = _OFF
        elif tls.depth:
            entry = self._enter_capture(None)  # a labelled range of the running capture
        elif tls.quiet and (tls.quiet[-1] is not self or self._entered_up_the_stack()):
            # Inside a region or decorated call that runs unprofiled this pass. Marked again
            # only when that is this very object (recursion), whose exit takes one mark off.
            if tls.quiet[-1] is self:
                return self._mark_quiet(tls.quiet)
            entry = _OFF
        else:
            if tls.quiet:  # this object's own mark, from an entry whose exit never ran
                self._drop_abandoned_mark(tls.quiet)
            w = self.__dict__.get("_win")
            if w is not None and w.closed and self._windows.get(self.name) is w:
                # Past its window, the common case in a loop: no lock, no lookup. This pass
                # and everything inside it run unprofiled.
                return self._mark_quiet(tls.quiet)
            w = self._window()
            if w is not None and (w.closed or not w.next_call_captured()):
                begin_warmup(self.name, self.options.hints and not w.closed and w.calls == w.warmup)
                return self._mark_quiet(tls.quiet)  # warm-up
            entry = self._enter_capture(w)
        if entry is _OFF and not self._open:
            return self  # nothing open on this object: __exit__ finds nothing and does nothing
        self._entries().append(entry)
        return self

    def _mark_quiet(self, quiet: list[object]) -> Self:
        quiet.append(self)
        # The list goes with the entry, so that an exit on another thread (a generator
        # finished there) still takes the mark off the thread that holds it; the frame and
        # line tell a recursive entry from one whose exit never ran.
        caller = sys._getframe(2)
        marks = self._quiet_marks
        if not isinstance(marks, list):
            marks = self._quiet_marks = []
        marks.append((quiet, caller, caller.f_lineno))
        return self

    def _newest_mark_of(self, quiet: list[object]) -> int:
        """Index in ``_quiet_marks`` of this object's newest mark held by ``quiet`` (one
        thread's list), or -1."""
        marks = self._quiet_marks
        for i in range(len(marks) - 1, -1, -1):
            if marks[i][0] is quiet:
                return i
        return -1

    def _entered_up_the_stack(self) -> bool:
        """Is this object's newest unprofiled entry on this thread still running further up the
        stack (the object entered again by recursion)? Not when the same frame enters it again
        from the same line: a loop whose last pass skipped the exit."""
        i = self._newest_mark_of(_tls.quiet)
        if i < 0:
            return False
        _, entered, line = self._quiet_marks[i]
        caller: FrameType | None = sys._getframe(2)
        if caller is entered:
            return caller.f_lineno != line
        frame = caller
        while frame is not None:
            if frame is entered:
                return True
            frame = frame.f_back
        return False

    def _drop_abandoned_mark(self, quiet: list[object]) -> None:
        """The object is entered again while its last unprofiled entry on this thread never
        exited (hooks: an exception skipped the ``__exit__``). Without this its mark would keep
        the thread unprofiled for good, and its window would never move on."""
        i = self._newest_mark_of(quiet)
        marks = self._quiet_marks
        if i >= 0 and isinstance(marks, list):
            del marks[i]
        unmark_quiet(quiet, self)
        _ensure_log_handler()
        log.warning(
            "neuronscope: region %r entered again before its last entry exited (was __exit__ "
            "skipped, by an exception between hooks?); that entry is closed now",
            self.name,
        )

    def _enter_capture(self, window: CallWindow | None) -> _Entry:
        """Start the capture, or a labelled range in the one running; count a skipped call."""
        entry = enter(self.options, self.name, None)
        if entry.kind == "outer" and entry.session is not None:
            entry.session.skipped = lambda: self.skipped_calls
        elif entry.kind in ("skip", "foreign"):
            with _skip_lock:
                self.skipped_calls += 1
                count = self.skipped_calls
            on_skipped(self.name, count)
            if window is not None:
                window.give_back()
        return entry

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.options.enabled:
            return
        if not self._open or threading.get_ident() not in self._open:
            marks = self._quiet_marks
            if marks and isinstance(marks, list):  # a pass that declined to capture: this thread's newest, if any
                home = marks.pop(self._newest_mark_of(_tls.quiet))[0]
                unmark_quiet(home, self)
                end_warmup(self.name)
            return
        entries = self._entries()
        entry = entries.pop() if entries else _OFF
        if not entries:  # so that the next uncaptured entry takes the fast path again
            self._open.pop(threading.get_ident(), None)
        if entry is _OFF:  # uncaptured: nothing to undo (the fast path when disabled)
            return
        try:
            result = leave(entry, exc)
        finally:  # an interrupt during the export keeps r.result
            if entry.session is not None:
                self._last_session = entry.session
        if result is not None:
            keep_result(self.results, result)
        return  # never swallow the user's exception

    def __call__(self, func: F) -> F:
        """Decorate ``func``: each call runs inside this region (see the class docstring)."""
        if not callable(func):
            from .decorator import NotWrappableError

            raise NotWrappableError(
                f"neuron_region(...) decorates a callable, not {type(func).__name__}; "
                "use it in a 'with' statement, or as @neuron_region(...) above a function"
            )
        return _region_decorator(self, func)


class _DisabledRegion(neuron_region):
    """What ``neuron_region(..., enabled=False)`` is: it holds no state, so one object serves
    every ``with`` of the same name and options, and a region written inline in a loop costs a
    dictionary lookup (a new object cost 1.5 us a pass, over the 1 us a disabled call may
    cost). Not for ``NEURONSCOPE_DISABLE``: that is read at each entry, and a region built
    while it is set captures once it is unset."""

    # Built once, by _disabled_region; Python calls __init__ again at each neuron_region(...)
    # that returns it, and object's own accepts (and ignores) the arguments in C: no frame.
    __init__ = object.__init__

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None

    @property
    def result(self) -> ProfileResult | None:
        return None


_disabled_regions: dict[Any, _DisabledRegion] = {}
_region_setups: dict[tuple[Any, ...], tuple[Options, str, bool]] = {}


def _disabled_region(name: str | None, options: dict[str, Any]) -> _DisabledRegion:
    key: Any = None  # a name taken from the caller's frame differs per call site: not kept
    if isinstance(name, str):
        if len(options) == 1:  # just enabled=False, the common spelling: the name is the key
            key = name
        elif (opts_key := options_key(options)) is not None:
            key = (name, opts_key)
    region = None if key is None else _disabled_regions.get(key)
    if region is None:
        region = object.__new__(_DisabledRegion)
        neuron_region.__init__(region, name, **options)  # validates, names it
        if key is not None:
            remember(_disabled_regions, key, region)
    return region


def _region_decorator(region: neuron_region, func: F) -> F:
    from .decorator import wrap_callable

    name = region.options.name or getattr(func, "__qualname__", None) or region.name
    return wrap_callable(func, region.options.with_name(name))


def ensure_no_capture_running() -> bool:
    """True when no capture and no region is active (used by tests)."""
    return _tls.depth == 0 and _tls.session is None and not _tls.quiet and not _capture_lock.locked()


__all__ += ["NeuronscopeError", "ensure_no_capture_running", "enter", "leave"]
