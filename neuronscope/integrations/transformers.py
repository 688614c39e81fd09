"""Capture chosen optimizer steps of a Hugging Face ``Trainer``.

    from neuronscope.integrations.transformers import ProfileCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[ProfileCallback(steps=[3])])
    trainer.train()          # step 3 is captured; the one line says where it went

Each captured optimizer step is one capture, named ``<name>.step<N>`` and written to its own run
directory: all the micro-batches of gradient accumulation, the gradient clipping, the optimizer
step and the scheduler, with ``forward``, ``backward`` and ``optimizer`` as labelled regions.
Steps are numbered as the Trainer numbers them (``state.global_step`` once the step is done:
1 is the first optimizer step). Under ``torchrun`` every rank captures the same steps and rank 0
gathers the ranks, as for any neuronscope capture.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from neuronscope.capture.observe import Observation, begin_observation, end_observation
from neuronscope.integrations.steps import StepCapture, check_options, parse_steps
from neuronscope.result.types import ProfileResult

__all__ = ["ProfileCallback"]


class ProfileCallback(TrainerCallback):
    """A ``TrainerCallback`` that captures the optimizer steps in ``steps`` as neuronscope
    captures, one run directory each, and leaves every other step alone.

    ``steps``: a step number or several (a list, a ``range``), counted from 1 as the Trainer's
    ``global_step``. The default, 2, keeps the first step's one-time costs out. ``name``: the
    captures are named ``<name>.step<N>``. Other keywords are neuronscope's options
    (``output_dir``, ``backend``, ``with_stack``, ``hints``, ``print_summary``, ...), checked here.
    ``results`` holds what was captured, oldest first.
    """

    def __init__(self, steps: int | Iterable[int] = 2, name: str = "hf_trainer", **options: Any) -> None:
        self.steps = parse_steps(steps, first=1)
        self._probe = check_options(name, options, "ProfileCallback")
        self.name = name
        self.options = options
        self.results: list[ProfileResult] = []
        self._capture: StepCapture | None = None
        self._model: torch.nn.Module | None = None
        self._forward_hooks: list[Any] = []
        self._observing: Any = None  # the observation pass over the step before a captured one
        self._observed: Observation | None = None  # what it observed, for the next capture

    # ---- Trainer hooks ---------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.close()  # a previous train() stopped inside a captured step

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        step = state.global_step + 1  # the number this step gets when it ends
        if step not in self.steps and step + 1 in self.steps and self._probe.enabled and self.options.get("hints", True):
            # The step before a captured one is observed, as a decorated function's last
            # warm-up call is: the capture's hints then get exact data flow, the user's
            # lines and the idioms' constants (eps) from it.
            self._observing = begin_observation()
            return
        if step not in self.steps or not self._probe.enabled:
            return
        self.close()
        observed, self._observed = self._observed, None
        self._capture = StepCapture(f"{self.name}.step{step}", self.options, observed)
        model = kwargs.get("model")
        if self._capture.capturing and isinstance(model, torch.nn.Module):
            capture = self._capture

            def forward_begins(module: torch.nn.Module, inputs: Any) -> None:
                capture.close("backward")  # a micro-batch's backward ends where the next forward begins
                capture.open("forward")

            def forward_ends(module: torch.nn.Module, inputs: Any, output: Any) -> None:
                capture.close("forward")
                # The Trainer runs the backward next (accelerator.backward, which offers no
                # hook): labelled from here to the next forward, optimizer step or step end.
                if module.training and torch.is_grad_enabled():
                    capture.open("backward")

            self._forward_hooks = [
                model.register_forward_pre_hook(forward_begins),
                model.register_forward_hook(forward_ends, always_call=True),
            ]

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._end_observation()
        capture = self._capture
        if capture is None:
            return
        self._capture = None
        self._remove_forward_hooks()
        result = capture.finish()
        if result is not None:
            self.results.append(result)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """End a capture whose step never reached ``on_step_end`` (an exception stopped the
        training inside it), keeping what it measured, marked as an error. Runs by itself at the
        next ``train()`` and at interpreter exit; call it to get the result sooner."""
        self._end_observation()
        capture = self._capture
        if capture is None:
            return
        self._capture = None
        self._remove_forward_hooks()
        result = capture.abandon("the training stopped inside this step, before on_step_end")
        if result is not None:
            self.results.append(result)

    # ---- helpers ---------------------------------------------------------------------------
    def _end_observation(self) -> None:
        handle, self._observing = self._observing, None
        if handle is not None:
            self._observed = end_observation(handle)

    def _remove_forward_hooks(self) -> None:
        for handle in self._forward_hooks:
            handle.remove()
        self._forward_hooks = []
