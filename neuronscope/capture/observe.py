"""The observation pass: exact data flow and code lines, from a warm-up call.

The profiler's default capture records each op's tensor inputs by pointer only; which op made
a tensor then has to be guessed (the allocator hands dead tensors' addresses to new ones), and
a guessed link makes false fusion hints. So a call that runs anyway before the capture (the
last warm-up call of a decorated function or a windowed region) is observed once:

- under ``torch.profiler`` with ``profile_memory=True``: every tensor gets an id per storage
  allocation and each op holds the allocations it made, so each input links to the op that
  made it, exactly;
- under a ``TorchFunctionMode`` that wraps each top-level torch call in a range naming the
  line of the user's code that made it (the profiler records only the enclosing function's
  ``def`` line for an operator such as ``x * y``, the decorator's line when it has one).

The analysis aligns the capture's ops with the observed ones by name and takes the links and
lines from there (:func:`neuronscope.analysis.dataflow.graph_with_observation`); the capture
itself runs with the user's options, so its timings are not disturbed. A capture with nothing
observed before it (a region that runs once) turns on ``profile_memory`` instead
(:func:`options_added`), and says so in its record and in the result (``options_added``).

API: ``with observe_dataflow() as obs: f(x)`` and then ``obs.profiler``; the decorator and the
region call :func:`observe_warmup` around their last warm-up call, and the session passes
:func:`observation_for` its capture's name.
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
from neuronscope.capture.base import quiet_native_stderr
from neuronscope.capture.frames import is_user_file
from neuronscope.capture.neuron_files import StrayRuntimeOutput

__all__ = [
    "CONSTS_SEP",
    "LOCATION_PREFIX",
    "PROFILE_MEMORY_WHY",
    "Observation",
    "begin_observation",
    "end_observation",
    "observation_for",
    "observe_dataflow",
    "observe_warmup",
    "options_added",
]

#: Why a capture turns ``profile_memory`` on by itself, as its record and result.json say.
PROFILE_MEMORY_WHY = (
    "no warm-up call was observed before this capture, and hints are on with record_shapes: "
    "allocation records link each op's inputs to the op that made them exactly"
)

#: Name prefix of the ranges the observation pass wraps torch calls in: ``ns@file:line``.
LOCATION_PREFIX = "ns@"
#: Separates the line from the call's Python numbers in those names: ``ns@f.py:3|1e-06``.
CONSTS_SEP = "|"
#: Lines torch prints from C++ around an observation's profiler start: its USDT probes and
#: the once-per-process note about blocks allocated before profile_memory started.
NATIVE_NOISE = (b"USDT:", b"was allocated before the profiling started")
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
    open_ranges: dict[int, Any] = {}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        key = id(frame)
        held = open_ranges.pop(key, None)
        if held is not None:
            held.__exit__(None, None, None)
        if event == "line":
            rng = fast(f"{LOCATION_PREFIX}{frame.f_code.co_filename}:{frame.f_lineno}")
            rng.__enter__()
            open_ranges[key] = rng
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
        for rng in reversed(list(open_ranges.values())):
            rng.__exit__(None, None, None)


def _profiler_busy() -> bool:
    return torch_private.profiler_flag_on()


@contextlib.contextmanager
def observe_dataflow() -> Iterator[Observation]:
    """Observe the ops run inside the block: exact links and code lines (see the module).

    Never raises for its own sake: when a profiler already runs (the user's, or a capture
    around this one) nothing is observed and ``obs.profiler`` stays None.
    """
    obs = Observation()
    try:
        import torch.profiler

        if _profiler_busy():
            obs.error = "a profiler was already running"
            yield obs
            return
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, profile_memory=True
        )
        lines = _line_ranges() if _compile_in_use() else _function_mode()
        # torch warns once per process, on stderr from C++, when a block allocated before
        # profile_memory started is freed: freeing one here, while stderr is filtered, spends
        # that warning where the user does not see it.
        probe = torch.empty(1)
        # A loaded TorchNeuron starts its runtime trace in this CPU-only capture too, into
        # ./output: what it writes there is removed after the stop (nothing is exported).
        stray = StrayRuntimeOutput()
        stray.snapshot()
        with quiet_native_stderr(NATIVE_NOISE):
            prof.start()
            del probe
    except Exception as err:  # observing is best effort: the user's call runs regardless
        obs.error = f"{type(err).__name__}: {err}"
        yield obs
        return
    try:
        with lines:
            yield obs
    finally:
        try:
            with quiet_native_stderr():
                prof.stop()
            obs.profiler = prof
        except Exception as err:
            obs.error = f"{type(err).__name__}: {err}"
        try:
            stray.collect(None)
        except OSError:  # best effort: the observation never costs the call
            pass


# The newest observation of each capture name, taken by every capture of that name; kept
# module-wide because the warm-up call and the capture are different calls (of a decorated
# function, or passes of a region) that share nothing else. Guarded by _lock.
_observed: dict[str, Observation] = {}
_lock = threading.Lock()


@contextlib.contextmanager
def observe_warmup(name: str, last: bool = True) -> Iterator[None]:
    """Around a warm-up call of capture ``name``: observe it when it is the ``last`` one."""
    if not last:
        yield
        return
    with observe_dataflow() as obs:
        yield
    if obs.profiler is not None:
        with _lock:
            _observed[name] = obs


def observation_for(name: str) -> Observation | None:
    """The observation made for capture ``name`` before it, if any."""
    with _lock:
        return _observed.get(name)


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


def begin_observation(name: str) -> Any:
    """Start observing the last warm-up call of capture ``name`` (a region's enter and exit
    are two calls, so the scope model holds the handle between them); None if it could not
    start. :func:`end_observation` ends it, from any thread."""
    cm = observe_warmup(name)
    try:
        cm.__enter__()
    except Exception:  # observing is best effort
        return None
    return cm


def end_observation(handle: Any) -> None:
    """End an observation :func:`begin_observation` started."""
    if handle is None:
        return
    try:
        handle.__exit__(None, None, None)
    except Exception:  # observing is best effort
        pass
