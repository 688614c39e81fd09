"""``neuron_region``: profile a block (``with``), a function (as a decorator), or a span between
two trainer hooks (``start()`` / ``stop()``).

What an entry becomes (a capture, a labelled range of the capture around it, an unprofiled
pass) is decided by the scope model of :mod:`neuronscope.scope`, which the decorator shares.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from neuronscope import decorator as _decorator
from neuronscope.announce import ensure_log_handler, log
from neuronscope.capture import check_backend_available
from neuronscope.config import Options, build_options, disabled_by_env, options_key, remember
from neuronscope.drive.owner import Owner, keep_result
from neuronscope.drive.scope import (
    LABEL,
    OFF,
    Entry,
    deliver,
    enter,
    idle,
    leave,
    own_entry,
    placeholder,
)
from neuronscope.drive.session import Session
from neuronscope.drive.window import CallWindow, windows
from neuronscope.result.types import ProfileResult

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; torch requires typing_extensions

__all__ = ["ensure_no_capture_running", "neuron_region", "reset"]

F = TypeVar("F", bound=Callable[..., Any])

# What regions built inline in a loop (a new object every pass) need again, by name and
# options (plain values only): their validated options (about 9 us to build), and the one
# object that serves every disabled region of a name and options (a new one costs about 1.7 us
# more, within the 2 us budget of a disabled region only just; benchmarks/README.md). The one cache.
_made: dict[Any, Any] = {}


def _key(name: Any, options: dict[str, Any]) -> Any:
    if not isinstance(name, (str, type(None))):
        return None
    if not options:  # the common inline region, neuron_region("step"): no options to key
        return (name, ())
    key = options_key(options)
    return None if key is None else (name, key)


def _options(name: Any, options: dict[str, Any]) -> Options:
    key = _key(name, options)
    opts = None if key is None else _made.get(key)
    if opts is None:
        opts = build_options(None, name=name, **options)
        if isinstance(opts.backend, str) and opts.backend not in ("auto", "cpu"):
            check_backend_available(opts.backend)  # checked each time: a device can come and go
        elif key is not None:
            remember(_made, key, opts)
    return opts


def _inert(name: Any, options: dict[str, Any]) -> neuron_region:
    """The region ``neuron_region(name, enabled=False, ...)``: it holds nothing, so one object
    serves every ``with`` of the same name and options (kept by :class:`_InertRegion` when it
    is first set up); a new one where none is kept yet."""
    key = _key(name, options)
    region = None if key is None else _made.get(("inert", key))
    return region if region is not None else _InertRegion.__new__(_InertRegion)


def reset(name: str | None = None) -> None:
    """Start the call windows again: every region name's and every decorated callable's, or
    (with ``name``) those of that name only: the region name's and the decorated callables'
    (``name=``, or by default the function's or module's name, as their log lines show it).
    The next call is counted as the first (warm-up first, then the captures); results already
    captured stay in ``.results``. A name that matches no window warns
    (a ``UserWarning``) and resets nothing."""
    windows.reset(name)


def ensure_no_capture_running() -> bool:
    """True when this thread is in no capture or unprofiled pass and no capture runs."""
    return idle()


def _caller_name() -> str:
    """``"file:line"`` of the code that built the region: the first frame outside this module."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return "region"
    return f"{Path(frame.f_code.co_filename).stem}:{frame.f_lineno}"


class neuron_region(Owner):
    """Profile a block: ``with neuron_region("attn") as r: ...`` then ``r.result``.

    Also decorates (``@neuron_region("step")`` captures each call of the function), and runs
    between two hooks: ``r.start()`` in one callback, ``r.stop()`` in another. The outermost
    region runs a ``torch.profiler`` capture; regions (and decorated calls) inside it become
    labelled ranges whose time and ops appear in the outer result's ``regions``, and their
    ``r.result`` is that outer result once it has ended.

    Options are those of :class:`~neuronscope.config.Options` (``backend``, ``output_dir``,
    ``export``, ``record_shapes``, ``with_stack``, ``enabled``, ``modes``, ``cores``, ...).
    By default every entry is captured, since the user placed the block by hand; in a loop, pass
    ``warmup=`` / ``active=`` and the window is counted per region name (``results`` then holds
    the name's captures; :func:`neuronscope.reset` starts the windows again). A pass that is
    not captured runs its whole block unprofiled.
    """

    reentry_check = True

    def __new__(cls, name: str | Callable[..., Any] | None = None, **options: Any) -> Any:
        if callable(name):  # bare @neuron_region: decorate at once
            func = name
            return cls(getattr(func, "__name__", None), **options)(func)
        if options.get("enabled") is False and cls is neuron_region:
            return _inert(name, options)
        return super().__new__(cls)

    # What a region keeps until it is first entered, on the class: a region written inline in
    # a loop is built on every pass, and a disabled one must stay within 2 us.
    target = None
    window: CallWindow | None = None
    skipped = 0
    _open: list[Entry] | tuple[()] = ()  # this object's entries not yet exited, in any context
    _last: Session | None = None

    def __init__(self, name: str | Callable[..., Any] | None = None, **options: Any) -> None:
        opts = self.options = _options(name, options)
        region_name = self.name = opts.name or _caller_name()
        #: The captures this object ran (the outermost entries), oldest first; the last
        #: MAX_KEPT_RESULTS are kept. With ``warmup=`` / ``active=``, those of the name's window.
        self.results: list[ProfileResult] = []
        if options and opts.enabled and ("warmup" in options or "active" in options):
            self.window = windows.for_name(region_name, opts.warmup, opts.active)
            self.results = self.window.results

    @property
    def enabled(self) -> bool:
        return self.options.enabled and not disabled_by_env()

    @property
    def skipped_calls(self) -> int:
        """Entries that ran uncaptured because another capture held the profiler."""
        return self.skipped

    @property
    def result(self) -> ProfileResult | None:
        """The result of the capture that holds this region, once that capture has ended."""
        session = self._last
        return None if session is None else session.result

    def on_result(self, result: ProfileResult) -> None:
        keep_result(self.results, result)

    def on_abandoned(self, entry: Entry) -> None:
        if entry in self._open:
            self._open.remove(entry)  # type: ignore[union-attr]

    def _enter(self, frame: FrameType | None) -> None:
        entry = enter(self, frame)
        if entry is OFF:
            if not self._open:
                return  # nothing of this object open: its exit finds nothing, does nothing
            entry = placeholder(self)
        if not isinstance(self._open, list):
            self._open = []
        self._open.append(entry)

    def __enter__(self) -> Self:
        if self.options.enabled:  # fixed for this object: __exit__ knows it too
            self._enter(sys._getframe(1) if self.window is not None else None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        opened = self._open
        if not opened:
            return
        entry = own_entry(self, opened) or opened[-1]
        opened.remove(entry)
        if entry.session is None:  # an unprofiled pass: nothing to hand over
            leave(entry, exc)
            return
        try:
            deliver(self, entry, exc)
        finally:  # an interrupt during the stop or the export keeps r.result
            if not (entry.kind == LABEL and entry.cut):
                self._last = entry.session
        return  # never swallow the user's exception

    def start(self) -> Self:
        """Enter the region from a hook (a trainer's ``on_step_begin``); :meth:`stop` ends it.

        Not re-entrant: a ``start()`` while this object's last one in this thread or task is
        still open (its ``stop()`` skipped by an exception) stops that one first, and says so.
        """
        if self.options.enabled:
            pending = own_entry(self, self._open)
            if pending is not None:
                ensure_log_handler()
                log.warning("region %r started again before stop(); the last start is stopped now", self.name)
                self.stop()
            self._enter(None)
        return self

    def stop(self) -> ProfileResult | None:
        """End what :meth:`start` began; the result of the capture that holds this region (or
        None while that capture runs on, or for a pass that was not captured)."""
        pending = self._open[-1] if self._open else None
        self.__exit__(None, None, None)
        if pending is None or pending.session is None or pending.open:
            return None
        return self.result if pending.session is self._last else None

    def reset(self) -> None:
        """Start this region's call window again (see :func:`neuronscope.reset`)."""
        if self.window is not None:
            self.window.restart()

    def __call__(self, func: F) -> F:
        """Decorate ``func``: each call runs inside this region (see the class docstring)."""
        if not callable(func):
            raise _decorator.NotWrappableError(
                f"neuron_region(...) decorates a callable, not {type(func).__name__}; "
                "use it in a 'with' statement, or as @neuron_region(...) above a function"
            )
        name = self.options.name or getattr(func, "__qualname__", None) or self.name
        return _decorator.wrap_callable(func, self.options.with_name(name))


class _InertRegion(neuron_region):
    """What ``neuron_region(..., enabled=False)`` gives (see :func:`_inert`). Python calls
    ``__init__`` at each ``neuron_region(...)`` that returns the shared object: it is set up
    (validated, named) the first time only."""

    _ready = False

    def __init__(self, name: Any = None, **options: Any) -> None:
        if self._ready:
            return
        super().__init__(name, **options)
        self._ready = True
        key = _key(name, options)
        if key is not None and self.name == name:  # a name from the caller's line is not kept
            remember(_made, ("inert", key), self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None
