"""The Neuron backend (AWS Trainium through TorchNeuron). Placeholder until issue 3 lands."""

from __future__ import annotations

import importlib.util

from ..errors import BackendUnavailableError
from .base import Backend

__all__ = ["NeuronBackend", "neuron_available", "require_neuron"]


def neuron_available() -> bool:
    """True when torch-neuronx is installed and a Neuron device is visible."""
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    try:
        import torch
        import torch_neuronx  # noqa: F401

        return bool(torch.neuron.is_available())  # type: ignore[attr-defined]
    except Exception:
        return False


def require_neuron() -> None:
    if not neuron_available():
        raise BackendUnavailableError(
            "backend 'neuron' needs torch-neuronx and a Neuron device; install it from the "
            "Neuron repository (pip install neuronscope[neuron] on a Trainium host) or pass "
            "backend='cpu'"
        )


class NeuronBackend(Backend):
    name = "neuron"
