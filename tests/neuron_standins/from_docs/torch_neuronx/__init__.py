"""STAND-IN for torch-neuronx (TorchNeuron, Neuron 2.33), built from the docs. NOT TorchNeuron.

Importing it does what ``import torch_neuronx`` does for profiling: registers the ``neuron``
device module and the Kineto plugin (a real C++ child profiler of the installed torch's
libkineto, see ../../kineto_plugin.cpp). ``torch_neuronx.profiling`` has ``ProfileMode``,
``NeuronConfig`` and ``NeuronProfiler`` as the docs describe them. See ../../common.py for what
is emulated and what is not.
"""

import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

_spec = _util.spec_from_file_location(f"{__name__}._standin", _Path(__file__).resolve().parents[2] / "common.py")
_standin = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = _standin
_spec.loader.exec_module(_standin)

#: The first public TorchNeuron with the NeuronConfig API (Neuron 2.33, torch 2.13).
__version__ = "2.13.3.0+standin"
STANDIN = "from_docs"

neuron = _standin.make_device_module(__name__)
synchronize = _standin.synchronize


class _DynamoBackendModule:
    neuron_backend = staticmethod(_standin.neuron_backend)


neuron_dynamo_backend = _DynamoBackendModule()

_standin.register(_sys.modules[__name__])

from . import profiling
from .profiling import NeuronProfiler

__all__ = ["STANDIN", "NeuronProfiler", "neuron", "profiling", "synchronize"]
