"""STAND-IN for torch-neuronx, generation "legacy": an early (April 2026) build. NOT TorchNeuron.

Follows the notes on the TorchNeuron source of that time (shared/research/neuron-api.md, S1):
``torch_neuronx.profiling`` has no ``NeuronConfig`` and no ``ProfileMode``, only
``NeuronProfiler(pytorch_activities=None, record_shapes=False, pytorch_trace_file=None,
neuron_output_dir="./output", event_filters=None)`` and ``NRTProfilerError``; the Kineto plugin
(reading ``custom_profiler_config``) is registered too. The runtime writes its files directly
under ``<dir>/i-<id>_pid_<pid>/`` (no timestamp level) and copies the NEFFs itself.
See ../../common.py for what is emulated.
"""

import importlib.util as _util
import sys as _sys
import types as _types
from pathlib import Path as _Path

_spec = _util.spec_from_file_location(f"{__name__}._standin", _Path(__file__).resolve().parents[2] / "common.py")
_standin = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = _standin
_spec.loader.exec_module(_standin)

__version__ = "0.1.0+standin.legacy"
GENERATION = "legacy"

_standin.BEHAVIOUR["layout"] = "flat"
_standin.BEHAVIOUR["runtime_writes_neffs"] = True

neuron = _standin.make_device_module(__name__)
synchronize = _standin.synchronize


def _nrt_config_allocate():
    return {"output_dir": "./output", "enable": False, "cores": []}


def _nrt_set_output_dir(config, path):
    config["output_dir"] = path
    return 0


def _nrt_set_enable_inspect(config, enable):
    config["enable"] = bool(enable)
    return 0


def _nrt_set_capture_enabled_for_nc(config, nc, enable):
    if enable:
        config["cores"].append(int(nc))
    return 0


def _nrt_begin_with_options(config):
    _standin.nrt_begin(
        config["output_dir"],
        {"runtime", "device"},
        sorted(config["cores"]) or None,
        via="nrt_bindings",
    )
    return 0


def _nrt_stop():
    _standin.nrt_stop()
    return 0


# The private extension module: the runtime bindings that NeuronProfiler calls.
_C = _types.SimpleNamespace(
    _nrt_inspect_config_allocate=_nrt_config_allocate,
    _nrt_inspect_config_set_defaults=lambda config: 0,
    _nrt_inspect_config_set_output_dir=_nrt_set_output_dir,
    _nrt_inspect_config_set_enable_inspect=_nrt_set_enable_inspect,
    _nrt_inspect_config_set_capture_enabled_for_nc=_nrt_set_capture_enabled_for_nc,
    _nrt_inspect_config_set_capture_enabled_for_event_type_string=lambda config, name, enable: 0,
    _nrt_inspect_begin_with_options=_nrt_begin_with_options,
    _nrt_inspect_stop=_nrt_stop,
    _set_profiler_mapping_enabled=lambda enabled: None,
    _get_profiler_mappings=lambda: {"data": [{"nrt_seq_id": 1, "seq_nr": 7, "thread": 1, "stream": 0}]},
)

_standin.register(_sys.modules[__name__])

from . import profiling
from .profiling import NeuronProfiler

__all__ = ["GENERATION", "NeuronProfiler", "neuron", "profiling", "synchronize"]
