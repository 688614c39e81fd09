"""One training step captured from a trainer's hooks: what both integrations share.

A trainer that owns the loop gives callbacks a "step begins" and a "step ends" hook, never a
``with`` block, so the step's capture is a region entered in one hook and exited in another
(:class:`HeldRegion`). Inside it, three labelled regions:

- ``forward``: opened and closed by the integration (a forward hook on the model, or the
  trainer's own ``training_step`` bracket);
- ``backward``: the trainer's own backward bracket (Lightning), or where the trainer has
  none (Hugging Face's Trainer calls ``accelerator.backward`` between two callback hooks),
  from the end of the model's forward in training (its forward hook) to the next forward,
  the optimizer's step or the step's end: the backward, with what little runs beside it
  (a loss computed outside the model, gradient clipping). Nothing of torch's is replaced;
- ``optimizer``: ``torch.optim``'s global step hooks; when the step is given a closure (as
  Lightning does, to run forward and backward inside ``optimizer.step``), the label opens when
  the closure returns, so it holds the parameter update alone.

Every hook is installed when a captured step begins and removed when it ends: a step that is
not captured runs with none of them, and no torch class is patched.
"""

from __future__ import annotations

import atexit
import functools
import threading
from collections.abc import Container, Iterable, Mapping
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from neuronscope.capture.observe import Observation
from neuronscope.drive.scope import capturing
from neuronscope.errors import ConfigError, NeuronscopeError
from neuronscope.region import neuron_region
from neuronscope.result.types import ProfileResult

__all__ = ["HeldRegion", "StepCapture", "StepNotFinished", "check_options", "parse_steps"]

#: The call-window options of a region: a trainer integration chooses its steps itself.
_WINDOW_OPTIONS = ("warmup", "active")


class StepNotFinished(NeuronscopeError):
    """Recorded (never raised) as the error of a capture whose step never reached its end hook:
    the training stopped inside it (an exception) before the trainer called the hook."""


class HeldRegion:
    """A ``neuron_region`` entered in one trainer hook and exited in another.

    The only place the integrations drive a region: :meth:`neuron_region.start` here, and the
    region's exit with the step's exception (if any) in :meth:`close`.
    """

    __slots__ = ("region",)

    def __init__(self, name: str, options: Mapping[str, Any], observed: Observation | None = None) -> None:
        self.region = neuron_region(name, **options)
        # What was observed before this step (the step before it): the capture's hints take
        # exact data flow from it, as a decorated function's capture does from its warm-up.
        self.region.observed = observed
        self.region.start()

    def close(self, exc: BaseException | None = None) -> ProfileResult | None:
        """Exit the region (``exc``: the exception that ended the step, if any); the result of
        the capture that held it, or None when nothing was captured."""
        tb = None if exc is None else exc.__traceback__
        self.region.__exit__(None if exc is None else type(exc), exc, tb)
        return self.region.result


def parse_steps(steps: int | Iterable[int], first: int) -> Container[int]:
    """The step numbers to capture, from an int or an iterable of ints, each at least ``first``;
    a ``ConfigError`` naming the bad value otherwise. A ``range`` stays a range (``range(100,
    10**9, 1000)``: every thousandth step of a long run, without a billion-item set)."""
    if isinstance(steps, range):
        if not steps:
            raise ConfigError(f"steps is empty: {steps!r} names no step")
        if min(steps[0], steps[-1]) < first:
            raise ConfigError(f"steps must be whole numbers from {first} (the first step), got {steps!r}")
        return steps
    items = [steps] if isinstance(steps, int) else steps
    try:
        chosen = list(items)
    except TypeError:
        raise ConfigError(f"steps must be a step number or an iterable of step numbers, got {steps!r}") from None
    for step in chosen:
        if isinstance(step, bool) or not isinstance(step, int) or step < first:
            raise ConfigError(f"steps must be whole numbers from {first} (the first step), got {step!r} in {steps!r}")
    if not chosen:
        raise ConfigError("steps is empty: name at least one step to capture, e.g. steps=[3]")
    return frozenset(chosen)


def check_options(name: str, options: Mapping[str, Any], owner: str) -> neuron_region:
    """Validate a capture's options now (a bad option fails when the callback or profiler is
    built, not at the captured step) and return a region that says whether capture is on."""
    for key in _WINDOW_OPTIONS:
        if key in options:
            raise ConfigError(f"{owner} chooses its steps itself: pass steps=/schedule=, not {key}=")
    if "name" in options:
        raise ConfigError(f"{owner} takes name= once, as its own argument")
    return neuron_region(name, **options)


class StepCapture:
    """The capture of one training step, with its labelled regions and the hooks that open them.

    Built when the step begins (on the thread that runs it); :meth:`finish` ends it. Hooks fire
    on every thread, but only the capturing thread's calls are labelled.
    """

    def __init__(self, name: str, options: Mapping[str, Any], observed: Observation | None = None) -> None:
        self.name = name
        self.thread = threading.get_ident()
        self._held: dict[str, HeldRegion] = {}
        self._depth: dict[str, int] = {}
        self._optimizer_depth = 0
        self._handles: list[Any] = []
        self._finished = False
        self.outer = HeldRegion(name, options, observed)
        # Another capture (on another thread) or the user's own torch.profiler may hold the
        # profiler: then this step runs uncaptured (the region counted it) and gets no labels.
        self.capturing = capturing()
        _unfinished.add(self)
        if not self.capturing:
            return
        try:
            self._handles.append(register_optimizer_step_pre_hook(self._before_optimizer_step))
            self._handles.append(register_optimizer_step_post_hook(self._after_optimizer_step))
        except BaseException:
            self.finish()
            raise

    # ---- labels ----------------------------------------------------------------------------
    def open(self, label: str) -> None:
        """Open the labelled region ``label`` (counted: a nested open of the same label is held
        by the outer one)."""
        if not self.capturing or self._finished or threading.get_ident() != self.thread:
            return
        depth = self._depth.get(label, 0)
        self._depth[label] = depth + 1
        if depth == 0:
            self._held[label] = HeldRegion(label, {})

    def close(self, label: str) -> None:
        """Close what :meth:`open` opened; a close without an open does nothing."""
        if threading.get_ident() != self.thread:
            return
        depth = self._depth.get(label, 0)
        if depth == 0:
            return
        self._depth[label] = depth - 1
        if depth == 1:
            held = self._held.pop(label, None)
            if held is not None:
                held.close()

    # ---- the optimizer's step hooks ----------------------------------------------------------
    def _before_optimizer_step(self, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if threading.get_ident() != self.thread:
            return None
        self._optimizer_depth += 1
        if self._optimizer_depth > 1:  # an optimizer wrapper stepping the optimizer it wraps
            return None
        self.close("backward")  # a backward labelled from the forward's end ends here at the latest
        # args[0] is the optimizer itself; a closure comes as closure= or as args[1].
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if closure is None:
            self.open("optimizer")
            return None

        @functools.wraps(closure)
        def closure_then_label() -> Any:
            value = closure()
            self.open("optimizer")  # the closure's forward and backward are not the update
            return value

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_label}
        return (args[0], closure_then_label, *args[2:]), kwargs

    def _after_optimizer_step(self, optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if threading.get_ident() != self.thread or self._optimizer_depth == 0:
            return
        self._optimizer_depth -= 1
        if self._optimizer_depth == 0:
            self.close("optimizer")

    # ---- the end ---------------------------------------------------------------------------
    def finish(self, exc: BaseException | None = None) -> ProfileResult | None:
        """Close the labels, remove the hooks and end the capture; its result (None when the
        step ran uncaptured). Safe to call twice."""
        if self._finished:
            return None
        self._finished = True
        _unfinished.discard(self)
        try:
            for label in reversed(list(self._held)):
                self._held.pop(label).close()
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()
            result = self.outer.close(exc)
        return result

    def abandon(self, why: str) -> ProfileResult | None:
        """End a capture whose step never reached its end hook, recording ``why`` as its error."""
        return self.finish(StepNotFinished(why))


# ---- a step that never ended -------------------------------------------------------------------
# Why global: the atexit hook below must find every step still open in the process.
_unfinished: set[StepCapture] = set()


@atexit.register
def _finish_at_exit() -> None:
    """An exception inside a captured step ends the script before the trainer's end hook runs:
    export what was measured, marked as an error, rather than lose it with the profiler."""
    for capture in list(_unfinished):
        try:
            capture.abandon("the training stopped inside this step, before the trainer's end-of-step hook")
        except Exception:  # at exit, nothing more can be done
            pass
