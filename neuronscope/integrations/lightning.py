"""neuronscope as a Lightning profiler: ``Trainer(profiler=NeuronscopeProfiler())``.

    from neuronscope.integrations.lightning import NeuronscopeProfiler

    trainer = lightning.pytorch.Trainer(max_steps=100, profiler=NeuronscopeProfiler())
    trainer.fit(model, loader)   # training batch 2 is captured; the summary comes at the end

It follows Lightning's ``PyTorchProfiler``: a ``schedule`` (``torch.profiler.schedule``) says
which training batches to capture, counted from 0 as that schedule counts them; recording
stops at the schedule's first ``RECORD_AND_SAVE``, as Lightning's does; ``dirpath`` /
``filename`` say where the run directories and the summary go; and the summary (each capture's
tables, regions and hints) is printed or written when the stage ends. Each captured batch is one
neuronscope capture named ``<name>.step<N>``, in its own run directory, with ``forward`` (the
``training_step``), ``backward`` and ``optimizer`` (the parameter update alone) as regions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import Profiler
from torch.profiler import ProfilerAction
from torch.profiler import schedule as torch_schedule

from neuronscope.capture.observe import Observation, begin_observation, end_observation
from neuronscope.drive.scope import set_capture_root
from neuronscope.errors import ConfigError
from neuronscope.integrations.steps import StepCapture, check_options
from neuronscope.result.types import ProfileResult

__all__ = ["NeuronscopeProfiler"]

#: The action Lightning wraps around each training batch: a captured step is this action.
BATCH_ACTION = "run_training_batch"
_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def default_schedule() -> Callable[[int], ProfilerAction]:
    """Skip batch 0, warm up on batch 1, capture batch 2: the first batches hold one-time costs
    (allocation, autotuning, compilation) that a look at a typical step should leave out."""
    return torch_schedule(wait=1, warmup=1, active=1)


class NeuronscopeProfiler(Profiler):
    """A Lightning ``Profiler`` whose captures are neuronscope captures (results and hints).

    ``dirpath``: the run directories' root (default: neuronscope's, ``NEURONSCOPE_OUTPUT_DIR`` or
    ``./neuronscope-runs``); the summary file goes there too when ``filename`` is given (else
    into Lightning's log directory, as Lightning's profilers do), and without ``filename`` the
    summary is logged on rank 0. ``schedule``: a ``torch.profiler.schedule`` over training
    batches (default: wait 1, warm up 1, capture 1). ``name``: captures are named
    ``<name>.step<N>``. ``row_limit``: op rows per capture in the summary. Other keywords are
    neuronscope's options, checked here. ``results`` holds the captures, oldest first.
    """

    # A class default: Lightning's Profiler.__del__ calls teardown even on an object whose
    # __init__ refused its options.
    _capture: StepCapture | None = None
    _observing: Any = None
    _observed: Observation | None = None

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        name: str = "lightning",
        row_limit: int = 20,
        **options: Any,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        if "output_dir" in options:
            raise ConfigError("NeuronscopeProfiler takes dirpath= (Lightning's name for it), not output_dir=")
        if schedule is not None:
            if not callable(schedule):
                raise ConfigError(f"schedule must be a torch.profiler.schedule(...), got {schedule!r}")
            if not isinstance(schedule(0), ProfilerAction):
                raise ConfigError("schedule must return torch.profiler.ProfilerAction values, as torch.profiler.schedule does")
        if dirpath is not None:
            options["output_dir"] = str(dirpath)
        self._probe = check_options(name, options, "NeuronscopeProfiler")
        self.name = name
        self.options = options
        self.row_limit = row_limit
        self.schedule = schedule or default_schedule()
        self.results: list[ProfileResult] = []
        self._capture: StepCapture | None = None
        self._batches = 0  # training batches seen in this stage
        self._observing: Any = None  # the observation pass over the batch before a captured one
        self._observed: Observation | None = None  # what it observed, for the next capture
        self._saved = False  # the schedule said RECORD_AND_SAVE: recording is over

    # ---- Lightning's profiler interface ------------------------------------------------------
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank=local_rank, log_dir=log_dir)
        self._batches = 0
        self._saved = False

    def start(self, action_name: str) -> None:
        capture = self._capture
        if capture is None:
            if action_name == BATCH_ACTION:
                self._batch_begins()
            return
        if action_name.startswith("[Strategy]"):
            if action_name.endswith(".training_step"):
                capture.open("forward")
            elif action_name.endswith(".backward"):
                capture.open("backward")

    def stop(self, action_name: str) -> None:
        if action_name == BATCH_ACTION and self._observing is not None:
            handle, self._observing = self._observing, None
            self._observed = end_observation(handle)
        capture = self._capture
        if capture is None:
            return
        if action_name == BATCH_ACTION:
            # Lightning stops its actions in a finally block: an exception that ends the batch
            # is the one being handled now, and the capture records it.
            self._finish(sys.exc_info()[1])
        elif action_name.startswith("[Strategy]"):
            if action_name.endswith(".training_step"):
                capture.close("forward")
            elif action_name.endswith(".backward"):
                capture.close("backward")

    def summary(self) -> str:
        if not self.results:
            return ""
        return self._stats_to_str({f"{r.name} ({r.run_dir or 'not exported'})": r.table(self.row_limit) for r in self.results})

    def teardown(self, stage: str | None) -> None:
        if self._observing is not None:
            handle, self._observing = self._observing, None
            end_observation(handle)
        if self._capture is not None:  # the stage ended inside a captured batch
            self._finish(sys.exc_info()[1], unfinished=True)
        super().teardown(stage=stage)

    # ---- the schedule ----------------------------------------------------------------------
    def _batch_begins(self) -> None:
        index = self._batches
        self._batches += 1
        if self._saved:
            return
        action = self.schedule(index)
        if action not in _RECORDING and self.schedule(index + 1) in _RECORDING and self._probe.enabled and self.options.get("hints", True):
            # The batch before a captured one is observed, as a decorated function's last
            # warm-up call is: exact data flow, the user's lines and the idioms' constants.
            self._observing = begin_observation()
            return
        if action not in _RECORDING or not self._probe.enabled:
            return
        self._saved = action == ProfilerAction.RECORD_AND_SAVE
        observed, self._observed = self._observed, None
        self._capture = StepCapture(f"{self.name}.step{index}", self.options, observed)
        module = getattr(self, "_lightning_module", None)  # set by the Trainer for every profiler
        if module is not None and self._capture.capturing:
            # training_step calls the model's children directly: name them by their paths in it
            set_capture_root(module)

    def _finish(self, exc: BaseException | None, unfinished: bool = False) -> None:
        capture = self._capture
        assert capture is not None
        self._capture = None
        if unfinished and exc is None:
            result = capture.abandon("the stage ended inside this batch, before run_training_batch stopped")
        else:
            result = capture.finish(exc)
        if result is not None:
            self.results.append(result)
