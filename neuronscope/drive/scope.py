"""Which capture the running code is in: the one scope model of regions and decorated calls.

Each ``with neuron_region(...)`` or decorated call opens an :class:`Entry`, pushed on a chain
held in a :class:`contextvars.ContextVar`, and closes it when it ends. The *scope* is the
innermost open entry that is a capture or a quiet pass; it decides what a new entry is:

- inside a capture, a labelled range of it (its time and ops land in the capture's
  ``regions``); inside a quiet pass (a warm-up call, or one past the call window), nothing;
- at the top, the entry's call window decides: a quiet pass, or a capture of its own; a
  capture needs the process's one profiler, so an entry made while another thread's capture
  holds it runs uncaptured and is counted (``skip``), and one made under the user's own
  ``torch.profiler`` becomes a labelled range in theirs (``foreign``).

Closing marks an entry closed and any thread may do it (a generator finished on another
thread, a trainer hook): readers skip closed entries, so threads, generators and tasks need no
frame or thread bookkeeping. Each thread and each asyncio task has its own context, hence its
own chain. A capture that ends while labelled ranges inside it are still open cuts them: they
get no result. Frames are looked at in one case only: a region object entered again inside its
own unprofiled pass, where recursion and a skipped ``__exit__`` look alike (:func:`_abandoned`).
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from neuronscope.announce import ensure_log_handler, log, warn_once, warn_user
from neuronscope.capture import claim_profiler, profiler_claimed, profiler_running
from neuronscope.capture import release_profiler as _release_claim
from neuronscope.capture.base import defer_to_thread, has_deferred, pending_work, run_deferred
from neuronscope.capture.cells import execution_count
from neuronscope.capture.observe import Observation, Observing, begin_observation, end_observation, forget_observer
from neuronscope.config import disabled_by_env
from neuronscope.drive.forking import check_forked_child
from neuronscope.drive.labels import close_range, open_range
from neuronscope.drive.owner import KERNEL_MODULE, Owner
from neuronscope.drive.session import Session
from neuronscope.drive.threads import strand
from neuronscope.drive.window import end_shared, keep_shared
from neuronscope.result.types import ProfileResult

__all__ = [
    "OFF",
    "Entry",
    "acquire_profiler",
    "capturing",
    "current",
    "enter",
    "idle",
    "leave",
    "own_entry",
    "placeholder",
    "release_profiler",
    "run",
]

CAPTURE, LABEL, QUIET, FOREIGN, SKIP, OFF_KIND = "capture", "label", "quiet", "foreign", "skip", "off"


class Entry:
    """One open region or decorated call, on its context's chain. The fields most entries
    never set (all but a capture's and a label's) keep their class defaults: an unprofiled
    pass, the common case in a loop, sets four."""

    #: Set when the capture holding this labelled range ended before it.
    cut = False
    session: Session | None = None  # a capture's own; a label's holder's
    holder: Entry | None = None  # a label's capture entry
    inner: list[Entry] | None = None  # a capture's open labels
    range: Any = None  # the record_function of a label, foreign label or capture
    frame: FrameType | None = None  # where a region's quiet pass was entered ...
    line = 0  # ... and from which line
    observing: Any = None  # the observation pass over a last warm-up call (capture.observe)
    timed_ns = 0  # when a timed warm-up call began (perf_counter_ns), or 0
    #: The thread that opened the entry's profiler session or range: the only one that may
    #: stop or close it (torch keeps both in that thread's state; see capture.base).
    thread: threading.Thread | None = None

    def __init__(self, kind: str, owner: Owner | None, parent: Entry | None) -> None:
        self.kind = kind
        self.owner = owner
        self.parent = parent
        self.open = True

    def __repr__(self) -> str:
        return f"Entry({self.kind}, {getattr(self.owner, 'name', None)!r}, {'open' if self.open else 'closed'})"


#: An entry that did nothing and holds nothing (disabled): shared, never on a chain.
OFF = Entry(OFF_KIND, None, None)
OFF.open = False

# The chain of each context (thread, asyncio task): its innermost entry. A ContextVar, so that
# tasks and threads each have their own, and a generator's entries live in its consumer's.
_chain: contextvars.ContextVar[Entry | None] = contextvars.ContextVar("neuronscope_scope", default=None)


class _Profiler:
    """How many captures the process completed (the decorator's note at exit about functions
    that ran only inside torch.compile'd code is said only when none was). The profiler
    itself is claimed in capture.base, by captures and observations alike."""

    def __init__(self) -> None:
        self.captures_done = 0


# The process's one profiler: global by nature.
_profiler = _Profiler()


def _open_head() -> Entry | None:
    e = _chain.get()
    while e is not None and not e.open:
        e = e.parent
    return e


def current() -> Entry | None:
    """The scope of the running code: the innermost open capture or quiet entry, or None."""
    e = _chain.get()
    while e is not None and (not e.open or e.kind not in (CAPTURE, QUIET)):
        e = e.parent
    return e


def capturing() -> bool:
    """Whether the running code is inside one of neuronscope's captures."""
    entry = current()
    return entry is not None and entry.kind == CAPTURE


def idle() -> bool:
    """True when this context is in no capture or quiet pass and no capture holds the
    profiler (used by tests and by ``compare()`` before it starts). Work other threads left
    for this one (a session of its own to stop) is done first."""
    if has_deferred():
        run_deferred()
    return current() is None and not profiler_claimed()


def acquire_profiler() -> bool:
    """Take the process's one profiler for a capture of the caller's own (``compare()``);
    False when another capture or the user's own torch.profiler holds it."""
    return claim_profiler()


def release_profiler() -> None:
    """Give back what :func:`acquire_profiler` took."""
    _release_claim()


def _push(kind: str, owner: Owner | None) -> Entry:
    entry = Entry(kind, owner, _open_head())
    _chain.set(entry)
    return entry


def placeholder(owner: Owner) -> Entry:
    """An entry that does nothing, on the chain: for an owner whose exits must pair with its
    entries (a region object entered while disabled, with another entry of it still open)."""
    return _push(OFF_KIND, owner)


def own_entry(owner: Owner, candidates: Sequence[Entry]) -> Entry | None:
    """The innermost of ``candidates`` (``owner``'s entries not yet exited) on this context's
    chain, open or not; None when none is here (a generator that entered it on another
    thread, say)."""
    e = _chain.get()
    while e is not None:
        if e.owner is owner and e in candidates:
            return e
        e = e.parent
    return None


def _close(entry: Entry) -> None:
    """Mark ``entry`` closed; if it heads this context's chain, the chain moves up."""
    entry.open = False
    head = _chain.get()
    if head is entry or (head is not None and not head.open):
        _chain.set(_open_head())


def _close_range(entry: Entry) -> None:
    rf, entry.range = entry.range, None
    close_range(rf)


def enter(owner: Owner, frame: FrameType | None = None) -> Entry:
    """Open an entry for ``owner`` in this context (see the module docstring for what it
    becomes). ``frame`` is the caller's, for a region object (see :func:`_abandoned`)."""
    if not owner.options.enabled:
        return OFF
    if pending_work:
        run_deferred()  # sessions and ranges of this thread's that another thread ended
    scope = current()
    if scope is not None and scope.kind is QUIET:
        if owner.reentry_check and scope.owner is owner and _abandoned(scope, frame):
            return enter(owner, frame)  # its last entry was closed: decide afresh
        return OFF  # inside an unprofiled pass (or recursion into one): unprofiled too
    window = owner.window
    if scope is None and window is not None and window.closed:
        # Past its window, the common case in a loop: an unprofiled pass, decided before the
        # environment is read (os.environ.get of an unset name costs about 1 us).
        if KERNEL_MODULE in sys.modules:  # a notebook: a re-run cell is told (once a cell)
            owner.on_used_window()
        return _quiet(owner, frame)
    if disabled_by_env():
        return OFF  # a disabled call counts for nothing, not even its window
    if check_forked_child():  # forked while a capture ran: no profiler here (warned once)
        return _push(OFF_KIND, owner)
    if scope is not None:
        entry = _push(LABEL, owner)
        entry.holder, entry.session = scope, scope.session
        if scope.inner is None:
            scope.inner = []
        scope.inner.append(entry)
        entry.thread = threading.current_thread()
        if entry.thread is scope.thread:  # elsewhere (a context copied into a worker): no range
            entry.range = open_range(owner.name)
        return entry
    if window is not None and (window.closed or not window.next_call_captured()):
        if window.calls == 1 and window.warmup:
            owner.on_first_warmup()
        entry = _quiet(owner, frame)
        if not window.closed and window.calls == window.warmup and owner.options.hints:
            # The last warm-up call: observed once, for the capture's exact data flow (not
            # when another thread's session holds the profiler: then the capture records
            # allocations itself).
            entry.observing = begin_observation()
        if not window.closed:
            # The capture's yardstick: an unprofiled call, or the observed one where it is the
            # only warm-up call (the default window), timed without the observation's start.
            entry.timed_ns = time.perf_counter_ns()
        return entry
    shared = None if window is None else window.shared
    if window is not None and shared is not None and shared.thread is threading.current_thread() and shared.replaced():
        # The user's own torch.profiler started since the window's last capture and replaced
        # its session: the window ends (its captures so far say they were lost) and this call
        # goes on as any other would now: a range in theirs, or a capture of its own.
        end_shared(window, release=True)
        shared = None
    if shared is not None and not shared.finished:
        # Its window's captures share one profiler session, open since its first capture and
        # holding the claim: this one is a range of it, on the session's own thread only.
        if shared.thread is threading.current_thread():
            return _start_capture(owner)
        owner.on_skip()
        return _push(SKIP, owner)
    if profiler_running() and not profiler_claimed():
        # The user's own torch.profiler is running: no capture of ours (torch's profiler is
        # process-wide and not re-entrant), but the block shows in theirs as a labelled range.
        entry = _push(FOREIGN, owner)
        entry.thread = threading.current_thread()
        entry.range = open_range(owner.name)
        owner.on_skip()
        return entry
    if not acquire_profiler():
        owner.on_skip()  # another capture of ours (another thread or task) holds it
        return _push(SKIP, owner)
    return _start_capture(owner)


def _quiet(owner: Owner, frame: FrameType | None) -> Entry:
    entry = _push(QUIET, owner)
    if frame is not None:
        entry.frame, entry.line = frame, frame.f_lineno
    return entry


def _start_capture(owner: Owner) -> Entry:
    if KERNEL_MODULE in sys.modules:
        owner.captured_in_cell = execution_count()
    session = Session(
        owner.options,
        owner.name,
        owner.target,
        skipped=owner.skipped_so_far,
        announce=owner.announce,
        observation=owner.observation(),
        unprofiled_us=owner.unprofiled_us,
        unprofiled_observed=owner.unprofiled_observed,
        window=owner.window,
    )
    entry = _push(CAPTURE, owner)
    entry.session = session
    entry.thread = threading.current_thread()
    try:
        session.start()
        entry.range = open_range(owner.name)
    except BaseException as err:
        _close(entry)
        try:
            session.abandon()
        finally:
            release_profiler()
        if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: the user's own
            raise
        # The profiler failing to start must not stop the user's program.
        warn_user(f"neuronscope: could not start capture {owner.name!r} ({type(err).__name__}: {err}); this call runs unprofiled")
        return _push(OFF_KIND, owner)
    return entry


def _keep_timing(owner: Owner, elapsed_ns: int, observed: bool) -> None:
    """Keep a warm-up call's time as the capture's yardstick; an observed call's only where no
    unobserved one was timed (it ran under the observation's profiler)."""
    if observed and owner.unprofiled_us is not None and not owner.unprofiled_observed:
        return
    owner.unprofiled_us = elapsed_ns / 1e3
    owner.unprofiled_observed = observed


def _abandoned(scope: Entry, frame: FrameType | None) -> bool:
    """``scope`` (a quiet pass of a region object) is entered again by its own object. That is
    recursion while the frame that entered it still runs further up the stack; otherwise its
    exit was skipped (trainer hooks, with an exception between them), and it is closed here,
    so that it does not keep the thread unprofiled for good."""
    entered = scope.frame
    if frame is not None and entered is not None:
        if frame is entered:
            if frame.f_lineno != scope.line:
                return False  # `with r:` inside `with r:` in one function
        else:
            up: FrameType | None = frame.f_back
            while up is not None:
                if up is entered:
                    return False
                up = up.f_back
    _close(scope)
    if scope.owner is not None:
        scope.owner.on_abandoned(scope)
    ensure_log_handler()
    log.warning(
        "region %r entered again before its last entry exited (was __exit__ skipped, by an "
        "exception between hooks?); that entry is closed now",
        getattr(scope.owner, "name", "?"),
    )
    return True


def leave(entry: Entry, exc: BaseException | None) -> ProfileResult | None:
    """Close ``entry`` (from any thread); for a capture, stop it and return its result.

    An interrupt that landed while the profiler stopped is raised again after the result was
    kept in ``entry.session.result``.
    """
    if entry is OFF:
        return None
    if pending_work:
        run_deferred()
    kind = entry.kind
    was_open = entry.open
    _close(entry)
    here = threading.current_thread()
    if kind is QUIET or kind is OFF_KIND:
        elapsed_ns = time.perf_counter_ns() - entry.timed_ns if entry.timed_ns else 0  # before the observation stops
        observing, entry.observing = entry.observing, None
        if observing is not None and was_open:
            if observing.thread is not here:  # its session is that thread's to stop; nothing observed
                def end_there(observing: Observing = observing) -> None:
                    end_observation(observing)  # what it observed is dropped: another thread's call

                defer_to_thread(observing.thread, end_there, orphaned=forget_observer)
            else:
                _keep_observation(entry.owner, end_observation(observing))
        if entry.timed_ns and was_open and exc is None and entry.owner is not None:
            _keep_timing(entry.owner, elapsed_ns, observed=observing is not None)
        return None
    if kind == LABEL:
        holder = entry.holder
        if entry.cut or holder is None:
            _said_cut(entry)
            return None
        if entry.range is not None and entry.thread is not here:
            return None  # its range is closed by its own thread, at the capture's end (cut)
        if holder.inner and entry in holder.inner:
            holder.inner.remove(entry)
        _close_range(entry)
        return None
    if kind == FOREIGN:
        if entry.thread is not None and entry.thread is not here:
            defer_to_thread(entry.thread, lambda: _close_range(entry))
        else:
            _close_range(entry)
        return None
    if kind != CAPTURE or not was_open:
        return None
    session = entry.session
    assert session is not None
    if entry.thread is not here:
        strand(entry, release_profiler)
        return None
    keep_claim = False
    try:
        for label in reversed(entry.inner or ()):  # ranges still open: cut at the capture's end
            label.cut = True
            label.open = False
            _close_range(label)
        entry.inner = None
        _close_range(entry)
        owner = entry.owner
        window = getattr(owner, "window", None)
        if session.shared is None or window is None or owner is None:
            return session.stop(exc)
        session.end(exc)
        window.pending.append((session, owner))
        interrupted = session.record is not None and session.record.interrupted is not None
        if not window.closed and session.shared is window.shared and not interrupted:
            keep_claim = True  # more captures of its window to come: the session stays open
            keep_shared(window, owner.name)
            return None
        return end_shared(window, deliver_last=False)
    finally:
        if not keep_claim:
            release_profiler()
        _profiler.captures_done += 1


def _keep_observation(owner: Owner | None, observation: Observation | None) -> None:
    """A finished observation goes to the call window that made it (its next capture's)."""
    if observation is not None and owner is not None and owner.window is not None:
        owner.window.observation = observation


def _said_cut(entry: Entry) -> None:
    owner = entry.owner
    holder = entry.holder
    warn_once(
        ("cut", getattr(owner, "name", None)),
        f"neuronscope: region {getattr(owner, 'name', '?')!r} ended after the capture "
        f"{getattr(holder.owner if holder else None, 'name', '?')!r} that held it; its range was cut at "
        "that capture's end, and it gets no result of its own",
    )


def set_capture_root(module: Any, entry: Entry | None = None) -> None:
    """Name the module calls of the capture that holds ``entry`` (default: this context's
    innermost entry) by their paths in ``module``: the instance whose decorated ``forward``
    is being captured, or a trainer's model whose step methods call its children directly."""
    entry = current() if entry is None else entry
    session = None if entry is None else entry.session
    capture = None if session is None else session.capture
    hooks = None if capture is None else capture.module_hooks
    if hooks is not None and entry is not None and entry.kind in (CAPTURE, LABEL):
        try:
            hooks.set_root(module)
        except Exception:  # a module that cannot list its children: its calls keep class names
            pass


def captures_done() -> int:
    """Captures this process completed."""
    return _profiler.captures_done


def run(owner: Owner, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` inside an entry of ``owner``: enter, call, exit. The user's
    exception passes through unchanged; the capture up to it is kept (``status="error"``)."""
    entry = enter(owner)
    if entry is OFF:
        return fn(*args, **kwargs)
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        deliver(owner, entry, exc)
        raise
    deliver(owner, entry, None)
    return value


def deliver(owner: Owner, entry: Entry, exc: BaseException | None) -> ProfileResult | None:
    """``leave``, then hand a capture's result to ``owner`` (before an interrupt that landed
    during the stop or the export goes on)."""
    try:
        result = leave(entry, exc)
    except BaseException:
        if entry.session is not None and entry.session.result is not None and entry.kind == CAPTURE:
            owner.on_result(entry.session.result)
        raise
    if result is not None:
        owner.on_result(result)
    return result

