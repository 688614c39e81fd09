"""The observation pass: exact data flow and code lines, from a warm-up call.

The profiler's default capture records each op's tensor inputs by pointer only; which op made
a tensor is then unknown (the allocator hands dead tensors' addresses to new ones), and a
guessed link makes false fusion hints, so such a capture is matched by op order alone. So a
call that runs anyway before the capture (the
last warm-up call of a decorated function or a windowed region) is observed once:

- under ``torch.profiler`` with ``profile_memory=True``: every tensor gets an id per storage
  allocation and each op holds the allocations it made, so each input links to the op that
  made it, exactly;
- under a ``TorchFunctionMode`` that wraps each top-level torch call in a range naming the
  line of the user's code that made it (the profiler records only the enclosing function's
  ``def`` line for an operator such as ``x * y``, the decorator's line when it has one).

The analysis aligns the capture's ops with the observed ones by name and takes the links and
lines from there (:func:`neuronscope.analysis.observed_links.graph_with_observation`); the capture
itself runs with the user's options, so its timings are not disturbed. A capture with nothing
observed before it (a region that runs once) turns on ``profile_memory`` instead
(:func:`options_added`), and says so in its record and in the result (``options_added``).

API: ``with observe_dataflow() as obs: f(x)`` and then ``obs.profiler``; the scope model calls
:func:`begin_observation` / :func:`end_observation` around a call window's last warm-up call and
keeps the observation on that window (the window that made it, not a name shared by others);
compare() uses :func:`observe_warmup`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from neuronscope.capture import torch_private
from neuronscope.capture.base import (
    Started,
    claim_profiler,
    defer_to_thread,
    force_profiler_off,
    release_profiler,
    start_session,
    stop_session,
)
from neuronscope.capture.frames import is_user_file
from neuronscope.capture.neuron_files import StrayRuntimeOutput
from neuronscope.capture.stderr import quiet_native_stderr

__all__ = [
    "CONSTS_SEP",
    "LOCATION_PREFIX",
    "PROFILE_MEMORY_WHY",
    "Observation",
    "Observing",
    "begin_observation",
    "end_observation",
    "forget_observer",
    "observe_dataflow",
    "observe_warmup",
    "options_added",
]

#: Why a capture turns ``profile_memory`` on by itself, as its record and result.json say.
PROFILE_MEMORY_WHY = (
    "no warm-up call was observed before this capture, and hints are on with record_shapes: "
    "allocation records link each op's inputs to the op that made them exactly"
)

#: Why nothing was observed where the observed call started a profiler session of its own.
REPLACED = (
    "another torch profiler session (your own torch.profiler?) started inside the observed "
    "warm-up call and replaced the observation's; it was left running, nothing observed"
)
#: Name prefix of the ranges the observation pass wraps torch calls in: ``ns@file:line``.
LOCATION_PREFIX = "ns@"
#: Separates the line from the call's Python numbers in those names: ``ns@f.py:3|1e-06``.
CONSTS_SEP = "|"
#: Lines torch prints from C++ around an observation's profiler start: its USDT probes and
#: the once-per-process note about blocks allocated before profile_memory started.
NATIVE_NOISE = (
    b"USDT:",
    b"was allocated before the profiling started",
    b"External init callback must run in same thread as registerClient",
)
#: How many frames above a torch call are searched for the user's line: deep enough for a
#: model's forward under nn.Module's call machinery and a library's helpers.
MAX_FRAMES = 24


@dataclasses.dataclass
class Observation:
    """A finished observation: the profiler that ran over the call (None if none could)."""

    profiler: Any = None
    error: str | None = None
    #: The analysis's graph of it, kept once built (captures of one name share it).
    graph: Any = None


def _user_line() -> str | None:
    frame: FrameType | None = sys._getframe(2)
    for _ in range(MAX_FRAMES):
        if frame is None:
            return None
        code = frame.f_code
        if is_user_file(code.co_filename):
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _function_mode() -> Any:
    from torch.overrides import TorchFunctionMode

    fast = torch_private.record_function_fast()

    class _Lines(TorchFunctionMode):
        """Names each top-level torch call's range after the user's line that made it."""

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            line = _user_line()
            if line is None:
                return func(*args, **kwargs)
            # The Python numbers of the call (``x * 0.125``, ``var + 1e-6``): the profiler
            # records them as 0-dim tensors, without their value.
            # numpy's numbers too (``np.sqrt(2 / np.pi)``), written as plain floats.
            nums = [float(a) for a in (*args, *kwargs.values()) if isinstance(a, numbers.Real) and a.__class__ is not bool]
            # and the torch function called (a library's composite, such as
            # F.multi_head_attention_forward, holds many ops: their numbers are not its).
            called = getattr(func, "__name__", "")
            name = LOCATION_PREFIX + line + CONSTS_SEP + ",".join(map(repr, nums)) + CONSTS_SEP + called
            with fast(name):
                return func(*args, **kwargs)

    return _Lines()


def _compile_in_use() -> bool:
    """Has torch.compile been asked for in this process? Dynamo guards compiled code on the
    torch function mode stack: code compiled under the observation's mode would recompile at
    the next call without it (a false ``recompile`` hint, and a second compile)."""
    eval_frame = torch_private.dynamo_eval_frame()
    backends = getattr(eval_frame, "cached_backends", None) or {}
    return any(b is not None for b in list(backends.values()))


@contextlib.contextmanager
def _line_ranges() -> Iterator[None]:
    """The user's lines without a mode (where torch.compile runs): a trace function opens a
    range per executed line of user code, so each op lands under the innermost user line that
    ran it. No Python numbers this way. Left off under a debugger or coverage tool (a trace
    function already set), which it would displace."""
    if sys.gettrace() is not None:
        yield
        return
    fast = torch_private.record_function_fast()
    starts = torch_private.profiler_start_counter()
    open_ranges: dict[int, tuple[Any, int]] = {}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        key = id(frame)
        held = open_ranges.pop(key, None)
        if held is not None:  # not ended in the user's session, if that line started one
            torch_private.end_range(*held)
        if event == "line":
            rng = fast(f"{LOCATION_PREFIX}{frame.f_code.co_filename}:{frame.f_lineno}")
            rng.__enter__()
            open_ranges[key] = (rng, starts[0])
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and is_user_file(frame.f_code.co_filename):
            return local
        return None

    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(None)
        for held in reversed(list(open_ranges.values())):
            torch_private.end_range(*held)


@contextlib.contextmanager
def observe_dataflow() -> Iterator[Observation]:
    """Observe the ops run inside the block: exact links and code lines (see the module).

    Never raises for its own sake: when the profiler is not free (the user's own runs, or a
    capture of neuronscope's in this or another thread holds it) nothing is observed and
    ``obs.profiler`` stays None. The observation's profiler is one of the process's sessions
    like a capture's: it takes the same claim, and only its own thread stops it (a block left
    on another thread, a generator's, leaves nothing observed).
    """
    obs = Observation()
    if not claim_profiler():
        obs.error = "a profiler was already running"
        yield obs
        return
    thread = threading.current_thread()
    try:
        import torch.profiler

        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, profile_memory=True
        )
        lines = _line_ranges() if _compile_in_use() else _function_mode()
        # torch warns once per process, on stderr from C++, when a block allocated before
        # profile_memory started is freed: freeing one here, while stderr is filtered, spends
        # that warning where the user does not see it.
        probe = [torch.empty(1)]
        # A loaded TorchNeuron starts its runtime trace in this CPU-only capture too, into
        # ./output: what it writes there is removed after the stop (nothing is exported).
        stray = StrayRuntimeOutput()
        stray.snapshot()

        def begin() -> None:
            with quiet_native_stderr(NATIVE_NOISE):
                prof.start()
                probe.clear()

        session = start_session(begin)
    except Exception as err:  # observing is best effort: the user's call runs regardless
        obs.error = f"{type(err).__name__}: {err}"
        release_profiler()
        yield obs
        return
    if session is None:  # another thread's session began after the claim: not ours to race
        obs.error = "a profiler was already running"
        release_profiler()
        yield obs
        return
    try:
        with lines:
            yield obs
    finally:
        if threading.current_thread() is not thread:
            # Stopped by its own thread when that thread next enters neuronscope; until then
            # the claim stays taken (captures elsewhere skip rather than race it).
            obs.error = "the observed block ended on another thread than it began; nothing observed"
            defer_to_thread(thread, lambda: _stop_observer(prof, stray, session), orphaned=forget_observer)
        else:
            try:
                if _stop_observer(prof, stray, session):
                    obs.profiler = prof
                else:
                    # The user's own torch.profiler started inside the observed call (or on
                    # another thread meanwhile) and replaced this session: never stopped here.
                    obs.error = REPLACED
            except Exception as err:
                obs.error = f"{type(err).__name__}: {err}"


def forget_observer() -> None:
    """An observation's thread ended with its session open: torch's state for it went with
    the thread; only the flag and the claim are left to put right."""
    force_profiler_off()
    release_profiler()


def _stop_observer(prof: Any, stray: StrayRuntimeOutput, session: Started) -> bool:
    """Stop the observation's session unless another replaced it (False then); the claim is
    given back whatever happens."""
    try:
        return stop_session(session, lambda: _quiet_stop(prof))
    finally:
        release_profiler()
        _collect_stray(stray)


def _quiet_stop(prof: Any) -> None:
    with quiet_native_stderr():
        prof.stop()


def _collect_stray(stray: StrayRuntimeOutput) -> None:
    """Remove what a loaded TorchNeuron's runtime wrote into ./output during the observation."""
    try:
        stray.collect(None)
    except OSError:  # best effort: the observation never costs the call
        pass


@contextlib.contextmanager
def observe_warmup(last: bool = True) -> Iterator[Observation | None]:
    """Around a warm-up call: observe it when it is the ``last`` one. Gives the
    :class:`Observation` (its ``profiler`` set once the block ended well), or None; whoever
    ran the call keeps it for its capture (a call window, compare()'s variant)."""
    if not last:
        yield None
        return
    with observe_dataflow() as obs:
        yield obs


def options_added(options: Any, observed: bool) -> dict[str, dict[str, Any]]:
    """The options a capture turns on by itself, beyond the user's ``options``: ``{option:
    {"value": ..., "why": ...}}``. With nothing ``observed`` before it, hints on and shapes
    recorded, ``profile_memory=True`` gives the capture its own exact links. The caller runs
    the capture with these on and records them (the user's options stay as given)."""
    if observed or options.profile_memory:
        return {}
    if not getattr(options, "hints", True) or not options.record_shapes:
        return {}
    return {"profile_memory": {"value": True, "why": PROFILE_MEMORY_WHY}}


class Observing:
    """An observation begun by :func:`begin_observation`: the thread that began it (the only
    one that may end it) and what it gives."""

    def __init__(self, cm: Any, obs: Observation) -> None:
        self.cm = cm
        self.obs = obs
        self.thread = threading.current_thread()


def begin_observation() -> Observing | None:
    """Start observing the last warm-up call of a capture (a region's enter and exit are two
    calls, so the scope model holds the handle between them); None if it could not start
    (the profiler is not free). :func:`end_observation` ends it, on the same thread."""
    cm = observe_warmup()
    try:
        obs = cm.__enter__()
    except Exception:  # observing is best effort
        return None
    if obs is None or obs.error is not None:
        cm.__exit__(None, None, None)
        return None
    return Observing(cm, obs)


def end_observation(handle: Observing | None) -> Observation | None:
    """End an observation :func:`begin_observation` started, on the thread that began it;
    the observation, or None when nothing usable was observed."""
    if handle is None:
        return None
    try:
        handle.cm.__exit__(None, None, None)
    except Exception:  # observing is best effort
        return None
    return handle.obs if handle.obs.profiler is not None else None
