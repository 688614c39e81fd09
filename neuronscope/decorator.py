"""``@profile_on_neuron``: bare or with options, on functions, methods, ``forward``, module
instances and ``async def`` functions.

The wrapper is chosen once, at decoration time, by the kind of callable. Wrappers are plain
closures made with ``functools.wraps`` rather than ``wrapt.FunctionWrapper``: a wrapt call costs
1.1 to 1.8 us on a 2-core machine against about 0.2 us for a closure, and a decorated
``forward`` must cost next to nothing once its call window has closed. Closures bind as methods
by themselves, and ``inspect.signature`` follows ``__wrapped__``. Module instances are wrapped in
a ``wrapt.ObjectProxy``, so the proxy still behaves as the model (attributes, ``.parameters()``,
``isinstance``).
"""

from __future__ import annotations

import atexit
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

import wrapt

from neuronscope.announce import log
from neuronscope.config import (
    DEFAULT_ACTIVE,
    DEFAULT_WARMUP,
    Options,
    build_options,
    disabled_by_env,
)
from neuronscope.drive.owner import Owner, keep_result
from neuronscope.drive.scope import (
    CAPTURE,
    OFF,
    captures_done,
    deliver,
    enter,
    leave,
    set_capture_root,
)
from neuronscope.drive.window import CallWindow, windows
from neuronscope.errors import NeuronscopeError
from neuronscope.result.types import ProfileResult

__all__ = ["NotWrappableError", "profile_on_neuron", "report_uncaptured", "wrap_callable"]

F = TypeVar("F", bound=Callable[..., Any])


class NotWrappableError(NeuronscopeError, TypeError):
    """The object given to ``profile_on_neuron`` cannot be profiled as a call."""


class _DecoratedState(Owner):
    """Per decorated callable: its call window and the results it collected."""

    def __init__(self, options: Options, name: str, target: str) -> None:
        self.window: CallWindow = CallWindow(options.warmup, options.active)
        super().__init__(options, name, target, self.window)
        #: The window's own list, as a region's: what its captures gave is counted from it.
        self.results: list[ProfileResult] = self.window.results
        self.wrapper: Any = None
        #: Set when torch.compile traced through the wrapper: the compiled code then runs the
        #: function without it, and nothing of it can be captured (see ``report_uncaptured``).
        self.compiled_through = False

    def on_result(self, result: ProfileResult) -> None:
        keep_result(self.results, result)  # one capture at a time: no two results race
        if self.wrapper is not None:
            self.wrapper.last_result = result

    def on_skip(self) -> None:
        super().on_skip()
        if self.wrapper is not None:
            self.wrapper.skipped_calls = self.skipped


@atexit.register
def report_uncaptured(captures: int | None = None) -> None:
    """Say once, at exit, when a decorated callable never reached its capture window, or ran
    only inside torch.compile'd code while nothing at all was captured (``captures``: how many
    captures the process completed; by default, counted)."""
    done = captures_done() if captures is None else captures
    for state in windows.owners:
        if not isinstance(state, _DecoratedState):
            continue
        w = state.window
        if state.compiled_through and not state.results and not done:
            log.warning(
                "%s ran inside torch.compile'd code, where the compiled graph replaces "
                "the profile_on_neuron wrapper and nothing is captured. Profile the compiled callable "
                "instead: profile_on_neuron(torch.compile(f)), or a neuron_region around its call.",
                state.name,
            )
        elif 0 < w.calls <= w.warmup and not state.results and state.options.enabled:
            log.warning(
                "%s was called %d time(s), all warm-up (warmup=%d); nothing was "
                "captured. Pass warmup=0 to capture the first call.",
                state.name,
                w.calls,
                w.warmup,
            )


def _describe(obj: Any) -> str:
    """'Model.forward' for a method; the '<locals>' path of functions defined in functions is
    dropped, since it says nothing to the reader of a table."""
    qualname = getattr(obj, "__qualname__", None) or type(obj).__name__
    return str(qualname).rsplit("<locals>.", 1)[-1]


def _check_wrappable(func: Any) -> None:
    if inspect.isclass(func):
        raise NotWrappableError(
            f"profile_on_neuron cannot wrap the class {func.__qualname__}; decorate its forward "
            f"method in the class body, or wrap an instance: profile_on_neuron(model)"
        )
    if not callable(func):
        raise NotWrappableError(
            f"profile_on_neuron needs a function, method or module, got {type(func).__name__} {func!r:.60}"
        )
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise NotWrappableError(
            f"profile_on_neuron cannot wrap the generator function {_describe(func)}: its body "
            f"runs lazily, after the call returns; wrap the loop that consumes it in neuron_region"
        )


def _disabled_wrapper(func: F) -> F:
    """A pass-through that costs one extra Python call, with the contract's attributes."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def passthrough_async(*args: Any, **kwargs: Any) -> Any:
            return await func(*args, **kwargs)

        wrapper: Any = passthrough_async
    else:

        @functools.wraps(func)
        def passthrough(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        wrapper = passthrough
    wrapper.results = []
    wrapper.last_result = None
    wrapper.skipped_calls = 0
    return wrapper


def wrap_callable(func: F, options: Options) -> F:
    """Wrap ``func`` so that calls inside its window are captured with ``options``.

    ``NEURONSCOPE_DISABLE`` is read at each call, so a function decorated while it is set
    captures once it is unset; ``enabled=False`` gives a plain pass-through for good.
    """
    if isinstance(func, (staticmethod, classmethod)):
        return type(func)(wrap_callable(func.__func__, options))
    _check_wrappable(func)
    if not options.enabled:
        return _disabled_wrapper(func)
    name = options.name or _describe(func)
    target = f"{getattr(func, '__module__', '?')}.{_describe(func)}"
    state = _DecoratedState(options, name, target)
    compiling = _compiling_check()
    # ``profile_on_neuron(model.forward)``: the bound method's module is the capture's root,
    # as ``self`` is for a forward decorated in the class body.
    bound = getattr(func, "__self__", None)
    bound_module = bound if _is_module_instance(bound) else None

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            # Each asyncio task has its own scope: an unprofiled pass or a capture here holds
            # this task's awaits, not the other tasks' that interleave with it.
            entry = enter(state)
            if entry is OFF:
                return await func(*args, **kwargs)
            try:
                value = await func(*args, **kwargs)
            except BaseException as exc:
                deliver(state, entry, exc)
                raise
            deliver(state, entry, None)
            return value

        wrapper: Any = async_wrapper
    else:

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                # torch.compile is tracing this call: the wrapper's own code would only break
                # the graph (locks, the profiler), and the compiled code will not run it anyway.
                # A plain store (no read, so no guard), replayed on each compiled call.
                state.compiled_through = True
                return func(*args, **kwargs)
            entry = enter(state)  # past the window: an unprofiled pass, in a few reads
            if entry is OFF:
                return func(*args, **kwargs)
            root = bound_module if bound_module is not None else args[0] if args and _is_module_instance(args[0]) else None
            if entry.kind is CAPTURE and root is not None:
                # A decorated forward: its module's own call began before the capture, so the
                # module calls inside are named by their paths in it (model.layers.1.mlp).
                set_capture_root(root, entry)
            try:
                value = func(*args, **kwargs)
            except BaseException as exc:
                deliver(state, entry, exc)
                raise
            if entry.kind is CAPTURE:
                deliver(state, entry, None)
            else:
                leave(entry, None)
            return value

        wrapper = sync_wrapper
    _own_code(wrapper, func)
    wrapper.results = state.results
    wrapper.last_result = None
    wrapper.skipped_calls = 0
    wrapper.__neuronscope_state__ = state
    state.wrapper = wrapper
    windows.add_owner(state)
    return wrapper


def _own_code(wrapper: Any, func: Any) -> None:
    """Give ``wrapper`` a code object of its own, named after ``func``. torch.compile keeps
    its compiled graphs per code object, so wrappers sharing one would share one cache (8
    entries by default, then eager) and every graph would be named ``sync_wrapper``."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        return
    code = wrapper.__code__
    fields: dict[str, Any] = {"co_name": name}
    if hasattr(code, "co_qualname"):  # Python 3.11+
        fields["co_qualname"] = getattr(func, "__qualname__", name)
    wrapper.__code__ = code.replace(**fields)


def _compiling_check() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (True only while torch.compile traces; about 50 ns a
    call otherwise), or a function returning False on a torch without it."""
    try:
        import torch

        return torch.compiler.is_compiling
    except (ImportError, AttributeError):  # pragma: no cover - torch < 2.3
        return _never


def _never() -> bool:
    return False


class ProfiledModule(wrapt.ObjectProxy):
    """A module instance whose calls (``model(x)``) are captured; otherwise it is the model."""

    def __init__(self, module: Any, options: Options) -> None:
        super().__init__(module)
        name = options.name or type(module).__name__
        call = functools.partial(type(module).__call__, module)
        functools.update_wrapper(call, type(module).forward if hasattr(type(module), "forward") else module)
        self._self_call: Any = wrap_callable(call, options.with_name(name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_call(*args, **kwargs)

    @property
    def results(self) -> list[ProfileResult]:
        return self._self_call.results

    @property
    def last_result(self) -> ProfileResult | None:
        return self._self_call.last_result

    @property
    def skipped_calls(self) -> int:
        return int(getattr(self._self_call, "skipped_calls", 0))


def _is_module_instance(obj: Any) -> bool:
    try:
        from torch import nn
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, nn.Module)


@overload
def profile_on_neuron(func: F, /) -> F: ...
@overload
def profile_on_neuron(func: None = None, /, **options: Any) -> Callable[[F], F]: ...


def profile_on_neuron(func: Any = None, /, **options: Any) -> Any:
    """Profile calls of a function, method, ``forward``, module instance or ``async def``.

    Use bare (``@profile_on_neuron``) or with options (``@profile_on_neuron(name="attn",
    warmup=2, active=1, backend="cpu")``). The wrapped callable keeps its name, docstring and
    signature, and gains ``.results`` (every ``ProfileResult``, oldest first) and
    ``.last_result`` (or None).

    The call window: ``warmup`` calls (default 1) run unprofiled, so compilation and
    first-touch costs stay out of the measurement; then ``active`` calls (default 1) are each
    captured to their own run directory; then the wrapper is a pass-through that costs about a
    microsecond. A decorated ``forward`` in a 10,000-step loop therefore profiles one step, not
    10,000. Pass ``warmup=0`` to capture the very first call, ``active=None`` to capture every
    call. Inside another capture, a call becomes a labelled range of it instead.

    Options are validated here, so a bad one raises :class:`NeuronscopeError` at decoration
    time. ``enabled=False`` makes it a plain pass-through; ``NEURONSCOPE_DISABLE=1`` does too,
    read at each call. Either way the wrapper keeps ``.results`` and ``.last_result``.
    """
    defaults = {"warmup": DEFAULT_WARMUP, "active": DEFAULT_ACTIVE}
    opts = build_options(defaults, **options)
    if opts.backend not in ("auto", "cpu") and opts.enabled and not disabled_by_env():
        from neuronscope.capture import check_backend_available

        check_backend_available(opts.backend)

    def decorate(target: Any) -> Any:
        if _is_module_instance(target):
            # Disabled too: code that reads model.last_result must run with the switch on.
            return ProfiledModule(target, opts)
        return wrap_callable(target, opts)

    if func is None:
        return decorate
    return decorate(func)
