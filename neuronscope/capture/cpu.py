"""The CPU backend: plain ``torch.profiler`` with the CPU activity. No device time."""

from __future__ import annotations

from .base import Backend

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """Records CPU ops only; ``OpStat`` device fields stay None."""

    name = "cpu"
