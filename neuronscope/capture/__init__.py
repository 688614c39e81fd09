"""Backends behind one small interface: ``cpu``, ``cuda`` and ``neuron``.

``resolve_backend`` turns the ``backend`` option into a :class:`~.base.Backend`: ``"auto"``
prefers Neuron, then CUDA, then CPU. torch-neuronx is imported only when the Neuron backend is
chosen or detected.

The capture stage takes the options and the user's code and gives a
:class:`~.record.CaptureRecord` (the finished profiler, wall time, what the capture turned on by
itself). It also holds what runs torch under measurement outside the profiler: :mod:`.timing`
(compare()'s rounds), :mod:`.idioms` and :mod:`.verify` (``hint.verify()``), and
:mod:`.torch_private`, the one home of torch's private names.
"""

from __future__ import annotations

import importlib.util

from neuronscope.capture.base import (
    Backend,
    Capture,
    WrongThreadError,
    claim_profiler,
    force_profiler_off,
    profiler_claimed,
    profiler_running,
    release_profiler,
)
from neuronscope.capture.cpu import CpuBackend
from neuronscope.capture.cuda import CudaBackend, cuda_available
from neuronscope.capture.record import CaptureRecord, CaptureSession
from neuronscope.config import Options
from neuronscope.errors import BackendUnavailableError

__all__ = [
    "Backend",
    "Capture",
    "CaptureRecord",
    "CaptureSession",
    "WrongThreadError",
    "check_backend_available",
    "claim_profiler",
    "force_profiler_off",
    "profiler_claimed",
    "profiler_running",
    "release_profiler",
    "resolve_backend",
]


def _neuron_available() -> bool:
    # Without torch-neuronx (most machines) that is the answer: neuron_api's import (10 ms,
    # 40 ms on a busy machine) is left out of a first capture that runs on the CPU or CUDA.
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    from neuronscope.capture.neuron_api import neuron_available

    return neuron_available()


def check_backend_available(backend: str | type) -> None:
    """Raise :class:`BackendUnavailableError` with the fix when ``backend`` cannot run here."""
    if backend == "cuda" and not cuda_available():
        raise BackendUnavailableError(
            "backend 'cuda' needs a CUDA build of torch and a visible GPU, and none is present "
            "here; pass backend='cpu' or backend='auto'"
        )
    if backend == "neuron":
        from neuronscope.capture.neuron_api import require_neuron

        require_neuron()


def resolve_backend(options: Options) -> Backend:
    """The backend object for ``options.backend`` (``"auto"`` picks the best present; a
    Backend subclass is built with ``options``)."""
    if not isinstance(options.backend, str):
        backend: Backend = options.backend(options)
        return backend
    name = options.backend
    if name == "auto":
        if _neuron_available():
            name = "neuron"
        elif cuda_available():
            name = "cuda"
        else:
            name = "cpu"
    check_backend_available(name)
    if name == "neuron":
        from neuronscope.capture.neuron import NeuronBackend

        return NeuronBackend(options)
    if name == "cuda":
        return CudaBackend(options)
    return CpuBackend(options)
