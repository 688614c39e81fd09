"""STAND-IN for torch-neuronx, generation "config": the documented profiling API. NOT TorchNeuron.

Follows the Neuron 2.31/2.32 docs (how-to-profile-workload) and the latest page's first part:
``torch_neuronx.profiling`` has ``ProfileMode`` (DEVICE, RUNTIME, CPU_UTIL, HOST_MEMORY),
``NeuronConfig(...)`` (an ``_ExperimentalConfig``, passed as ``experimental_config``) and
``NeuronProfiler(config)`` whose ``export_trace(prof)`` is the ``on_trace_ready`` callback and
writes ``trace.json`` into the per-process session directory. Session files go to
``<profile_output_dir>/i-<id>_pid_<pid>/<timestamp>/``. See ../../common.py for what is emulated.
"""

import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

_spec = _util.spec_from_file_location(f"{__name__}._standin", _Path(__file__).resolve().parents[2] / "common.py")
_standin = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = _standin
_spec.loader.exec_module(_standin)

__version__ = "2.33.0+standin.config"
GENERATION = "config"

neuron = _standin.make_device_module(__name__)
synchronize = _standin.synchronize


class _DynamoBackendModule:
    neuron_backend = staticmethod(_standin.neuron_backend)


neuron_dynamo_backend = _DynamoBackendModule()

_standin.register(_sys.modules[__name__])

from . import profiling
from .profiling import NeuronProfiler

__all__ = ["GENERATION", "NeuronProfiler", "neuron", "profiling", "synchronize"]
