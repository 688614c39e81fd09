"""The CUDA backend: CPU and CUDA activities; the device is synchronised before the capture ends."""

from __future__ import annotations

from typing import Any

from neuronscope.capture.base import Backend

__all__ = ["CudaBackend", "cuda_available"]


def cuda_available() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver install must not break CPU users
        return False


class CudaBackend(Backend):
    """Records CPU ops and the kernels, copies and sets they launch (through CUPTI)."""

    name = "cuda"

    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def device_name(self) -> str | None:
        import torch

        return str(torch.cuda.get_device_name())

    def extra_notes(self, table_has_device: bool) -> list[str]:
        if table_has_device:
            return []
        return [
            (
                "no CUDA activity was recorded: either nothing ran on the GPU, or CUPTI could not "
                "start (check that no other profiler such as nsys holds it)"
            )
        ]
