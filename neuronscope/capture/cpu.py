"""The CPU backend: plain ``torch.profiler`` with the CPU activity. No device time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuronscope.capture.base import Backend
from neuronscope.capture.neuron_files import StrayRuntimeOutput
from neuronscope.config import Options

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """Records CPU ops only; ``OpStat`` device fields stay None."""

    name = "cpu"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        # A loaded TorchNeuron starts its runtime trace in CPU captures too (see the class).
        self._stray = StrayRuntimeOutput()
        self._scratch: Path | None = None
        self._stray_record: dict[str, Any] | None = None

    @property
    def writes_session_files(self) -> bool:
        """With TorchNeuron loaded, its runtime writes a session during a CPU capture too: the
        run directory then exists from the start, so that those files can be moved into it."""
        return self._stray.neuron_loaded()

    def environment_warnings(self) -> list[str]:
        return self._stray.warnings()

    def profiler_kwargs(self, scratch_dir: Path | None) -> dict[str, Any]:
        self._scratch = scratch_dir
        self._stray.snapshot()
        return {}

    def _collected(self) -> dict[str, Any]:
        if self._stray_record is None:  # once, whichever of the two hooks comes first
            self._stray_record = self._stray.collect(self._scratch)
        return self._stray_record

    def extra_notes(self, table_has_device: bool) -> list[str]:
        found = self._collected().get("neuron_runtime_side_effect")
        return [found["note"]] if found else []

    def collect_artifacts(self, prof: Any, scratch_dir: Path | None) -> dict[str, Any]:
        return self._collected()
